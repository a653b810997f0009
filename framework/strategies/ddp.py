"""Distributed data parallel: a full copy of the model per process, gradients averaged in backward."""

import atexit
import contextlib
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from framework.checks import is_int
from framework.errors import MisconfigurationError
from framework.io.checkpoint_io import CheckpointIO
from framework.strategies.parallel import ParallelStrategy, StepRouter, broadcast_from_rank_zero, routed


class DDPStrategy(ParallelStrategy):
    """One process per device, each with the whole model; gradients all-reduced during ``backward``.

    ``gloo`` on CPU, ``nccl`` on CUDA. When no launcher started the processes, the Trainer starts
    them: by default it forks them where that is safe (a machine without GPUs) and otherwise runs
    the script again for them (or, from pytest or a notebook, starts them from a forkserver).

    :param start_method: ``"auto"`` (default), ``"fork"``, ``"spawn"``, ``"forkserver"`` or ``"popen"``: how the
        ranks no launcher started are started (see :class:`~framework.strategies.ParallelStrategy`).
    :param timeout: how long a collective may wait: a ``datetime.timedelta`` or seconds; ``None`` (default): 30 min.
    :param process_group_backend: ``None`` (default): ``"nccl"`` on CUDA, ``"gloo"`` elsewhere; or another backend.
    :param ddp_comm_state: the state the communication hook is registered with (``None`` by default).
    :param ddp_comm_hook: a DDP communication hook in place of the gradient all-reduce
        (``torch.distributed.algorithms.ddp_comm_hooks``: fp16/bf16 compression, PowerSGD), as in Lightning;
        ``None`` (default): DDP's own all-reduce.
    :param ddp_comm_wrapper: with a hook, ``ddp_comm_wrapper(ddp_comm_hook)`` is registered instead of the hook;
        ``None`` (default): the hook itself.
    :param max_restarts: where the Trainer starts the ranks itself, how many times it starts them all again when
        one is killed by a signal (the run resumes from its newest complete checkpoint), as ``framework launch
        --max-restarts`` does; 0 (default): never.
    :param checkpoint_io: what saves, loads and removes checkpoint files (``framework.plugins``); ``None``
        (default): ``TorchCheckpointIO``. ``Trainer(plugins=[...])`` replaces it.
    :param ddp_kwargs: other keyword arguments go to ``torch.nn.parallel.DistributedDataParallel``
        (``find_unused_parameters=True``...).
    :raises MisconfigurationError: where ``max_restarts`` is not an int >= 0, or as
        :class:`~framework.strategies.ParallelStrategy` says.

    Example::

        Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(find_unused_parameters=True))
        DDPStrategy(ddp_comm_hook=default_hooks.fp16_compress_hook)
    """

    name = "ddp"

    def __init__(self, start_method: str = "auto", timeout: timedelta | float | None = None,
                 process_group_backend: str | None = None, ddp_comm_state: Any = None,
                 ddp_comm_hook: Callable[..., Any] | None = None, ddp_comm_wrapper: Callable[..., Any] | None = None,
                 max_restarts: int = 0, checkpoint_io: CheckpointIO | None = None, **ddp_kwargs: Any) -> None:
        super().__init__(start_method, timeout, process_group_backend, checkpoint_io)
        if not is_int(max_restarts) or max_restarts < 0:
            raise MisconfigurationError(f"DDPStrategy(max_restarts={max_restarts!r}): accepted a whole number >= 0.")
        self.max_restarts = max_restarts
        self.ddp_kwargs = ddp_kwargs
        self.ddp_comm_state = ddp_comm_state
        self.ddp_comm_hook = ddp_comm_hook
        self.ddp_comm_wrapper = ddp_comm_wrapper
        self._backward_prepares: DistributedDataParallel | None = None  # manual optimization's model

    # -- set-up ---
    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move ``module`` to the device and wrap it in DistributedDataParallel (when it has trainable parameters)."""
        module = module.to(self.device)
        if self.world_size == 1 or not any(p.requires_grad for p in module.parameters()):
            return module
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DistributedDataParallel(StepRouter(module), device_ids=device_ids, **self.ddp_kwargs)
        release_at_exit(wrapped)
        if self.ddp_comm_hook is not None:
            hook = self.ddp_comm_hook if self.ddp_comm_wrapper is None else self.ddp_comm_wrapper(self.ddp_comm_hook)
            wrapped.register_comm_hook(state=self.ddp_comm_state, hook=hook)
        return wrapped

    def unwrap(self, module: nn.Module) -> nn.Module:
        """The user's module inside the DistributedDataParallel wrapper."""
        if isinstance(module, DistributedDataParallel):
            module = module.module
        return module.module if isinstance(module, StepRouter) else module

    # -- the step ---
    def step_function(self, model: nn.Module, name: str, synced: bool | None = None,
                      method: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """``training_step`` runs through DDP's forward (so its gradients sync); evaluation steps run directly.

        Evaluating outside DDP's forward keeps it free of collectives, so ranks may hold
        different numbers of evaluation batches.
        """
        synced = name == "training_step" if synced is None else synced
        if name == "training_step":
            # A training step run outside DDP's forward (manual optimization: backward happens inside the step,
            # before DDP's forward could prepare for it) has each backward prepare DDP's gradient sync itself.
            self._backward_prepares = None if synced or not isinstance(model, DistributedDataParallel) else model
        step = method if method is not None else getattr(self.unwrap(model), name)
        if not synced or not isinstance(model, DistributedDataParallel):
            return step
        return routed(model, model.module, step)

    def backward(self, loss: torch.Tensor, module: nn.Module | None = None, *args: Any, **kwargs: Any) -> None:
        """Compute gradients through the precision; in manual optimization, with DDP's gradient sync prepared first
        (what its forward does for a step run through it)."""
        model = self._backward_prepares
        if model is not None and torch.is_grad_enabled() and model.require_backward_grad_sync:
            model.require_forward_param_sync = True
            model.reducer._rebuild_buckets()  # as DDP's forward does before its first backward
            unused_search = model.find_unused_parameters and not model.static_graph
            model.reducer.prepare_for_backward([loss] if unused_search else [])
        self.precision.backward(loss, *args, **kwargs)

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """DDP's ``no_sync()``: gradients accumulate locally until a backward outside it."""
        if enabled and isinstance(module, DistributedDataParallel):
            return module.no_sync()
        return contextlib.nullcontext()

    def broadcast_buffers(self, module: nn.Module) -> None:
        """Give every rank rank 0's buffers (BatchNorm statistics), as DDP's forward does before each training step.

        Evaluation bypasses DDP's forward; without this each rank would evaluate with the
        statistics its own last batch left, and the synced metrics would mix models.
        """
        if self._in_group() and isinstance(module, DistributedDataParallel) and module.broadcast_buffers:
            broadcast_from_rank_zero(list(module.module.buffers()))


_WRAPPED: weakref.WeakSet[DistributedDataParallel] = weakref.WeakSet()


def release_at_exit(wrapped: DistributedDataParallel) -> None:
    """Have ``wrapped``'s gradient reducer and process group dropped when the process exits, while the interpreter
    is still whole.

    A wrapper the script still holds at exit (a prepared model in a global, the Trainer's model)
    keeps gloo's threads running past ``destroy_process_group()``; left to C++'s teardown after
    Python's, they can abort a rank that had finished ("terminate called without an active
    exception", SIGABRT, and the launcher reports a failure).
    """
    if not _WRAPPED:
        atexit.register(_release_wrapped)  # runs before the process group is destroyed at exit (registered later)
    _WRAPPED.add(wrapped)


def _release_wrapped() -> None:
    for wrapped in list(_WRAPPED):
        for name in ("logger", "reducer", "process_group"):  # DDP's logger holds the reducer too
            wrapped.__dict__.pop(name, None)
    _WRAPPED.clear()
