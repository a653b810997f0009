"""The Runtime's collectives over its ranks (Fabric's names): ``all_reduce``, ``all_gather``, ``broadcast``,
``barrier`` and the decisions and output that go with them. Each returns at once on one process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from framework.checks import is_number
from framework.errors import MisconfigurationError
from framework.nested import map_tensors


class CollectiveMethods:
    """The Runtime's methods that involve every rank."""

    def all_reduce(self, data: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Each tensor (or number) in ``data`` reduced over all ranks ("mean", "sum", "max", "min"); new tensors.

        :param data: a tensor or number, or lists, tuples and dicts of them (at any depth).
        :param group: only ``None`` (all ranks) is accepted.
        :param reduce_op: ``"mean"`` (the default), ``"sum"``, ``"max"`` or ``"min"``.
        """
        _only_default_group(group)
        return map_tensors(_numbers_as_tensors(data, self.device), lambda t: self.strategy.all_reduce(t, reduce_op))

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Each tensor in ``data`` from every rank, stacked along a new first dimension (of size world_size).

        :param data: a tensor or number, or lists, tuples and dicts of them (at any depth).
        :param group: only ``None`` (all ranks) is accepted.
        :param sync_grads: ``True``: gradients flow back through the gather to every rank's tensor; default ``False``.
        """
        _only_default_group(group)
        if sync_grads and self.world_size > 1:
            from torch.distributed.nn.functional import all_gather

            return map_tensors(_numbers_as_tensors(data, self.device), lambda t: torch.stack(all_gather(t)))
        return map_tensors(_numbers_as_tensors(data, self.device), self.strategy.all_gather)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """``obj`` (any picklable object) as rank ``src`` has it, on every rank; ``obj`` itself on one process.

        :param obj: any picklable object (each rank passes its own; ``src``'s is kept).
        :param src: the global rank whose ``obj`` every rank gets; default 0.
        """
        return self.strategy.broadcast(obj, src)

    def barrier(self, name: str | None = None) -> None:
        """Wait until every rank gets here; returns at once on one process.

        :param name: a label for this barrier; ``None`` (the default): none.
        """
        self.strategy.barrier(name)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """One decision for all ranks: every rank's (``all=True``) or any rank's; ``decision`` on one process.

        :param decision: this rank's decision.
        :param all: ``True`` (the default): True only where every rank decided True; ``False``: where any did.
        """
        return self.strategy.reduce_boolean_decision(decision, all)

    @contextlib.contextmanager
    def rank_zero_first(self, local: bool = False) -> Iterator[None]:
        """Run the block on rank 0 (of the node, with ``local``) first, then on the others (a download, say).

        Example::

            with runtime.rank_zero_first():
                dataset = MNIST("data", download=True)

        :param local: ``True``: each node's local rank 0 goes first; ``False`` (the default): global rank 0.
        """
        first = (self.local_rank if local else self.global_rank) == 0
        if not first:
            self.barrier("rank_zero_first")
        yield
        if first:
            self.barrier("rank_zero_first")

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each node's first process only."""
        if self.local_rank == 0:
            print(*args, **kwargs)


def _numbers_as_tensors(data: Any, device: torch.device) -> Any:
    """``data`` with every Python number in it (at any depth) made a tensor on ``device``, as Fabric's collectives
    take them."""
    def as_tensor(value: Any) -> Any:
        return torch.tensor(value, device=device) if is_number(value) else value

    return map_tensors(data, lambda tensor: tensor, other=as_tensor)


def _only_default_group(group: Any) -> None:
    if group is not None:
        raise MisconfigurationError("group= is not supported: collectives run over all ranks (group=None).")
