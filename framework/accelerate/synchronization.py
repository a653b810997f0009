"""When the ``Accelerator`` all-reduces gradients: every ``gradient_accumulation_steps`` batches
(``accumulate``), never inside ``no_sync``, on demand (``trigger_sync_in_backward``), and with ranks that run
out of batches at different times (``join_uneven_inputs``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn

from framework.errors import MisconfigurationError
from framework.runtime.wrappers import forward_module


class GradientSync:
    """The part of ``Accelerator`` that decides when gradients are synced; it needs ``self._runtime``,
    ``self.gradient_state``, ``self.step``, ``self.use_distributed`` and ``self.even_batches``."""

    _runtime: Any
    gradient_state: Any
    step: int
    use_distributed: bool
    even_batches: bool

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Iterator[None]:
        """One batch of an accumulation window: ``sync_gradients`` is True on every
        ``gradient_accumulation_steps``-th batch and on a prepared dataloader's last; on the others the gradients
        of ``models`` are not all-reduced and the prepared optimizer and scheduler do not step.

        :param models: the prepared models whose all-reduce waits for the window's last batch (unless the plugin's
            ``sync_each_batch``); with none given, gradients are all-reduced on every batch (the optimizer still
            steps only when ``sync_gradients``).
        """
        self._advance()
        state = self.gradient_state
        sync = state.sync_gradients or (self.use_distributed and state.sync_each_batch)
        with contextlib.ExitStack() as stack:
            if not sync:
                for model in models:
                    stack.enter_context(self._runtime.no_backward_sync(model))
            yield

    def _advance(self) -> None:
        state = self.gradient_state
        if state.sync_with_dataloader and state.end_of_dataloader:
            self.step = 0
            state.sync_gradients = True
        else:
            self.step += 1
            state.sync_gradients = self.step % state.num_steps == 0

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """Backward passes inside this block leave ``model``'s gradients unreduced (they accumulate locally).

        :param model: a prepared model: DDP's ``no_sync()``, FSDP2's gradient sync turned off; on one process, or
            for a model not prepared, the block runs as it is.
        """
        return self._runtime.no_backward_sync(model)

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: nn.Module) -> Iterator[None]:
        """The next backward pass inside the block all-reduces ``model``'s gradients even inside ``no_sync`` (the
        last micro-batch of a window accumulated by hand).

        :param model: a prepared model; only one wrapped in DDP (several processes, no FSDP) is affected, for
            others the block runs as it is.
        """
        wrapped = forward_module(model)
        if not self.use_distributed or not isinstance(wrapped, nn.parallel.DistributedDataParallel):
            yield
            return
        saved = wrapped.require_backward_grad_sync, wrapped.require_forward_param_sync
        wrapped.require_backward_grad_sync = wrapped.require_forward_param_sync = True
        wrapped.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            wrapped.require_backward_grad_sync, wrapped.require_forward_param_sync = saved

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Iterator[None]:
        """Let DDP ranks that run out of batches early wait for the others (``torch.distributed.algorithms.Join``
        over ``joinables``, the prepared models): for loaders prepared with ``even_batches=False``. On one process,
        and with FSDP, the block runs as it is.

        :param joinables: a list of the prepared models; ``Join`` is used only when every item is (or wraps) a
            DDP model, else the block runs as it is.
        :param even_batches: ``None`` (the default) or the ``even_batches`` the loaders were prepared with;
            another value raises ``MisconfigurationError`` (Accelerate changes the loaders' setting for the block).
        :raises MisconfigurationError: where ``even_batches`` is given and differs from the loaders'.
        """
        if even_batches is not None and even_batches != self.even_batches:
            raise MisconfigurationError(
                f"join_uneven_inputs(even_batches={even_batches}): prepared loaders keep the even_batches they were "
                "prepared with; set Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=...)).")
        modules = [forward_module(item) if isinstance(item, nn.Module) else item for item in joinables]
        if not self.use_distributed or not all(isinstance(item, nn.parallel.DistributedDataParallel)
                                               for item in modules):
            yield
            return
        from torch.distributed.algorithms import Join

        with Join(modules):
            yield
