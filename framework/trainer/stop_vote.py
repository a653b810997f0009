"""The ranks' agreement on stopping, exchanged while the next batch trains.

``should_stop`` set on one rank (by a hook or a callback: EarlyStopping, or the Timer that
``max_time`` adds, on that rank's clock) must stop every rank after the same batch, or the ranks' collectives stop
matching and training hangs. Agreeing on it after every batch with a blocking all-reduce
costs a round trip per step (~0.4 ms with gloo on a small CPU machine, 5% of a small step);
started in the background instead, it travels while the next batch computes, and every
rank acts on it one batch later, at the same batch.

A preemption signal (:mod:`framework.runtime.preemption_signals`) travels in the same exchange: a rank that received one
wishes to save and leave, and every rank learns it at the same batch.
"""

from __future__ import annotations

from typing import Any

import torch


class StopVote:
    """Each rank's stop wish of one batch; the agreement (any rank's wish) comes back at the next.

    ``preempted`` is the agreement on the other wish, to save and leave after a preemption signal; it is
    set by the same exchanges.

    Example::

        vote = StopVote(runtime)
        stop = vote.exchange(trainer.should_stop)   # the previous batch's agreement
        ...
        stop = vote.finish()   # when the batches end: the last agreement
    """

    def __init__(self, runtime: Any) -> None:
        self._strategy = runtime.strategy
        # The wishes are host values: exchanged from host memory (over gloo where the ranks' group is nccl) and
        # read through a numpy view of it, so the vote never waits for a device.
        self._buffer = torch.zeros(2)
        self._values = self._buffer.numpy()
        self._pending: Any = None
        self._wished = False
        self.preempted = False

    def exchange(self, should_stop: bool, already_agreed: bool = False, preempt: bool = False) -> bool:
        """Send this batch's wish; returns whether any rank wished to stop one batch ago.

        ``already_agreed``: ``should_stop`` is True on every rank already (agreed after a
        validation): it is returned at once, not a batch later. ``preempt``: this rank received a
        preemption signal (``preempted`` turns True on every rank one batch later).
        """
        stop = self.finish()
        self._wished = (self._wished or should_stop) and not stop
        self._values[0] = float(self._wished)
        self._values[1] = float(preempt)
        self._pending = self._strategy.start_all_reduce(self._buffer, "max")
        return stop or already_agreed

    def finish(self) -> bool:
        """Wait for the last exchange; whether a rank wished to stop (False when none is under way)."""
        if self._pending is None:
            return False
        self._pending()
        self._pending = None
        self.preempted = self.preempted or bool(self._values[1])
        return bool(self._values[0])
