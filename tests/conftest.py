"""Every test runs in its own empty working directory, so default log and checkpoint folders
(``lightning_logs/``, ``checkpoints/``) never land in the repository or leak between tests;
``memory_root`` is a fresh folder on fsspec's in-memory filesystem."""

from __future__ import annotations

import uuid

import fsspec
import pytest


@pytest.fixture(autouse=True)
def _in_an_empty_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def memory_root():
    root = f"memory://test-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)
