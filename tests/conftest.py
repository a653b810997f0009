"""Every test runs in its own empty working directory, so default log and checkpoint folders
(``lightning_logs/``, ``checkpoints/``) never land in the repository or leak between tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _in_an_empty_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
