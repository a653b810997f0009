"""`framework config` writes Accelerate's config layout (from options, for this machine, or by asking), and
`framework launch` reads what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from framework.cli.accelerate_config import read_config
from framework.cli.launch_plan import launch_plan
from framework.cli.main import main
from framework.io.fs import leftover_temporaries
from tests.cli.test_accelerate_launch import ACCELERATE_MULTI_CPU, launched

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def own_cache_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def _config(arguments: list[str], tmp_path: Path, answers: str | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache"),
                   "HF_HOME": str(tmp_path / "hf")}
    return subprocess.run([sys.executable, "-m", "framework", "config", *arguments], input=answers,
                          stdin=subprocess.DEVNULL if answers is None else None, capture_output=True, text=True,
                          cwd=tmp_path, env=environment, timeout=120)


def test_options_without_a_terminal_write_what_accelerate_config_writes(tmp_path):
    done = _config(["--distributed_type", "MULTI_CPU", "--num-processes", "2", "--mixed_precision", "bf16",
                    "--config_file", "out.yaml"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "framework launch --config_file out.yaml train.py" in done.stdout
    written = (tmp_path / "out.yaml").read_text()
    assert written == ACCELERATE_MULTI_CPU.replace("mixed_precision: 'no'", "mixed_precision: bf16")  # byte for byte
    plan = launch_plan(read_config(tmp_path / "out.yaml"), gpus=0)
    assert plan.torchrun_options == ["--standalone", "--nproc-per-node", "2"]
    assert plan.environment["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_options_for_fsdp_take_accelerate_configs_default_answers_for_the_rest(tmp_path, capsys):
    path = tmp_path / "fsdp.yaml"
    assert main(["config", "--fsdp_offload_params", "true", "--num_processes", "2", "--config_file", str(path)]) == 0
    layout = yaml.safe_load(path.read_text())
    assert layout["distributed_type"] == "FSDP" and layout["num_processes"] == 2
    assert layout["fsdp_config"] == {"fsdp_version": 2, "fsdp_reshard_after_forward": True,
                                     "fsdp_offload_params": True, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                     "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                                     "fsdp_cpu_ram_efficient_loading": True, "fsdp_activation_checkpointing": False}
    environment = launch_plan(read_config(path), gpus=2).environment
    assert (environment["FSDP_VERSION"], environment["FSDP_OFFLOAD_PARAMS"]) == ("2", "true")


def test_default_writes_this_machines_config_once(tmp_path, capsys):
    import torch

    path = tmp_path / "default.yaml"
    assert main(["config", "--default", "--mixed_precision", "fp16", "--config_file", str(path)]) == 0
    layout = yaml.safe_load(path.read_text())
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert layout["mixed_precision"] == "fp16"
    assert layout["num_processes"] == max(1, gpus) and layout["use_cpu"] == (gpus == 0)
    assert layout["distributed_type"] == ("MULTI_GPU" if gpus > 1 else "NO")
    before = path.read_text()
    assert main(["config", "--default", "--config_file", str(path)]) == 0
    assert "left as it is" in capsys.readouterr().out and path.read_text() == before


def test_questions_answered_on_stdin(tmp_path):
    answers = "\n".join(["FSDP", "1", "yes", "4", "1", "SHARD_GRAD_OP", "no", "SIZE_BASED_WRAP", "2000", "",
                         "yes", "bf16"]) + "\n"
    done = _config(["--config_file", "asked.yaml"], tmp_path, answers)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Which kind of run?" in done.stdout and "FSDP version (1 or 2)? [2]: 1" in done.stdout
    layout = yaml.safe_load((tmp_path / "asked.yaml").read_text())
    assert (layout["distributed_type"], layout["num_processes"], layout["use_cpu"]) == ("FSDP", 4, True)
    assert layout["fsdp_config"]["fsdp_reshard_after_forward"] == "SHARD_GRAD_OP"  # where accelerate config puts it
    assert layout["fsdp_config"]["fsdp_min_num_params"] == 2000
    assert layout["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert layout["fsdp_config"]["fsdp_activation_checkpointing"] is True
    plan = launch_plan(read_config(tmp_path / "asked.yaml"), gpus=0)
    assert plan.torchrun_options == ["--standalone", "--nproc-per-node", "4"] and plan.notes == []
    assert plan.environment["FSDP_SHARDING_STRATEGY"] == "SHARD_GRAD_OP"
    assert plan.environment["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_a_wrong_answer_is_asked_again_and_where_stdin_ends_the_defaults_are_taken(tmp_path, monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("MULTI_CPU\n\nzero\n3\n"))
    assert main(["config", "--config_file", str(tmp_path / "short.yaml")]) == 0
    shown = capsys.readouterr().out
    assert "'zero' is not accepted; accepted: a whole number of at least 1." in shown
    assert "stdin has ended: the defaults are taken for the rest" in shown
    layout = yaml.safe_load((tmp_path / "short.yaml").read_text())
    assert (layout["distributed_type"], layout["num_processes"], layout["mixed_precision"]) == ("MULTI_CPU", 3, "no")


@pytest.mark.parametrize(("arguments", "message"), [
    (["--distributed_type", "MEGATRON_LM"], "--distributed_type: 'MEGATRON_LM' is not supported"),
    (["--mixed_precision", "fp8"], "--mixed_precision: 'fp8' is not supported"),
    (["--fsdp_sharding_strategy", "ZERO_SHARD"], "--fsdp_sharding_strategy: 'ZERO_SHARD' is not supported"),
    (["--num_processes", "0"], "--num_processes: '0' is not accepted"),
    (["--distributed_type", "NO", "--num_processes", "2"], "with distributed_type NO (one process)"),
    (["--distributed_type", "MULTI_CPU", "--fsdp_version", "2"], "--fsdp_version: FSDP is not in use"),
    (["--distributed_type", "MULTI_CPU", "--num_processes", "4", "--num_machines", "2"],
     "2 machines need main_process_ip"),
])
def test_a_config_that_cannot_be_launched_is_not_written_and_the_old_file_stays(tmp_path, arguments, message,
                                                                                  capsys):
    path = tmp_path / "kept.yaml"
    path.write_text(ACCELERATE_MULTI_CPU)
    assert main(["config", *arguments, "--config_file", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("framework config: error: ") and message in error, error
    assert path.read_text() == ACCELERATE_MULTI_CPU and leftover_temporaries(tmp_path) == []


def test_an_existing_file_is_replaced_whole(tmp_path, capsys):
    path = tmp_path / "replaced.yaml"
    path.write_text(ACCELERATE_MULTI_CPU)
    assert main(["config", "--distributed_type", "MULTI_CPU", "--num_processes", "3", "--config_file", str(path)]) == 0
    assert yaml.safe_load(path.read_text())["num_processes"] == 3 and leftover_temporaries(tmp_path) == []


def test_the_default_file_is_ours_and_framework_launch_runs_it_without_options(tmp_path):
    done = _config(["--distributed_type", "MULTI_CPU", "--num_processes", "2", "--mixed_precision", "fp16"], tmp_path)
    assert done.returncode == 0, done.stderr
    ours = tmp_path / "cache" / "framework" / "accelerate" / "default_config.yaml"
    assert ours.is_file() and not (tmp_path / "hf").exists()  # never Accelerate's own default location
    assert "Run a script with it: framework launch train.py" in done.stdout
    records, stderr = launched([], tmp_path)
    assert f"using the config {ours}" in stderr
    assert all(record["environment"]["ACCELERATE_MIXED_PRECISION"] == "fp16" for record in records)
