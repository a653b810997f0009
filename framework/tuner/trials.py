"""Trial runs of the Tuner: a Trainer like the user's, quiet, fitting the user's Module, whose weights are put
back afterwards, so a search changes neither the user's Trainer nor the Module's weights; the Module ends attached
to the user's Trainer, as after Lightning's searches."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from framework import console

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer


def trial_trainer(trainer: Trainer, callbacks: list[Any], **settings: Any) -> Any:
    """A Trainer made with ``trainer``'s arguments, without logger, checkpoints, bar or summary, with ``callbacks``
    and ``settings``; of ``trainer``'s own class, so the tuner needs no import of the Trainer."""
    arguments = {**trainer._init_arguments, "callbacks": callbacks, "logger": False, "enable_checkpointing": False,
                 "enable_progress_bar": False, "enable_model_summary": False, "fast_dev_run": False,
                 "barebones": False, "profiler": None, "auto_resume": False, **settings}
    return type(trainer)(**arguments)


@contextlib.contextmanager
def model_kept(model: torch.nn.Module, trainer: Trainer) -> Iterator[None]:
    """Put ``model``'s weights and buffers back as they were once the block ends, and attach it to the user's
    ``trainer`` (``model.trainer``, ``model.logger`` are the user's, as after Lightning's searches, which run on
    that Trainer). Inside, the model belongs to the trial runs: a search started from a hook of a running fit
    (whose hook state refuses ``self.log``) trains and logs as any run does."""
    saved = copy.deepcopy(model.state_dict())
    state = model.__dict__
    refused = state.get("_logging_refused_in")
    state["_logging_refused_in"] = None
    level = console.LOGGER.level
    console.LOGGER.setLevel(logging.WARNING)  # the trials' "`Trainer.fit` stopped" notes are not the user's run
    try:
        yield
    finally:
        console.LOGGER.setLevel(level)
        model.load_state_dict(saved)
        state["_trainer"], state["_logging_refused_in"] = trainer, refused
