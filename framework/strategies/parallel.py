"""What every strategy with one process per device shares: the process group and the collectives over it."""

import atexit
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from framework.checks import is_number
from framework.errors import MisconfigurationError, describe
from framework.io import pickling
from framework.io.checkpoint_io import CheckpointIO
from framework.strategies.base import Strategy
from framework.strategies.destroyed_groups import let_go_of_destroyed_groups
from framework.strategies.forked_children import end_forked_children_with_this_process
from framework.strategies.group_exit import all_ranks_leaving, group_started

# How the ranks no launcher started may be started (framework.runtime.start_method holds the rule for "auto").
START_METHODS = ("auto", "fork", "spawn", "forkserver", "popen")
_REDUCE_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN", "product": "PRODUCT"}


def start_process_group(backend: str, **options: Any) -> None:
    """``torch.distributed.init_process_group(backend, **options)``, counted for the ranks' meeting at their end
    (:mod:`~framework.strategies.group_exit`), and with forked workers ended with this rank where it has peers."""
    dist.init_process_group(backend, **options)
    group_started()
    if options.get("world_size", 1) > 1:
        end_forked_children_with_this_process()  # a killed rank's peers learn it at once, not from its workers


class StepRouter(nn.Module):
    """Makes a wrapper's forward run the user's ``training_step``: DDP syncs gradients only of what its
    forward ran, and FSDP gathers parameters in the hooks around it. Otherwise it calls the module
    (its hooks, and its forward compiled where ``compile=`` asked)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.__dict__["method"] = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["method"](*args, **kwargs)


def routed(wrapper: nn.Module, router: StepRouter, step: Callable[..., Any]) -> Callable[..., Any]:
    """A callable running ``step`` (the user's method) through ``wrapper``'s forward (``router`` is inside it)."""
    module = router.module

    def call(*args: Any, **kwargs: Any) -> Any:
        router.__dict__["method"] = step
        try:
            return wrapper(*args, **kwargs)
        finally:
            router.__dict__["method"] = module

    return call


def broadcast_from_rank_zero(tensors: list[torch.Tensor]) -> None:
    """Overwrite ``tensors`` (buffers: BatchNorm statistics) with rank 0's, one collective per dtype."""

    def from_rank_zero(flat: torch.Tensor) -> torch.Tensor:
        dist.broadcast(flat, src=0)
        return flat

    collective_by_dtype(tensors, from_rank_zero)


@torch.no_grad()
def collective_by_dtype(tensors: list[torch.Tensor], collective: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Overwrite ``tensors`` with what ``collective`` returns for them, called once per dtype on the tensors of
    that dtype flattened into one (one message per dtype, not one per tensor).

    Example::

        collective_by_dtype(list(model.parameters()), lambda flat: accelerator.reduce(flat, reduction="mean"))
    """
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        by_dtype.setdefault(tensor.dtype, []).append(tensor)
    for group in by_dtype.values():
        result = collective(torch.cat([tensor.detach().reshape(-1) for tensor in group]))
        for tensor, value in zip(group, result.split([tensor.numel() for tensor in group]), strict=True):
            tensor.copy_(value.view_as(tensor))


class ParallelStrategy(Strategy):
    """One process per device, joined in a process group (gloo on CPU, nccl on CUDA).

    The base of DDP, ZeRO-1 and FSDP: it starts and ends the process group and implements
    the collectives; subclasses decide how the module is wrapped.

    ``start_method`` is how the Trainer (or ``runtime.launch``) starts the ranks no launcher
    started. ``"auto"`` forks them where that is safe (no CUDA devices in the machine, CUDA not
    initialised, not macOS); elsewhere it runs the script again for ranks 1 .. N-1 with the calling
    process as rank 0, as torchrun and Lightning do, where there is a script, and starts them from
    a forkserver where there is none (pytest, a notebook, a REPL: what they run must then pickle).
    ``"fork"``, ``"spawn"``, ``"forkserver"`` and ``"popen"`` (the script run again) choose one; a
    fork where it is unsafe warns, naming the hazard. The full rule: ``framework.runtime.start_method``.

    :param start_method: ``"auto"`` (default), ``"fork"``, ``"spawn"``, ``"forkserver"`` or ``"popen"``, as
        above; any other value raises ``MisconfigurationError``.
    :param timeout: how long a collective may wait: a ``datetime.timedelta`` or a number of seconds above 0;
        ``None`` (default): 30 minutes, as in Lightning (torch's own default is 10 minutes for nccl).
    :param process_group_backend: the ``torch.distributed`` backend (``"gloo"``, ``"nccl"``...); ``None``
        (default): ``"nccl"`` on CUDA, ``"gloo"`` elsewhere.
    :param checkpoint_io: what saves, loads and removes checkpoint files (``framework.plugins``); ``None``
        (default): ``TorchCheckpointIO``. ``Trainer(plugins=[...])`` replaces it.
    :raises MisconfigurationError: where ``start_method`` is not one of those above, ``timeout`` is neither a
        ``timedelta`` nor a number of seconds above 0, or ``checkpoint_io`` is not a ``CheckpointIO``.
    """

    name = "parallel"
    multi_process = True

    def __init__(self, start_method: str = "auto", timeout: timedelta | float | None = None,
                 process_group_backend: str | None = None, checkpoint_io: CheckpointIO | None = None) -> None:
        super().__init__(checkpoint_io)
        if start_method not in START_METHODS:
            raise MisconfigurationError(
                f"{type(self).__name__}(start_method={describe(start_method)}): accepted "
                f"{', '.join(map(repr, START_METHODS))}."
            )
        self.start_method = start_method
        self.timeout = _as_timeout(timeout)
        self.process_group_backend = process_group_backend
        self._started_group = False
        self._gloo_group: Any = None  # for host tensors: "default" where the default group has gloo
        self._alone = False  # inside without_collectives()

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` (the world size) and ``rank`` (this process's global rank)."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    def backend(self) -> str:
        """The process group backend: the one asked for, else nccl on CUDA and gloo elsewhere."""
        return self.process_group_backend or ("nccl" if self.device.type == "cuda" else "gloo")

    # -- set-up ---
    def setup_environment(self) -> None:
        """Start the default process group (once per process; later runs reuse it).

        :raises MisconfigurationError: where several processes are to join and no launcher set ``MASTER_ADDR`` and
            ``MASTER_PORT``.
        """
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world_size == 1 or dist.is_initialized():
            return
        if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            raise MisconfigurationError(
                f"{type(self).__name__} is asked to join {self.world_size} processes, but no launcher set "
                "MASTER_ADDR/MASTER_PORT. Let the Trainer or runtime.launch() start the processes, or use "
                "`framework launch` / torchrun."
            )
        start_process_group(self.backend, rank=self.global_rank, world_size=self.world_size, timeout=self.timeout)
        self._started_group = True
        # A rank that leaves with the group alive can abort gloo in a peer still closing it (SIGABRT at exit).
        atexit.register(self._end_at_exit)

    # -- collectives ---
    def all_reduce(self, tensor: torch.Tensor, reduce_op: Any = "mean") -> torch.Tensor:
        """A new tensor: ``tensor`` reduced over all ranks by ``reduce_op`` ("mean", "sum", "max", "min")."""
        if not self._in_group():
            return tensor
        mean = isinstance(reduce_op, str) and reduce_op.lower() in ("mean", "avg")
        op = dist.ReduceOp.SUM if mean else _reduce_op(reduce_op)
        result = tensor.detach().to(self.device, copy=True)  # nccl reduces only CUDA tensors
        if mean and not result.is_floating_point():
            result = result.float()
        dist.all_reduce(result, op=op)
        return result / self.world_size if mean else result

    def start_all_reduce(self, tensor: torch.Tensor, reduce_op: str = "sum") -> Callable[[], torch.Tensor]:
        """Start reducing ``tensor`` in place (``reduce_op``: "sum", "max", "min"); the returned function waits."""
        if not self._in_group():
            return lambda: tensor
        group = self._host_group() if tensor.device.type == "cpu" else None
        work = dist.all_reduce(tensor, op=_reduce_op(reduce_op), group=group, async_op=True)

        def wait() -> torch.Tensor:
            work.wait()
            return tensor

        return wait

    def _host_group(self) -> Any:
        """The group that reduces host tensors: the default one where it has gloo, else a gloo group made once
        (nccl reduces only device tensors, and a host value sent through the device would wait for it)."""
        if self._gloo_group is None:
            if "gloo" in str(dist.get_backend()):
                self._gloo_group = "default"
            else:  # a collective: every rank gets here at the same vote
                self._gloo_group = dist.new_group(backend="gloo")
        return None if isinstance(self._gloo_group, str) else self._gloo_group

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` from every rank (all of one shape), stacked along a new first dimension."""
        if not self._in_group():
            return tensor.unsqueeze(0)
        tensor = tensor.contiguous()
        gathered = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(gathered, tensor)
        return torch.stack(gathered)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """``obj`` as rank ``src`` has it (any picklable object), on every rank."""
        if not self._in_group():
            return obj
        holder = [pickling.dumps(obj) if self.global_rank == src else None]  # tensors without torch.save: io.pickling
        dist.broadcast_object_list(holder, src=src)
        return obj if self.global_rank == src else pickling.loads(holder[0])

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (any picklable object), in rank order."""
        if not self._in_group():
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, pickling.dumps(obj))
        return [pickling.loads(data) for data in gathered]

    def barrier(self, name: str | None = None) -> None:
        """Wait until every rank reaches this point (``name`` labels it and changes nothing)."""
        if not self._in_group():
            return
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """True on every rank when every rank (``all``) or any rank decided True."""
        if not self._in_group():
            return decision
        count = torch.tensor(int(bool(decision)), device=self.device)
        dist.all_reduce(count, op=dist.ReduceOp.SUM)
        votes = int(count.item())
        return votes == self.world_size if all else votes > 0

    @contextlib.contextmanager
    def without_collectives(self) -> Iterator[None]:
        """Inside it, collectives return this rank's own values at once (a rank handling its own failure)."""
        alone, self._alone = self._alone, True
        try:
            yield
        finally:
            self._alone = alone

    def _in_group(self) -> bool:
        return self.world_size > 1 and not self._alone and dist.is_initialized()


    # -- end ---
    def end_process_group(self) -> None:
        """Once every rank is at its end (``EXIT_WAIT_S`` seconds at most: see ``group_exit``), destroy the process
        group if this strategy started it."""
        if self._started_group and dist.is_initialized():
            self._leave_group()
        self._started_group = False
        self._gloo_group = None  # destroyed with the default group

    def _end_at_exit(self) -> None:
        if getattr(sys, "last_value", None) is not None:
            return  # this rank dies of an error: the others may never reach their end
        if self._started_group and dist.is_initialized():
            self._leave_group()
        self._started_group = False
        self._gloo_group = None

    def _leave_group(self) -> None:
        # No barrier: a rank that leaves early would wait in it while the others wait in another collective.
        if all_ranks_leaving(self.global_rank, self.world_size):
            try:
                dist.destroy_process_group()
            except RuntimeError:  # another rank is gone already: nothing left to close in order
                return
            let_go_of_destroyed_groups()  # so that gloo's threads end now, not in the interpreter's finalization

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device}, world_size={self.world_size}, rank={self.global_rank})"


def _reduce_op(reduce_op: Any) -> Any:
    if isinstance(reduce_op, str) and reduce_op.lower() in _REDUCE_OPS:
        return getattr(dist.ReduceOp, _REDUCE_OPS[reduce_op.lower()])
    if isinstance(reduce_op, dist.ReduceOp) or type(reduce_op).__name__ == "RedOpType":
        return reduce_op
    raise MisconfigurationError(
        f"reduce_op={describe(reduce_op)} is not supported. Accepted: 'mean', 'sum', 'max', 'min', 'product' "
        "or a torch.distributed.ReduceOp."
    )


def _as_timeout(timeout: timedelta | float | None) -> timedelta:
    if timeout is None:
        return timedelta(minutes=30)  # Lightning's default, and torch's for gloo (nccl's is 10 minutes)
    if isinstance(timeout, timedelta):
        return timeout
    if is_number(timeout) and timeout > 0:
        return timedelta(seconds=timeout)
    raise MisconfigurationError(
        f"timeout={describe(timeout)} is not accepted. Use a datetime.timedelta or a number of seconds above 0."
    )
