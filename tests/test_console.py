"""The framework's console messages: shown on stderr until the application configures logging."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_messages_are_shown_when_logging_is_not_configured():
    done = run("import framework; framework.seed_everything(3)")
    assert done.stderr.strip() == "Seed set to 3"


def test_a_configured_application_gets_them_once_through_its_own_handlers():
    done = run("import logging; logging.basicConfig(format='app: %(message)s', level=logging.INFO)\n"
               "import framework; framework.seed_everything(3)")
    assert done.stderr.strip() == "app: Seed set to 3"


def test_they_can_be_silenced_like_any_logger():
    done = run("import logging, framework; logging.getLogger('framework').setLevel(logging.WARNING)\n"
               "framework.seed_everything(3)")
    assert done.stderr == ""
