"""Ranks started by running the script again: this process becomes rank 0, the others run the same command.

This is how a Fabric script with ``fabric.launch()`` starts its ranks, and how ``start_method="auto"``
starts them from a script where forking is unsafe (as torchrun and Lightning's ``ddp`` do). The ranks started here
are watched: one that fails stops all (this process included, with a message naming it, not
just the collective error its loss causes here); when this process ends, it waits for them, or
stops them if it failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from framework.errors import MisconfigurationError
from framework.runtime.environment import SCRIPT_RANKS_VARIABLE
from framework.runtime.worker_processes import TERMINATE_GRACE_S, free_port, rank_variables
from framework.strategies.forked_children import die_with_parent

# How long rank 0, at its end, waits for the ranks it started to end too.
_FINISH_GRACE_S = 120.0


def relaunch_script(world_size: int) -> None:
    """Make this process rank 0 and start ranks 1 .. world_size-1 as new runs of the same script.

    For ``runtime.launch()`` without a function, and for the ranks ``start_method="auto"`` starts
    from a script where forking is unsafe: everything after the call runs on every rank. A rank
    that fails stops the others (this one included); when this one ends, it waits for the others,
    or stops them if it failed.
    """
    command = script_command()
    if command is None:
        raise MisconfigurationError(_no_script_message())
    port = free_port()
    children = []
    for rank in range(1, world_size):
        child_environment = {**os.environ, **_script_rank_variables(rank, world_size, port)}
        children.append(subprocess.Popen(command, env=child_environment, preexec_fn=die_with_parent))
    os.environ.update(_script_rank_variables(0, world_size, port))
    watcher = _ScriptRanks(children)
    watcher.start()


def _script_rank_variables(rank: int, world_size: int, port: int) -> dict[str, str]:
    return {**rank_variables(rank, world_size, port), SCRIPT_RANKS_VARIABLE: "1"}


# Programs that run other code: running them again would not run the user's script again (pytest would run the
# whole test session in every rank).
_NOT_SCRIPTS = {"pytest", "py.test", "_pytest", "unittest", "ipykernel_launcher", "ipykernel", "IPython"}


def script_command() -> list[str] | None:
    """The command that runs this process's script again, or None where there is none to run again.

    None in an interactive session (REPL, notebook), for ``python -c`` and ``python -`` (stdin),
    and under a test runner (pytest, unittest), whose run is not the user's script.

    Example::

        $ python train.py --lr 0.1      ->  [sys.executable, "/abs/train.py", "--lr", "0.1"]
        $ python -m pkg.train           ->  [sys.executable, "-m", "pkg.train"]
    """
    if hasattr(sys, "ps1"):  # at an interactive prompt, whatever started the interpreter
        return None
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    module = spec.name.removesuffix(".__main__") if spec is not None and spec.name else ""
    path = getattr(main, "__file__", None)
    program = module.split(".")[0] if module else os.path.splitext(os.path.basename(path or ""))[0]
    if program in _NOT_SCRIPTS or os.path.basename(path or "") in _NOT_SCRIPTS:
        return None
    if module and module != "__main__":
        return [sys.executable, "-m", module, *sys.argv[1:]]
    if not path or not os.path.isfile(path):
        return None
    return [sys.executable, os.path.abspath(path), *sys.argv[1:]]


def _no_script_message() -> str:
    if "PYTEST_CURRENT_TEST" in os.environ:  # set by pytest around each test, in xdist's workers too
        return ("runtime.launch() without a function would start the other ranks by running pytest again. In a "
                "test, call runtime.launch(fn) (fn gets the runtime), or use framework.testing.spawn.")
    return ("runtime.launch() without a function starts the other ranks by running this script again, and there "
            "is no script here (a notebook, a REPL or `python -c`). Put the training in a function and call "
            "runtime.launch(train), or use a strategy that forks: Runtime(..., strategy='ddp_fork').")


class _ScriptRanks:
    """Watches the ranks a script started: stops everything when one fails; at exit waits for (or stops) them."""

    def __init__(self, children: list[subprocess.Popen]) -> None:
        self.children = children
        self.failed = False

    def start(self) -> None:
        import atexit
        import threading

        previous_hook = sys.excepthook

        def note_failure(*info: Any) -> None:
            self.failed = True
            previous_hook(*info)
            self._explain()

        sys.excepthook = note_failure
        atexit.register(self._at_exit)
        threading.Thread(target=self._watch, name="framework-rank-watcher", daemon=True).start()

    def _watch(self) -> None:
        import time

        while not self.failed:
            if self._report_failed_rank():
                self._stop_children()
                os.kill(os.getpid(), signal.SIGTERM)
                return
            if all(child.poll() == 0 for child in self.children):
                return
            time.sleep(0.2)

    def _report_failed_rank(self) -> bool:
        for rank, child in enumerate(self.children, start=1):
            code = child.poll()
            if code not in (None, 0):
                print(f"[framework] Rank {rank} of {len(self.children) + 1} exited with code {code} (its error is "
                      "above); the other ranks were stopped.", file=sys.stderr, flush=True)
                return True
        return False

    def _explain(self) -> None:
        """Rank 0 failed: if that was because another rank died first (a collective lost its peer), say so."""
        import time

        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not self._report_failed_rank():
            time.sleep(0.1)
        self._stop_children()

    def _at_exit(self) -> None:
        if not self.failed:
            for child in self.children:
                try:
                    child.wait(timeout=_FINISH_GRACE_S)
                except subprocess.TimeoutExpired:  # rank 0 left early (sys.exit?) while the others wait for it
                    break
        self._stop_children()

    def _stop_children(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
