"""The docs site, built once per test session the way CI and a contributor build it (see the README)."""

from __future__ import annotations

import subprocess
import sys
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


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    html = tmp_path_factory.mktemp("docs") / "html"
    # -E: a fresh environment (an incremental build does not repeat the warnings of pages it does not re-read);
    # -W -n --keep-going: every warning and every unresolved reference is an error, all of them listed at once.
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html", str(DOCS),
               str(html)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "build.log").write_text(f"{' '.join(command)}\nexit {done.returncode} after {seconds:.1f} s\n"
                                         f"{done.stdout}\n{done.stderr}")
    return Site(html, done.returncode, done.stdout + done.stderr, seconds)
