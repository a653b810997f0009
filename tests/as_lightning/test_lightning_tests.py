"""Runs tests/as_lightning/lightning_tests (Lightning's plugin-API tests, written in Lightning's names) under
``framework as-lightning``, in a pytest of their own."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.as_lightning.test_switch import FRAMEWORK, run

HERE = Path(__file__).resolve().parent


def test_lightnings_plugin_api_tests_pass_through_the_switch(tmp_path):
    done = run(FRAMEWORK + ["as-lightning", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(HERE / "lightning_tests"), "--rootdir", str(HERE / "lightning_tests")], tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
