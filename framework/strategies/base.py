"""The Strategy contract: how a module is placed, wrapped, synchronised and saved."""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError, describe
from framework.io.async_writer import save_through
from framework.io.checkpoint_io import CheckpointIO, TorchCheckpointIO, load_through
from framework.precision.base import Precision


@dataclass(frozen=True)
class Ranks:
    """This process's place among the processes of a run (all zeros and ones for one process).

    :param world_size: the number of processes in the run, over all nodes (default 1).
    :param global_rank: this process's index among all of them, from 0.
    :param local_rank: this process's index among the processes of its node, from 0.
    :param node_rank: the index of this process's node, from 0.
    :param local_world_size: the number of processes on this process's node (default 1).
    """

    world_size: int = 1
    global_rank: int = 0
    local_rank: int = 0
    node_rank: int = 0
    local_world_size: int = 1


class Strategy:
    """Where the model runs and how ranks talk to each other.

    Subclasses (DDP, sharded, FSDP) override the methods they change; the loops only
    call these methods and never ask which strategy is in use. The base implements one
    process on one device, so the collectives return their input.

    :param checkpoint_io: what saves, loads and removes checkpoint files (``framework.plugins``); ``None``
        (default): ``TorchCheckpointIO``. ``Trainer(plugins=[...])`` replaces it.
    :raises MisconfigurationError: where ``checkpoint_io`` is neither ``None`` nor a ``CheckpointIO``.
    """

    #: What messages call the strategy (each subclass sets its own: ``"ddp"``, ``"fsdp"``, ...).
    name = "base"
    #: Whether the strategy runs one process per device (and so may need the ranks started).
    multi_process = False
    #: Whether ``setup_module`` puts sharded parameters in place of the module's own (FSDP's ``fully_shard`` does).
    replaces_parameters = False

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        self.device = torch.device("cpu")
        self.precision = Precision()
        self.ranks = Ranks()
        if checkpoint_io is not None and not isinstance(checkpoint_io, CheckpointIO):
            raise MisconfigurationError(f"{type(self).__name__}(checkpoint_io={describe(checkpoint_io)}): accepted "
                                        "None or a CheckpointIO (framework.plugins).")
        self._checkpoint_io = checkpoint_io

    def connect(self, device: torch.device, precision: Precision, ranks: Ranks | None = None) -> None:
        """Called by the Runtime once it has resolved the device, the precision and (when distributed) the ranks."""
        self.device = device
        self.precision = precision
        if ranks is not None:
            self.ranks = ranks

    def precision_for(self, precision: Precision) -> Precision:
        """The precision to run with, given the one asked for (here that one; DeepSpeed maps it to its own)."""
        return precision

    def set_training_options(self, accumulate_grad_batches: int = 1, gradient_clip_val: float | None = None,
                             gradient_clip_algorithm: str | None = None, micro_batch_size: int | None = None) -> None:
        """What the training loop will do, for a strategy whose engine must know it before set-up (DeepSpeed's
        config holds accumulation and clipping); here nothing."""

    # -- ranks ---
    @property
    def root_device(self) -> torch.device:
        """The device this rank computes on (Lightning's name for ``device``)."""
        return self.device

    @property
    def precision_plugin(self) -> Precision:
        """The precision in use, under Lightning's name."""
        return self.precision

    @property
    def world_size(self) -> int:
        """Number of processes taking part, over all nodes."""
        return self.ranks.world_size

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.ranks.global_rank

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.ranks.local_rank

    @property
    def node_rank(self) -> int:
        """This node's index."""
        return self.ranks.node_rank

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is global rank 0."""
        return self.global_rank == 0

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` for a DistributedSampler, or None when not distributed."""
        return None

    # -- set-up ----------------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Start the process group, where there is one."""

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """The context for creating a module on this strategy's device (sharded strategies may use meta)."""
        return torch.device(self.device)

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move ``module`` to the device and wrap it (DDP, fully_shard) where needed."""
        return module.to(self.device)

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Wrap ``optimizer`` where the strategy shards its state."""
        return optimizer

    def unwrap(self, module: nn.Module) -> nn.Module:
        """The user's module inside whatever ``setup_module`` wrapped it in."""
        return module

    # -- the step ---
    def step_function(self, model: nn.Module, name: str, synced: bool | None = None,
                      method: Callable[..., Any] | None = None) -> Any:
        """The callable that runs the user's method ``name`` (``training_step`` ...) on the set-up ``model``.

        Wrapping strategies route it through the wrapper's ``forward`` so their hooks run, where
        ``synced`` (default: for ``training_step`` only). ``method``: what runs in place of the
        module's own method (its compiled version).
        """
        return method if method is not None else getattr(self.unwrap(model), name)

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Context for gradient-accumulation micro-batches: no gradient sync across ranks."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, module: nn.Module | None = None, *args: Any, **kwargs: Any) -> None:
        """Compute gradients of ``loss`` through the precision; ``module`` is for strategies that need the model."""
        self.precision.backward(loss, *args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: Any = None, **kwargs: Any) -> bool:
        """Step ``optimizer`` through the precision; False when the step was skipped."""
        return self.precision.optimizer_step(optimizer, closure, **kwargs)

    @property
    def supports_inference_mode(self) -> bool:
        """Whether evaluation may run under ``torch.inference_mode`` (else ``no_grad``)."""
        return True

    def evaluating(self, model: nn.Module, every_rank_same_batches: bool) -> contextlib.AbstractContextManager:
        """The context evaluation runs in; ``every_rank_same_batches``: whether all ranks run as many batches."""
        return contextlib.nullcontext()

    def clip_gradients_norm(
        self, module: nn.Module, optimizer: Optimizer, max_norm: float, norm_type: float = 2.0,
        error_if_nonfinite: bool = False,
    ) -> torch.Tensor:
        """Unscale, then clip ``optimizer``'s gradients to total norm ``max_norm``; returns the norm they had before."""
        self.precision.unscale(optimizer)
        return torch.nn.utils.clip_grad_norm_(_parameters_of(optimizer), max_norm, norm_type=norm_type,
                                              error_if_nonfinite=error_if_nonfinite)

    def clip_gradients_value(self, module: nn.Module, optimizer: Optimizer, clip_value: float) -> None:
        """Unscale, then clamp each gradient of ``optimizer``'s parameters to ``[-clip_value, clip_value]``."""
        self.precision.unscale(optimizer)
        torch.nn.utils.clip_grad_value_(_parameters_of(optimizer), clip_value)

    # -- collectives ---
    def all_reduce(self, tensor: torch.Tensor, reduce_op: str = "mean") -> torch.Tensor:
        """Reduce ``tensor`` over all ranks by ``reduce_op`` ("mean", "sum", "max", "min"); here ``tensor`` itself."""
        return tensor

    def start_all_reduce(self, tensor: torch.Tensor, reduce_op: str = "sum") -> Any:
        """Start reducing ``tensor`` in place over all ranks; returns a function that waits and returns it."""
        return lambda: tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Stack ``tensor`` from every rank along a new first dimension."""
        return tensor.unsqueeze(0)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """``obj`` as rank ``src`` has it, on every rank; here ``obj`` itself."""
        return obj

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (any picklable object), in rank order."""
        return [obj]

    def barrier(self, name: str | None = None) -> None:
        """Wait until every rank reaches this point (``name`` labels it); here it returns at once."""
        pass

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """The same decision on every rank: all ranks agree (``all``) or any rank wants it."""
        return decision

    def broadcast_buffers(self, module: nn.Module) -> None:
        """Give every rank rank 0's buffers (BatchNorm statistics) of the set-up ``module``; nothing on one process."""

    def without_collectives(self) -> contextlib.AbstractContextManager:
        """Inside it, collectives return this rank's own values at once (a rank handling its own failure)."""
        return contextlib.nullcontext()

    # -- checkpoints ---
    @property
    def saves_on_one_rank(self) -> bool:
        """Whether one rank alone (one failing, say) can write a whole checkpoint: False where the ranks' parts
        must be gathered or written together."""
        return True

    def module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """The ``state_dict()`` of the user's module inside any wrapper, as checkpoints hold it."""
        return self.unwrap(module).state_dict()

    def full_module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        """``module_state_dict`` with every tensor whole, as one process holds it (every rank calls)."""
        return self.module_state_dict(module)

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """``optimizer``'s ``state_dict()`` as checkpoints hold it (ZeRO-1 gathers it on rank 0; every rank calls)."""
        return optimizer.state_dict()

    def load_module_state(self, module: nn.Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Load a checkpoint's ``state_dict`` into the user's module inside the set-up ``module``."""
        return self.unwrap(module).load_state_dict(state_dict, strict=strict)

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Load a checkpoint's optimizer ``state`` (as ``optimizer_state`` gave it) into ``optimizer``."""
        optimizer.load_state_dict(state)

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """What saves, loads and removes this strategy's checkpoint files: ``TorchCheckpointIO`` unless set
        (``Trainer(plugins=[...])`` sets it)."""
        if self._checkpoint_io is None:
            self._checkpoint_io = TorchCheckpointIO()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, checkpoint_io: CheckpointIO | None) -> None:
        self._checkpoint_io = checkpoint_io

    #: Whether checkpoints are written by the strategy itself, not through ``checkpoint_io`` (sharded ones).
    writes_own_checkpoints = False
    _checkpoint_io: CheckpointIO | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str,
                        storage_options: dict[str, Any] | None = None) -> None:
        """Write ``checkpoint`` to ``path`` through ``checkpoint_io`` (one file here; rank 0 only when distributed)."""
        if self.is_global_zero:
            save_through(self.checkpoint_io, checkpoint, path, storage_options)
        self.barrier("save_checkpoint")

    def load_checkpoint(self, path: str, weights_only: bool | None = None) -> dict[str, Any]:
        """Read the checkpoint at ``path`` through ``checkpoint_io`` (``TorchCheckpointIO`` puts every tensor on the
        CPU; ``weights_only=False``: unpickle too)."""
        return load_through(self.checkpoint_io, path, weights_only)

    def remove_checkpoint(self, path: str) -> None:
        """Delete the checkpoint at ``path`` through ``checkpoint_io`` (on global rank 0, which writes them)."""
        if self.is_global_zero:
            self.checkpoint_io.remove_checkpoint(path)

    def teardown(self) -> None:
        """The end of one run (fit, test ...): forget wrappers; the process group stays for the next run."""

    def end_process_group(self) -> None:
        """A barrier, then destroy the process group this strategy started (a rank's last act)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device})"


def _parameters_of(optimizer: Optimizer) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]
