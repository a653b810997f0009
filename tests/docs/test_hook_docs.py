"""Every hook is described on each class that has it (``Module``, ``Callback``, ``DataModule``), and what the
description says of logging and of its arguments agrees with the hook table the loops read and with the
method's signature. Import only: fast."""

from __future__ import annotations

import inspect
import re

import pytest

from framework import Callback, DataModule, Module
from framework.hooks import Hook, Owner

OWNERS = {Owner.MODULE: Module, Owner.CALLBACK: Callback, Owner.DATAMODULE: DataModule}
CASES = [(hook, owner) for hook in Hook for owner in OWNERS if owner in hook.owners
         and inspect.isfunction(getattr(OWNERS[owner], hook.value, None))]


def _parameters(function) -> list[str]:
    return [name for name, parameter in inspect.signature(function).parameters.items()
            if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]


def test_every_hook_of_the_table_is_checked_on_each_class_that_has_it():
    assert len(CASES) > 90
    assert (Hook.ON_SANITY_CHECK_START, Owner.CALLBACK) in CASES and (Hook.SETUP, Owner.DATAMODULE) in CASES


@pytest.mark.parametrize(("hook", "owner"), CASES, ids=[f"{OWNERS[o].__name__}.{h.value}" for h, o in CASES])
def test_a_hook_says_when_it_runs_where_whether_it_may_log_and_each_argument(hook, owner):
    function = getattr(OWNERS[owner], hook.value)
    text = inspect.getdoc(function) or ""
    description = re.split(r"\n\s*\nRuns ", text)[0]
    assert description and not description.startswith("Runs "), f"{hook.value} on {owner}: no description"
    assert re.search(r"^Runs (on every process|on one process per node|on each process whose)", text, re.M), text
    if owner is not Owner.DATAMODULE:
        logs = "works here" if hook.may_log else "raises a ``MisconfigurationError`` here"
        logger = "pl_module.log" if owner is Owner.CALLBACK else "self.log"
        assert f"``{logger}`` {logs}" in text, text
    fields = re.findall(r"^:param (\w+):", text, re.M)
    assert fields == _parameters(function), f"{OWNERS[owner].__name__}.{hook.value}: fields {fields}"


def test_a_callback_is_not_told_the_modules_return_values_nor_shown_its_examples():
    text = inspect.getdoc(Callback.on_train_batch_start)
    assert ":returns:" not in text and ":returns:" in inspect.getdoc(Module.on_train_batch_start)
    assert "def on_train_epoch_end(self)" in inspect.getdoc(Module.on_train_epoch_end)
    assert "Example::" not in inspect.getdoc(Callback.on_train_epoch_end)
