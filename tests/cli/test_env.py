"""`framework env` prints what a bug report needs: versions, devices, distributed backends."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import framework
from framework.cli.main import main


def _report(capsys) -> dict[str, str]:
    assert main(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {name.strip(): value.strip() for name, value in (line.split(":", 1) for line in lines)}


def test_env_reports_the_versions_devices_and_backends_of_this_machine(capsys):
    report = _report(capsys)
    assert report["framework"] == framework.__version__
    assert report["torch"] == torch.__version__
    assert report["python"].startswith(platform.python_version())
    assert report["lightning"] == "not installed" or report["lightning"][0].isdigit()
    assert ("gloo" in report["distributed backends"]) == dist.is_gloo_available()
    if not torch.cuda.is_available():
        assert report["cuda devices"].startswith("none")
    assert int(report["cpu cores"]) >= 1


def test_env_refuses_arguments_it_does_not_take(capsys):
    assert main(["env", "--verbose"]) == 2
    assert "takes no arguments" in capsys.readouterr().err
    assert main(["env", "--help"]) == 0
    assert "usage: framework env" in capsys.readouterr().out


def test_env_reports_cuda_devices_that_fail_to_start_instead_of_failing():
    root = Path(__file__).resolve().parents[2]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "tests" / "fake_cuda"), str(root)])}
    done = subprocess.run([sys.executable, "-m", "framework", "env"], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cuda devices:         2 (they fail to start: A CUDA call in a process that must not use CUDA" in done.stdout
