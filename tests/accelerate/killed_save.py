"""Saves a state, trains a step, and is SIGKILLed at PHASE of the second save (for test_restart_resume.py):

    python tests/accelerate/killed_save.py BASE MODE,PHASE [MODE,PHASE ...]

Each ``MODE,PHASE`` runs in a process forked for it (the imports done once), in the folder ``BASE/<its index>``;
``BASE/statuses.json`` gets their exit statuses (-9: SIGKILLed). MODE ``automatic``: automatic naming with
``total_limit=1``, so the second save (``checkpoint_1``) also drops the first; ``named``: both saves go to
``<folder>/state``, the second replacing the first. PHASE: ``staging`` (the staging folder made, nothing written),
``files`` (the weights written, the rest not), ``marker`` (every file written, the commit marker not),
``rename:N:before`` / ``rename:N:after`` (around the save's Nth ``os.rename``). Each writes ``<folder>.reached``
just before it kills itself, so a test tells this kill from one by anything else (the kernel's, out of memory);
it exits 3 if the save ends without reaching PHASE.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from framework.accelerate import Accelerator, checkpointing, state_folders  # noqa: E402
from framework.accelerate.utils import ProjectConfiguration  # noqa: E402
from tests.accelerate.loops import model_and_optimizer  # noqa: E402


class Saves:
    """How many saves the state holds, so a test tells which state was loaded."""

    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = state["count"]


def accelerator_for(folder: str, mode: str) -> tuple[Accelerator, torch.nn.Module, Saves]:
    """The Accelerator, prepared model and registered counter the script and the test both build."""
    config = (ProjectConfiguration(project_dir=folder, automatic_checkpoint_naming=True, total_limit=1)
              if mode == "automatic" else None)
    accelerator = Accelerator(cpu=True, project_config=config)
    model, optimizer = accelerator.prepare(*model_and_optimizer())
    saves = Saves()
    accelerator.register_for_checkpointing(saves)
    return accelerator, model, saves


REACHED: list[str] = []  # the file to write before the kill


def _die() -> None:
    Path(REACHED[0]).write_text("killed")
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_at(phase: str) -> None:
    """Patch the step of the save named by ``phase`` so that the process is killed there."""
    if phase == "staging":
        begin = state_folders.begin_save
        state_folders.begin_save = lambda *args: (begin(*args), _die())
    elif phase == "files":
        write = checkpointing.write_weights
        checkpointing.write_weights = lambda *args, **kwargs: (write(*args, **kwargs), _die())
    elif phase == "marker":
        state_folders.commit = lambda *args: _die()
    else:
        _, number, when = phase.split(":")
        rename, calls = os.rename, []

        def counted(source: str, target: str) -> None:
            calls.append(source)
            if len(calls) == int(number) and when == "before":
                _die()
            rename(source, target)
            if len(calls) == int(number):
                _die()

        os.rename = counted


def killed_save(folder: str, mode: str, phase: str) -> None:
    """The two saves, the second killed at ``phase``."""
    accelerator, model, saves = accelerator_for(folder, mode)
    target = None if mode == "automatic" else os.path.join(folder, "state")
    saves.count = 1
    accelerator.save_state(target)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    saves.count = 2
    REACHED.append(f"{folder}.reached")
    _kill_at(phase)
    accelerator.save_state(target)


def main(base: str, specs: list[str]) -> None:
    model_and_optimizer()  # the first optimizer imports torch._dynamo (seconds): here once, not in every child
    statuses = []
    for index, spec in enumerate(specs):
        pid = os.fork()
        if pid == 0:  # the child: killed at its phase, else it says it was not
            try:
                killed_save(os.path.join(base, str(index)), *spec.split(",", 1))
            finally:
                os._exit(3)
        statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    Path(base, "statuses.json").write_text(json.dumps(statuses))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
