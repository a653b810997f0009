"""Every test runs in its own empty working directory, so default log and checkpoint folders
(``lightning_logs/``, ``checkpoints/``) never land in the repository or leak between tests, and leaves the
environment variables as it found them; ``memory_root`` is a fresh folder on fsspec's in-memory filesystem."""

from __future__ import annotations

import os
import uuid

import fsspec
import pytest


@pytest.fixture(autouse=True)
def _in_an_empty_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _environment_as_found():
    """Undo what a test's code wrote to ``os.environ`` outside monkeypatch: MLflow's ``set_tracking_uri`` sets
    ``MLFLOW_TRACKING_URI``, ``seed_everything`` sets ``PL_GLOBAL_SEED``, and a later test's launched ranks would
    inherit them (which test that is depends on the order, and with ``pytest -n`` on the worker)."""
    found = dict(os.environ)
    yield
    for name in set(os.environ) - set(found):
        del os.environ[name]
    for name, value in found.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


@pytest.fixture
def memory_root():
    root = f"memory://test-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)
