"""Reading the ranks a launcher (torchrun, SLURM) left in the environment."""

from __future__ import annotations

import pytest

import framework
from framework.runtime.environment import ClusterEnvironment, detect_environment, first_host

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}


def test_nothing_launched_means_no_environment():
    assert detect_environment({}) is None
    assert detect_environment({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is None  # one task: the user launches


def test_torchrun_variables():
    assert detect_environment(TORCHRUN) == ClusterEnvironment(
        world_size=4, global_rank=3, local_rank=1, node_rank=1, local_world_size=2, main_address="10.0.0.1",
        main_port=29400, source="torchrun")


def test_slurm_variables():
    environment = detect_environment({
        "SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
        "SLURM_NODELIST": "gpu[003-004]", "SLURM_JOB_ID": "12345", "SLURM_JOB_NAME": "train"})
    assert environment == ClusterEnvironment(world_size=8, global_rank=5, local_rank=1, node_rank=1,
                                             local_world_size=4, main_address="gpu003", main_port=15000 + 12345 % 5000,
                                             source="slurm")


def test_an_interactive_slurm_shell_is_not_a_launch():
    assert detect_environment({"SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_JOB_NAME": "bash"}) is None


@pytest.mark.parametrize(("nodelist", "host"), [("node7", "node7"), ("gpu[003-005,009],cpu01", "gpu003"),
                                                ("a[1,4]", "a1"), ("host-1,host-2", "host-1"),
                                                ("node[1-2]-ib,login", "node1-ib")])
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host


def test_a_bad_number_names_the_variable():
    with pytest.raises(framework.MisconfigurationError, match="WORLD_SIZE='two'"):
        detect_environment({**TORCHRUN, "WORLD_SIZE": "two"})


@pytest.fixture
def threads_restored():
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # joining the launch took this process's share of the cores


def test_a_launch_of_another_size_than_asked_says_what_to_change(monkeypatch, threads_restored):
    for key, value in TORCHRUN.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(framework.MisconfigurationError, match=r"started 4 processes.*devices=3 and num_nodes=1 make 3"):
        framework.Runtime(accelerator="cpu", devices=3)
    runtime = framework.Runtime(accelerator="cpu", devices="auto", num_nodes=2)  # auto: the launcher's count
    assert (runtime.world_size, runtime.global_rank, runtime.local_rank, runtime.node_rank) == (4, 3, 1, 1)
    assert not runtime.needs_launch and runtime.strategy.name == "ddp"
