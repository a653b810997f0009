"""Trial runs of the Tuner: a Trainer like the user's, quiet, fitting the user's Module, whose weights are put
back afterwards, so neither the Module nor the user's Trainer is changed by a search."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch


def trial_trainer(trainer: Any, callbacks: list[Any], **settings: Any) -> Any:
    """A Trainer made with ``trainer``'s arguments, without logger, checkpoints, bar or summary, with ``callbacks``
    and ``settings``."""
    from framework.trainer import Trainer

    arguments = {**trainer._init_arguments, "callbacks": callbacks, "logger": False, "enable_checkpointing": False,
                 "enable_progress_bar": False, "enable_model_summary": False, "fast_dev_run": False,
                 "barebones": False, "profiler": None, **settings}
    return Trainer(**arguments)


@contextlib.contextmanager
def weights_kept(model: torch.nn.Module) -> Iterator[None]:
    """Put ``model``'s weights, buffers and Trainer back as they were once the block ends."""
    saved = copy.deepcopy(model.state_dict())
    attached = model.__dict__.get("_trainer")
    try:
        yield
    finally:
        model.load_state_dict(saved)
        model.__dict__["_trainer"] = attached
