"""Trial runs of the searches (the learning-rate range test, the batch-size search): a Trainer like the user's,
quiet, fitting the user's Module, whose weights are put back afterwards, so a search changes neither the user's
Trainer nor the Module's weights; the Module ends attached to the user's Trainer, as after Lightning's searches.
Also where a searched value lives (``holder_of``, ``write_value``)."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

import torch

from framework import console
from framework.protocols import TrainerLike


def trial_trainer(trainer: TrainerLike, callbacks: list[Any], **settings: Any) -> Any:
    """A Trainer made with ``trainer``'s arguments, without logger, checkpoints, bar or summary, with ``callbacks``
    and ``settings``; of ``trainer``'s own class, so the tuner needs no import of the Trainer."""
    arguments = {**trainer._init_arguments, "callbacks": callbacks, "logger": False, "enable_checkpointing": False,
                 "enable_progress_bar": False, "enable_model_summary": False, "fast_dev_run": False,
                 "barebones": False, "profiler": None, "auto_resume": False, **settings}
    return type(trainer)(**arguments)


@contextlib.contextmanager
def model_kept(model: torch.nn.Module, trainer: TrainerLike) -> Iterator[None]:
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


def holder_of(name: str, *owners: Any) -> Any:
    """The first of ``owners`` (None skipped) having ``name`` as an attribute or a hyperparameter, or None."""
    for owner in owners:
        if owner is not None and (name in getattr(owner, "hparams", {}) or hasattr(owner, name)):
            return owner
    return None


def write_value(owner: Any, name: str, value: Any) -> None:
    """Set ``name`` on ``owner``: the hyperparameter when it has one, and the attribute when it has one."""
    if name in getattr(owner, "hparams", {}):
        owner.hparams[name] = value
    if hasattr(owner, name) or name not in getattr(owner, "hparams", {}):
        setattr(owner, name, value)
