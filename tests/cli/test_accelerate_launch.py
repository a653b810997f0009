"""`framework launch` in Accelerate's form: its options and config files become a torchrun launch plus the
environment variables `accelerate launch` sets, and what cannot be honoured is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.cli.accelerate_config import read_config
from framework.cli.accelerate_launch import translate
from framework.cli.errors import ConfigError
from framework.cli.launch_plan import launch_plan
from framework.cli.main import main
from framework.strategies import FSDPStrategy

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "cli" / "accelerate_env_probe.py"

# Written by Accelerate 1.15's own `accelerate config` (its questions answered through stdin, its arrow-key menus
# by index): multi-GPU machine, 1 machine, FSDP, version 2, reshard yes, no offload, TRANSFORMER_BASED_WRAP with
# BertLayer, SHARDED_STATE_DICT, CPU RAM efficient loading, 2 GPUs, bf16.
ACCELERATE_FSDP2 = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
enable_cpu_affinity: false
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_version: 2
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""
# What `accelerate launch --config_file <that file>` gave its ranks (printed by a script it launched).
ACCELERATE_FSDP2_ENVIRONMENT = {
    "ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_DYNAMO_MODE": "default", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
    "ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_USE_FSDP": "true", "FSDP_ACTIVATION_CHECKPOINTING": "false",
    "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "false", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "true", "FSDP_FORWARD_PREFETCH": "false", "FSDP_MIN_NUM_PARAMS": "100000000",
    "FSDP_OFFLOAD_PARAMS": "false", "FSDP_RESHARD_AFTER_FORWARD": "true", "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
    "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT", "FSDP_SYNC_MODULE_STATES": "true",
    "FSDP_TRANSFORMER_CLS_TO_WRAP": "BertLayer", "FSDP_USE_ORIG_PARAMS": "true", "FSDP_VERSION": "2",
}
# `accelerate config` again: FSDP version 1, SHARD_GRAD_OP, SIZE_BASED_WRAP at 50000, BACKWARD_PRE, FULL_STATE_DICT,
# fp16. Version 1's strategy is written under fsdp_reshard_after_forward.
ACCELERATE_FSDP1 = ACCELERATE_FSDP2.replace("""  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_version: 2
""", """  fsdp_auto_wrap_policy: SIZE_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_min_num_params: 50000
  fsdp_offload_params: false
  fsdp_reshard_after_forward: SHARD_GRAD_OP
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_use_orig_params: true
  fsdp_version: 1
""").replace("mixed_precision: bf16", "mixed_precision: fp16")
# `accelerate config`: multi-CPU, 1 machine, no mpirun, 2 processes, no mixed precision.
ACCELERATE_MULTI_CPU = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""
# `accelerate config`: multi-GPU, 1 machine, no DeepSpeed/FSDP/Megatron, 2 GPUs, all of them, fp16.
ACCELERATE_MULTI_GPU = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_GPU
downcast_bf16: 'no'
enable_cpu_affinity: false
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: fp16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""
# `accelerate config default` on this CPU machine: JSON, under a .yaml name.
ACCELERATE_DEFAULT_JSON = """{
  "compute_environment": "LOCAL_MACHINE", "debug": false, "distributed_type": "NO", "downcast_bf16": false,
  "enable_cpu_affinity": false, "machine_rank": 0, "main_training_function": "main", "mixed_precision": "no",
  "num_machines": 1, "num_processes": 1, "rdzv_backend": "static", "same_network": false, "tpu_use_cluster": false,
  "tpu_use_sudo": false, "use_cpu": true
}
"""


@pytest.fixture(autouse=True)
def no_default_configs(tmp_path, monkeypatch):
    """No default config file of this machine's user is found (each test has its own cache folders)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def _file(tmp_path: Path, text: str, name: str = "accel.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_accelerates_fsdp_file_for_two_gpus_gives_the_environment_accelerate_launch_gives(tmp_path):
    settings = read_config(_file(tmp_path, ACCELERATE_FSDP2))
    on_gpus = launch_plan(settings, gpus=2)
    assert on_gpus.torchrun_options == ["--standalone", "--nproc-per-node", "2"]
    assert on_gpus.environment == {**ACCELERATE_FSDP2_ENVIRONMENT, "ACCELERATE_USE_CPU": "False"}
    assert on_gpus.notes == []
    without_gpus = launch_plan(settings, gpus=0)  # Accelerate refuses here; we run CPU ranks and say so
    assert without_gpus.torchrun_options == on_gpus.torchrun_options
    assert without_gpus.environment == {**ACCELERATE_FSDP2_ENVIRONMENT, "ACCELERATE_USE_CPU": "True"}
    assert len(without_gpus.notes) == 1 and "starting 2 CPU ranks with gloo" in without_gpus.notes[0]


def test_fsdp_version_1_keeps_the_strategy_accelerate_config_wrote(tmp_path):
    environment = launch_plan(read_config(_file(tmp_path, ACCELERATE_FSDP1)), gpus=2).environment
    assert environment["FSDP_VERSION"] == "1" and environment["ACCELERATE_MIXED_PRECISION"] == "fp16"
    assert environment["FSDP_RESHARD_AFTER_FORWARD"] == "shard_grad_op"  # as Accelerate spells it
    assert environment["FSDP_SHARDING_STRATEGY"] == "SHARD_GRAD_OP"  # Accelerate's launcher sends FULL_SHARD
    assert (environment["FSDP_MIN_NUM_PARAMS"], environment["FSDP_BACKWARD_PREFETCH"]) == ("50000", "BACKWARD_PRE")
    assert environment["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    assert "FSDP_TRANSFORMER_CLS_TO_WRAP" not in environment


@pytest.mark.parametrize(("written", "sent", "strategy"), [
    ("fsdp_sharding_strategy: HYBRID_SHARD", "HYBRID_SHARD", "HYBRID_SHARD"),
    ("fsdp_sharding_strategy: 5", "HYBRID_SHARD_ZERO2", "_HYBRID_SHARD_ZERO2"),
    ("fsdp_reshard_after_forward: _HYBRID_SHARD_ZERO2", "HYBRID_SHARD_ZERO2", "_HYBRID_SHARD_ZERO2"),
])
def test_hybrid_sharding_of_fsdp_version_1_runs_as_hsdp_sharded_within_each_node(tmp_path, monkeypatch, written,
                                                                                  sent, strategy):
    from framework.accelerate.settings import fsdp_options
    from framework.accelerate.utils import FullyShardedDataParallelPlugin

    text = ACCELERATE_FSDP1.replace("fsdp_reshard_after_forward: SHARD_GRAD_OP", written)
    environment = launch_plan(read_config(_file(tmp_path, text)), gpus=2).environment
    assert environment["FSDP_SHARDING_STRATEGY"] == sent
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    options = fsdp_options(FullyShardedDataParallelPlugin())  # a plugin left unset reads the FSDP_* variables
    assert options["sharding_strategy"] == strategy
    assert FSDPStrategy(**options).sharding_strategy == strategy


def test_multi_gpu_and_multi_cpu_files_and_accelerates_json_default(tmp_path):
    multi_gpu = read_config(_file(tmp_path, ACCELERATE_MULTI_GPU))
    plan = launch_plan(multi_gpu, gpus=4)
    assert plan.torchrun_options == ["--standalone", "--nproc-per-node", "2"] and plan.notes == []
    assert plan.environment["ACCELERATE_USE_CPU"] == "False" and "ACCELERATE_USE_FSDP" not in plan.environment
    assert "CUDA_VISIBLE_DEVICES" not in plan.environment  # gpu_ids: all
    assert launch_plan(multi_gpu, gpus=0).environment["ACCELERATE_USE_CPU"] == "True"
    multi_cpu = launch_plan(read_config(_file(tmp_path, ACCELERATE_MULTI_CPU)), gpus=4)  # CPU even with GPUs
    assert multi_cpu.environment["ACCELERATE_USE_CPU"] == "True" and multi_cpu.notes == []
    single = launch_plan(read_config(_file(tmp_path, ACCELERATE_DEFAULT_JSON)), gpus=0)
    assert single.torchrun_options == ["--standalone", "--nproc-per-node", "1"]
    assert single.environment["ACCELERATE_MIXED_PRECISION"] == "no"


def test_a_hand_written_file_reads_as_accelerate_reads_it(tmp_path):
    # Unquoted NO/no are YAML's false; older Accelerate wrote dynamo_backend at the top; keys may lack fsdp_.
    text = ("distributed_type: FSDP\nmixed_precision: no\ndynamo_backend: inductor\nnum_processes: '2'\n"
            "fsdp_config:\n  version: 2\n  reshard_after_forward: 'no'\n"
            "  transformer_layer_cls_to_wrap: [Block, Embed]\n  fsdp_min_num_params: 1e5\n")
    environment = launch_plan(read_config(_file(tmp_path, text)), gpus=0).environment
    assert (environment["ACCELERATE_MIXED_PRECISION"], environment["ACCELERATE_DYNAMO_BACKEND"]) == ("no", "INDUCTOR")
    assert (environment["FSDP_VERSION"], environment["FSDP_RESHARD_AFTER_FORWARD"]) == ("2", "false")
    assert environment["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "Block,Embed"
    assert environment["FSDP_MIN_NUM_PARAMS"] == "100000"
    plain = read_config(_file(tmp_path, "distributed_type: NO\n", "plain.yaml"))
    assert launch_plan(plain, gpus=0).torchrun_options == ["--standalone", "--nproc-per-node", "1"]


def test_machines_ranks_and_gpu_ids_become_torchruns_options(tmp_path):
    several = ACCELERATE_MULTI_GPU.replace("num_machines: 1", "num_machines: 2").replace(
        "num_processes: 2", "num_processes: 4\nmain_process_ip: 10.0.0.1\nmain_process_port: 29600").replace(
        "machine_rank: 0", "machine_rank: 1").replace("gpu_ids: all", "gpu_ids: 2,3")
    plan = launch_plan(read_config(_file(tmp_path, several)), gpus=4)
    assert plan.torchrun_options == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                                     "--master-port", "29600", "--nproc-per-node", "2"]
    assert plan.environment["CUDA_VISIBLE_DEVICES"] == "2,3"
    with pytest.raises(ConfigError, match=r"accel\.yaml:\d+: gpu_ids: '2' names 1 GPU\(s\) for 2 processes"):
        launch_plan(read_config(_file(tmp_path, several.replace("gpu_ids: 2,3", "gpu_ids: '2'"))), gpus=4)
    with pytest.raises(ConfigError, match=r"num_processes: 4 processes on 2 machine\(s\) are 2 per machine, but "
                                          r"torch finds 1 GPU\(s\) here; give at most 2, or --cpu for CPU ranks\."):
        launch_plan(read_config(_file(tmp_path, several)), gpus=1)
    with pytest.raises(ConfigError, match="2 machines need main_process_ip"):
        launch_plan(read_config(_file(tmp_path, several.replace("main_process_ip: 10.0.0.1\n", ""))), gpus=4)


def test_options_override_the_file_and_are_spelled_either_way(tmp_path):
    path = _file(tmp_path, ACCELERATE_MULTI_CPU)
    done = translate(["--config_file", path, "--num-processes=4", "--mixed_precision", "fp16",
                      "--gradient-accumulation-steps", "8", "--max_restarts", "1", "-m", "pkg.train", "--lr", "1"])
    assert done.torchrun_argv == ["--standalone", "--nproc-per-node", "4", "--max-restarts", "1", "-m", "pkg.train",
                                  "--lr", "1"]
    assert done.environment["ACCELERATE_MIXED_PRECISION"] == "fp16"
    assert done.environment["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "8"
    fsdp_on_cpu = translate(["--cpu", "--use_fsdp", "--fsdp_version", "2", "--fsdp_reshard_after_forward", "False",
                             "--num_processes", "2", "--dynamo_backend", "inductor", "--dynamo_use_fullgraph", "t.py"])
    assert fsdp_on_cpu.environment["ACCELERATE_USE_CPU"] == "True" and fsdp_on_cpu.notes == []
    assert fsdp_on_cpu.environment["FSDP_RESHARD_AFTER_FORWARD"] == "false"
    assert fsdp_on_cpu.environment["ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    assert fsdp_on_cpu.environment["ACCELERATE_DYNAMO_USE_FULLGRAPH"] == "True"


def test_torchruns_form_stays_torchruns_and_the_default_config_is_used_when_no_options_are_given(tmp_path):
    assert translate(["--nproc-per-node", "2", "train.py", "--num_processes", "3"]) is None
    assert translate(["-m", "pkg.train"]) is None  # neither form's options, no default config: torchrun's
    assert translate(["train.py"]) is None
    accelerates = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    accelerates.parent.mkdir(parents=True)
    accelerates.write_text(ACCELERATE_MULTI_CPU)
    done = translate(["train.py"])
    assert done.torchrun_argv == ["--standalone", "--nproc-per-node", "2", "train.py"]
    assert str(accelerates) in done.notes[0]
    ours = tmp_path / "cache" / "framework" / "accelerate" / "default_config.yaml"
    ours.parent.mkdir(parents=True)
    ours.write_text(ACCELERATE_MULTI_CPU.replace("num_processes: 2", "num_processes: 3"))
    assert translate(["train.py"]).torchrun_argv[:3] == ["--standalone", "--nproc-per-node", "3"]  # ours first
    assert translate(["--mixed_precision", "bf16", "train.py"]).torchrun_argv[2] == "3"  # options lay over it
    assert translate(["--cpu", "train.py"]).torchrun_argv[2] == "1"  # as Accelerate: --cpu skips the default file
    assert translate(["--nproc-per-node", "2", "train.py"]) is None
    ours.write_text(ACCELERATE_MULTI_CPU.replace("MULTI_CPU", "MEGATRON_LM"))
    with pytest.raises(ConfigError, match=r"'MEGATRON_LM' is not supported .* is the default config, used when no "
                                          r"launcher option is given: --config_file FILE picks another"):
        translate(["train.py"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--nproc-per-node", "2", "--num_processes", "2", "t.py"], "--nproc_per_node is torchrun's option and "
                                                                 "--num_processes is Accelerate's: use one form"),
    (["--num_processes", "2"], "no script given"),
    (["--cpu", "--multi_gpu", "t.py"], "--cpu and --multi_gpu exclude each other"),
    (["--num_processes", "2", "--fsdp_offload_params", "true", "t.py"], "--fsdp_offload_params: FSDP is not in use"),
    (["--num_processes", "2", "--zero_stage", "3", "t.py"], "--zero_stage: DEEPSPEED is not in use (distributed_type "
                                                            "None); add --use_deepspeed."),
    (["--use_fsdp", "--use_deepspeed", "t.py"], "--use_fsdp and --use_deepspeed exclude each other"),
    (["--use_deepspeed", "--cpu", "--num_processes", "2", "--deepspeed_config_file", "missing.json", "t.py"],
     "'missing.json': there is no such DeepSpeed config file"),
    (["--num_processes", "0", "t.py"], "--num_processes: '0' is not accepted; accepted: a whole number of at least 1"),
    (["--mixed_precision", "fp8", "t.py"], "--mixed_precision: 'fp8' is not supported (no FP8 training here); "
                                           "accepted: no, fp16, bf16."),
    (["--use_fsdp", "--fsdp_version", "2", "--fsdp_reshard_after_forward", "SHARD_GRAD_OP", "--cpu",
      "--num_processes", "2", "t.py"],
     "'SHARD_GRAD_OP' is a sharding strategy, which FSDP version 2 does not take"),
    (["--multi_gpu", "t.py"], "MULTI_GPU needs a number of processes"),  # no GPUs to count here
])
def test_options_that_cannot_be_honoured_are_refused_by_name(argv, message, capsys):
    if argv == ["--multi_gpu", "t.py"]:
        pytest.importorskip("torch").cuda.is_available() and pytest.skip("there are GPUs to count here")
    assert main(["launch", *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("framework launch: error: ") and message in error, error


@pytest.mark.parametrize(("change", "message"), [
    (("distributed_type: FSDP", "distributed_type: MEGATRON_LM"),
     r"accel\.yaml:3: distributed_type: 'MEGATRON_LM' is not supported \(.*\); accepted: NO, MULTI_CPU, MULTI_GPU, "
     r"FSDP, DEEPSPEED\."),
    (("use_cpu: false", "use_cpu: false\nuse_gpu: true"), r"accel\.yaml:26: 'use_gpu' is not a key of Accelerate's "
                                                          r"config file \(did you mean 'use_cpu'\?\); keys read: "),
    (("fsdp_version: 2", "fsdp_version: 2\n  fsdp_wrap_everything: true"),
     r"accel\.yaml:15: fsdp_config\.fsdp_wrap_everything: not a key of fsdp_config; known keys: fsdp_version,"),
    (("fsdp_version: 2", "fsdp_version: 2\n  ofload_params: true"),
     r"fsdp_config\.ofload_params: not a key of fsdp_config \(did you mean 'fsdp_offload_params'\?\)"),
    (("fsdp_version: 2", "fsdp_version: 1\n  fsdp_sharding_strategy: ZERO_SHARD"),
     r"fsdp_config\.fsdp_sharding_strategy: 'ZERO_SHARD' is not supported; accepted: FULL_SHARD, SHARD_GRAD_OP, "
     r"NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2\."),
    (("mixed_precision: bf16", "mixed_precision: fp8"), r"mixed_precision: 'fp8' is not supported \(no FP8 training "
                                                        r"here\); accepted: no, fp16, bf16\."),
    (("num_processes: 2", "num_processes: 0"), r"accel\.yaml:19: num_processes: 0 is not accepted; accepted: a whole "
                                               r"number of at least 1\."),
    (("tpu_env: []", "deepspeed_config:\n  zero_stage: 4\ntpu_env: []"),
     r"deepspeed_config\.zero_stage: 4 is not accepted; accepted: a whole number from 0 to 3"),
    (("tpu_env: []", "deepspeed_config:\n  deepspeed_multinode_launcher: pdsh\ntpu_env: []"),
     r"'pdsh' is not supported \(ranks on several machines are started with torchrun here: 'standard'\)"),
    (("compute_environment: LOCAL_MACHINE", "compute_environment: AMAZON_SAGEMAKER"),
     r"compute_environment: 'AMAZON_SAGEMAKER' is not supported \(SageMaker"),
])
def test_config_values_that_cannot_be_honoured_are_refused_naming_the_key_the_value_and_what_is_accepted(
        tmp_path, change, message):
    path = _file(tmp_path, ACCELERATE_FSDP2.replace(*change))
    with pytest.raises(ConfigError, match=message):
        launch_plan(read_config(path), gpus=2)


def test_a_missing_or_unreadable_file_is_refused_without_a_traceback(tmp_path):
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-m", "framework", "launch", "--config_file", "missing.yaml", "t.py"],
                          capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("framework launch: error: --config_file missing.yaml: no such file")
    for text, message in (("- a\n- b\n", "a mapping of keys"), ("a: [\n", "not valid YAML"), ("", "is empty")):
        with pytest.raises(ConfigError, match=message):
            read_config(_file(tmp_path, text, "bad.yaml"))


def launched(arguments: list[str], tmp_path: Path, **variables: str) -> tuple[list[dict], str]:
    """Each rank's record from accelerate_env_probe.py, launched by `framework launch <arguments>` with these
    environment ``variables`` added, and what the launcher wrote to stderr."""
    out = tmp_path / "out"
    out.mkdir()
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("ACCELERATE_", "FSDP_")) and key != "OMP_NUM_THREADS"}
    environment.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf"),
                       **variables)
    done = subprocess.run([sys.executable, "-m", "framework", "launch", *arguments, str(PROBE), str(out), "--x", "1"],
                          capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    for rank, record in enumerate(records):  # one group of two: each rank's all-reduce saw 1 + 2
        assert (record["rank"], record["world_size"], record["sum"]) == (rank, 2, 3.0)
        assert record["arguments"] == ["--x", "1"]
    return records, done.stderr


def test_cpu_with_two_processes_really_starts_two_cpu_ranks(tmp_path):
    records, _ = launched(["--num_processes", "2", "--cpu", "--mixed-precision", "bf16",
                            "--gradient_accumulation_steps", "4"], tmp_path)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for record in records:
        assert record["environment"]["ACCELERATE_USE_CPU"] == "True"
        assert record["environment"]["ACCELERATE_MIXED_PRECISION"] == "bf16"
        assert record["environment"]["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "4"
        assert record["environment"]["OMP_NUM_THREADS"] == str(max(1, cores // 2))
        assert "ACCELERATE_USE_FSDP" not in record["environment"]


def test_accelerates_multi_cpu_file_starts_two_ranks(tmp_path):
    records, _ = launched(["--config_file", _file(tmp_path, ACCELERATE_MULTI_CPU)], tmp_path)
    assert all(record["environment"]["ACCELERATE_USE_CPU"] == "True" for record in records)


def test_accelerates_fsdp_file_for_gpus_runs_on_cpu_ranks_where_there_are_none(tmp_path):
    hidden = {"CUDA_VISIBLE_DEVICES": ""}  # a machine without GPUs, also where the tests run on one with them
    records, stderr = launched(["--config_file", _file(tmp_path, ACCELERATE_FSDP2)], tmp_path, **hidden)
    assert stderr.count("asks for GPUs (distributed_type FSDP)") == 1  # said once, by the launcher
    for record in records:
        assert record["environment"]["ACCELERATE_USE_CPU"] == "True"
        for name, value in ACCELERATE_FSDP2_ENVIRONMENT.items():
            assert record["environment"][name] == value, name


def test_import_framework_leaves_the_launchers_modules_alone():
    code = ("import sys, framework\n"
            "print([name for name in sys.modules if name.startswith(('framework.cli.accelerate', "
            "'framework.cli.launch', 'framework.cli.config_command'))])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_deepspeed_flags_and_a_deepspeed_config_section_give_accelerates_variables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = translate(["--use_deepspeed", "--cpu", "--num_processes", "2", "--zero_stage", "3",
                       "--offload_optimizer_device", "CPU", "--gradient_clipping", "1", "--zero3_save_16bit_model",
                       "true", "--gradient_accumulation_steps", "4", "t.py"])
    assert flags.torchrun_argv == ["--standalone", "--nproc-per-node", "2", "t.py"]
    assert {key: value for key, value in flags.environment.items() if "DEEPSPEED" in key or "GRADIENT" in key} == {
        "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu", "ACCELERATE_GRADIENT_CLIPPING": "1.0",
        "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}
    (tmp_path / "ds.json").write_text("{}")
    path = _file(tmp_path, ACCELERATE_MULTI_CPU.replace("MULTI_CPU", "DEEPSPEED").replace(
        "machine_rank: 0", "deepspeed_config:\n  deepspeed_config_file: ds.json\n  gradient_accumulation_steps: 2\n"
                           "  zero3_init_flag: false\nmachine_rank: 0"))
    plan = launch_plan(read_config(path), gpus=0)
    assert plan.environment["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(tmp_path / "ds.json")
    assert plan.environment["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "2"
    assert plan.environment["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == "false"
