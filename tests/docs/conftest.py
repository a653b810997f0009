"""The docs site, built once per test session the way CI and a contributor build it (see the README)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ARTIFACTS = DOCS / "_build" / "test-artifacts"  # kept after the run (git ignores docs/_build), never committed


@dataclass
class Site:
    """A finished build: where its HTML is, what Sphinx said, and how long it took."""

    html: Path
    returncode: int
    output: str
    seconds: float


class _Build:
    """``sphinx-build`` run as a child process, started once per session."""

    def __init__(self, html: Path) -> None:
        self.html = html
        # -E: a fresh environment (an incremental build does not repeat the warnings of pages it does not re-read);
        # -W -n --keep-going: every warning and every unresolved reference is an error, all of them listed at once.
        self.command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html",
                        str(DOCS), str(html)]
        self.started = time.perf_counter()
        self.log = (html.parent / "build.log").open("w+")  # a file, not a pipe: nothing reads it before the end
        # niced: it takes the cores the tests before tests/docs leave idle, not time from theirs
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                        text=True, preexec_fn=lambda: os.nice(19))

    def finish(self) -> Site:
        self.process.wait(timeout=900)
        seconds = time.perf_counter() - self.started
        self.log.seek(0)
        output = self.log.read()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "build.log").write_text(f"{' '.join(self.command)}\nexit {self.process.returncode} after "
                                             f"{seconds:.1f} s (niced, beside other tests)\n{output}")
        return Site(self.html, self.process.returncode, output, seconds)


_builds: list[_Build] = []


def pytest_collection_finish(session) -> None:
    """Start the build as soon as the session knows it runs a test that needs the site (after ``-k`` and the
    like have deselected theirs), so that it runs beside the tests before tests/docs instead of adding its 20-odd
    seconds to the suite."""
    here = Path(__file__).parent
    wanted = any(here in Path(item.path).parents and "site" in getattr(item, "fixturenames", ())
                 for item in session.items)
    if wanted and not session.config.option.collectonly:
        _start(session.config)


def _start(config) -> _Build:
    if not _builds:
        _builds.append(_Build(Path(tempfile.mkdtemp(prefix="docs-site-")) / "html"))
        config.add_cleanup(_end)
    return _builds[0]


def _end() -> None:
    build = _builds.pop()
    if build.process.poll() is None:  # the session ended before a test needed the site (-x, ^C)
        build.process.kill()
        build.process.wait()
    build.log.close()
    shutil.rmtree(build.html.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def site(pytestconfig) -> Site:
    return _start(pytestconfig).finish()  # started at collection, unless this session was collected otherwise
