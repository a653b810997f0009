"""``GradientState``: what the prepared optimizer, scheduler and dataloaders share about the current batch."""

from __future__ import annotations

from typing import Any


class LoaderPass:
    """One pass over a prepared dataloader while it runs: whether the batch just handed out is its last, and how
    many of the samples gathered from all ranks in that last round are real (the rest repeat earlier samples so
    every rank has a full batch; 0: none repeated; -1: unknown)."""

    __slots__ = ("at_end", "remainder", "loader")

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.at_end = False
        self.remainder = 0


class GradientState:
    """Whether gradients are synced on this batch (so the optimizer steps), and where the innermost prepared
    dataloader being iterated stands (``end_of_dataloader``, ``remainder``), under Accelerate's names.

    ``num_steps``: batches per optimizer step; ``sync_with_dataloader``: a pass's last batch
    always ends an accumulation window; ``sync_each_batch``: all-reduce on every batch anyway
    (less memory, more communication); ``adjust_scheduler``: kept for Accelerate's API.
    """

    def __init__(self, num_steps: int = 1, sync_with_dataloader: bool = True, sync_each_batch: bool = False,
                 adjust_scheduler: bool = True) -> None:
        self.num_steps = num_steps
        self.sync_with_dataloader = sync_with_dataloader
        self.sync_each_batch = sync_each_batch
        self.adjust_scheduler = adjust_scheduler
        self.sync_gradients = True
        self._passes: list[LoaderPass] = []  # the prepared loaders being iterated, innermost last

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation settings, as Accelerate's ``GradientAccumulationPlugin`` holds them."""
        return {"num_steps": self.num_steps, "sync_with_dataloader": self.sync_with_dataloader,
                "sync_each_batch": self.sync_each_batch, "adjust_scheduler": self.adjust_scheduler}

    @property
    def in_dataloader(self) -> bool:
        """Whether a prepared dataloader is being iterated."""
        return bool(self._passes)

    @property
    def active_dataloader(self) -> Any:
        """The innermost prepared dataloader being iterated, or None."""
        return self._passes[-1].loader if self._passes else None

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the batch the innermost prepared dataloader just handed out is the last of its pass."""
        return bool(self._passes) and self._passes[-1].at_end

    @property
    def remainder(self) -> int:
        """How many samples of the last gathered round are real (``gather_for_metrics`` keeps those); 0 when none
        was repeated, -1 when unknown."""
        return self._passes[-1].remainder if self._passes else -1

    def begin(self, loader: Any) -> LoaderPass:
        """A pass over ``loader`` starts (passes nest: a validation loop inside training)."""
        current = LoaderPass(loader)
        self._passes.append(current)
        return current

    def end(self, current: LoaderPass) -> None:
        """The pass ``current`` ended (or was left early)."""
        if current in self._passes:
            self._passes.remove(current)
