"""The docs site, built once per test run the way CI and a contributor build it (see the README), beside the tests
that come before tests/docs instead of adding its build time to the suite.

A plain ``pytest`` run builds it in its own process; a ``pytest -n N`` run (pytest-xdist) builds it once in the
controller, which runs no test, and its workers wait for the one build. A small wrapper around ``sphinx-build``
writes how it ended to ``status.json`` in the build folder, so any process of the run can wait for it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ARTIFACTS = DOCS / "_build" / "test-artifacts"  # kept after the run (git ignores docs/_build), never committed
TIMEOUT_S = 900

# Runs sphinx-build (argv[2:]) with its output in the build log, then writes its exit status and time, renamed
# into place so that a reader never sees half a file.
_WRAPPER = """
import json, os, subprocess, sys, time
folder, command = sys.argv[1], sys.argv[2:]
started = time.perf_counter()
with open(os.path.join(folder, "build.log"), "w") as log:
    returncode = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
status = {"returncode": returncode, "seconds": time.perf_counter() - started}
with open(os.path.join(folder, "status.json.part"), "w") as file:
    json.dump(status, file)
os.replace(os.path.join(folder, "status.json.part"), os.path.join(folder, "status.json"))
"""


@dataclass
class Site:
    """A finished build: where its HTML is, what Sphinx said, and how long it took."""

    html: Path
    returncode: int
    output: str
    seconds: float


def sphinx_command(html: Path) -> list[str]:
    # -E: a fresh environment (an incremental build does not repeat the warnings of pages it does not re-read);
    # -W -n --keep-going: every warning and every unresolved reference is an error, all of them listed at once.
    return [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html", str(DOCS),
            str(html)]


class SiteBuild:
    """``sphinx-build`` run as a child process in ``folder`` (made here, removed by :meth:`stop`)."""

    def __init__(self, folder: Path, niced: bool) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        # niced in a plain run: it takes the cores the tests before tests/docs leave idle, not time from theirs
        self.process = subprocess.Popen([sys.executable, "-c", _WRAPPER, str(folder), *sphinx_command(folder / "html")],
                                        cwd=ROOT, start_new_session=True,
                                        preexec_fn=(lambda: os.nice(19)) if niced else None)

    def stop(self) -> None:
        """End the build if it still runs (the run ended before a test needed the site: -x, ^C) and remove it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def private_folder() -> Path:
    """A new folder for a plain run's build."""
    return Path(tempfile.mkdtemp(prefix="docs-site-"))


def shared_folder(testrunuid: str) -> Path:
    """The folder the controller and the workers of one ``pytest -n N`` run agree on."""
    return Path(tempfile.gettempdir()) / f"docs-site-{testrunuid}"


def wait_for(folder: Path) -> Site:
    """The finished build in ``folder``, once its status is written; its log is also kept under ARTIFACTS."""
    status_file = folder / "status.json"
    if not folder.is_dir():
        raise RuntimeError(f"no docs build was started in {folder}")
    deadline = time.monotonic() + TIMEOUT_S
    while not status_file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the docs build in {folder} did not end within {TIMEOUT_S} s")
        time.sleep(0.2)
    status = json.loads(status_file.read_text())
    output = (folder / "build.log").read_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "build.log").write_text(f"{' '.join(sphinx_command(folder / 'html'))}\nexit {status['returncode']} "
                                         f"after {status['seconds']:.1f} s (beside other tests)\n{output}")
    return Site(folder / "html", status["returncode"], output, status["seconds"])
