"""The Trainer and Module guide pages agree with the code: every Trainer argument is in one group's table with
its real default, and the Module page's hook tables name every hook, in the order a recorded run calls them,
with who may define it and whether ``self.log`` works there."""

from __future__ import annotations

import ast
import inspect
import re

import pytest
import torch

import framework
from framework.hooks import Hook, Owner
from tests.docs.site_build import DOCS
from tests.helpers import loader, quiet_trainer
from tests.test_hooks import CALLS, RecordingCallback, RecordingModule

TRAINER_PAGE = DOCS / "guide" / "trainer.md"
MODULE_PAGE = DOCS / "guide" / "module.md"
STEPS_MAY_LOG = {"training_step": True, "validation_step": True, "test_step": True, "predict_step": False}
SHARED_WITH_FIT = {"configure_callbacks", "prepare_data", "setup", "configure_model", "teardown",
                   "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"}
OWNER_WORDS = {"Module": Owner.MODULE, "callbacks": Owner.CALLBACK, "DataModule": Owner.DATAMODULE}


def _tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each Markdown table of ``text``: the nearest heading above it, its header cells, its rows' cells."""
    found, heading, lines, i = [], "", text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i].lstrip("#").strip()
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header, rows, i = _cells(lines[i]), [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            found.append((heading, header, rows))
            continue
        i += 1
    return found


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _code(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"expected one `name` in the cell {cell!r}"
    return match[1]


# -- the Trainer page ---

def _argument_rows() -> list[list[str]]:
    return [row for _, header, rows in _tables(TRAINER_PAGE.read_text()) if header[:2] == ["argument", "default"]
            for row in rows]


def test_every_trainer_argument_is_in_one_group_with_its_default():
    parameters = inspect.signature(framework.Trainer.__init__).parameters
    rows = _argument_rows()
    named = [_code(row[0]) for row in rows]
    assert sorted(named) == sorted(name for name in parameters if name != "self"), (
        "the Trainer page's argument tables must name each Trainer argument exactly once")
    wrong = {name: (row[1], parameters[name].default) for name, row in zip(named, rows)
             if ast.literal_eval(_code(row[1])) != parameters[name].default}
    assert not wrong, f"defaults on the page that the signature does not have (page, code): {wrong}"


# -- the Module page ---

def _hook_tables() -> dict[str, list[list[str]]]:
    return {heading: rows for heading, header, rows in _tables(MODULE_PAGE.read_text()) if header[1:2] == ["hook"]}


def test_the_hook_tables_name_every_hook_with_its_owners_and_logging():
    rows = [row for rows in _hook_tables().values() for row in rows]
    named = [_code(row[1]) for row in rows]
    assert not {hook.value for hook in Hook} - set(named), "hooks missing from the Module page's tables"
    for name, row in zip(named, rows):
        owners = Owner(0)
        for word in re.split(r",\s*|\s+or\s+", row[2]):
            owners |= OWNER_WORDS[word]
        may_log = STEPS_MAY_LOG[name] if name in STEPS_MAY_LOG else Hook(name).may_log
        assert owners == (Owner.MODULE if name in STEPS_MAY_LOG else Hook(name).owners), f"{name}: {row[2]}"
        assert row[4] == ("yes" if may_log else "no"), f"{name}: self.log {row[4]!r}, the hook table says {may_log}"


class _Scheduled(RecordingModule):
    """With a per-step scheduler, so that ``lr_scheduler_step`` runs."""

    def configure_optimizers(self):
        CALLS.append("m:configure_optimizers")
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return [optimizer], [{"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1), "interval": "step"}]


def _first_calls(action) -> list[str]:
    CALLS.clear()
    action()
    seen = []
    for call in CALLS:
        name = call.split(":", 1)[1]
        if name not in seen:
            seen.append(name)
    return seen


@pytest.mark.parametrize("heading", ["fit", "test", "predict"])
def test_a_hook_table_is_in_the_order_a_run_calls_the_hooks(heading):
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1,
                            callbacks=[RecordingCallback()])
    model = _Scheduled()
    run = {"fit": lambda: trainer.fit(model, loader(), loader()),
           "test": lambda: trainer.test(model, loader(), verbose=False),
           "predict": lambda: trainer.predict(model, loader())}[heading]
    if heading != "fit":
        trainer.fit(model, loader(), loader())
    table = [_code(row[1]) for row in _hook_tables()[heading]]
    called = _first_calls(run)
    if heading != "fit":  # the set-up, batch-transfer and teardown hooks are the fit table's rows
        assert set(called) - set(table) <= SHARED_WITH_FIT, set(called) - set(table) - SHARED_WITH_FIT
        called = [name for name in called if name in table]
    assert table == called, f"the '{heading}' table's order differs from a run's:\npage: {table}\nrun:  {called}"
