"""Lightning's cluster environments in ``plugins=``: each decides who started the ranks instead of framework's
detection (``LightningEnvironment`` ignores SLURM, ``TorchElasticEnvironment`` and ``SLURMEnvironment`` insist on
their launcher), a ``ClusterEnvironment`` of your own gives the ranks, and ``SLURMEnvironment(auto_requeue=False)``
leaves the requeue out of a preempted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from framework.errors import MisconfigurationError
from framework.plugins import ClusterEnvironment, LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment
from framework.runtime.environment import environment_for
from framework.runtime.preemption_signals import REQUEUE_EXIT_CODE
from framework.testing import spawn
from tests.helpers import Regressor, loader, quiet_trainer

SLURM_JOB = {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
             "SLURM_NNODES": "1", "SLURM_JOB_ID": "1234", "SLURM_NODELIST": "gpu[003-005]", "SLURM_JOB_NAME": "train"}
TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


@pytest.fixture
def no_launcher(monkeypatch):
    for name in (*SLURM_JOB, *TORCHRUN):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_slurm_environment_reads_slurms_variables(no_launcher):
    for name, value in SLURM_JOB.items():
        no_launcher.setenv(name, value)
    plugin = SLURMEnvironment()
    assert (plugin.world_size(), plugin.global_rank(), plugin.local_rank(), plugin.node_rank()) == (2, 1, 1, 0)
    assert plugin.main_address == "gpu003" and plugin.main_port == 15000 + 1234 and plugin.auto_requeue
    assert SLURMEnvironment.detect() and plugin.creates_processes_externally
    found = environment_for(plugin, num_nodes=1)
    assert (found.source, found.world_size, found.global_rank, found.main_address) == ("slurm", 2, 1, "gpu003")


def test_lightning_environment_ignores_slurm_so_framework_starts_the_ranks(no_launcher):
    for name, value in SLURM_JOB.items():
        no_launcher.setenv(name, value)
    assert environment_for(None, num_nodes=1).source == "slurm"  # detected without the plugin
    assert environment_for(LightningEnvironment(), num_nodes=1) is None
    trainer = quiet_trainer(plugins=[LightningEnvironment()])  # one process: not rank 1 of SLURM's 2
    assert trainer.world_size == 1 and trainer.global_rank == 0


def test_torchelastic_environment_reads_torchruns_variables_and_insists_on_them(no_launcher):
    with pytest.raises(MisconfigurationError, match=r"TorchElasticEnvironment\(\)\]: this process was not started"):
        quiet_trainer(plugins=[TorchElasticEnvironment()])
    for name, value in TORCHRUN.items():
        no_launcher.setenv(name, value)
    found = environment_for(TorchElasticEnvironment(), num_nodes=2)
    assert (found.world_size, found.global_rank, found.local_rank, found.node_rank, found.local_world_size) == \
        (4, 3, 1, 1, 2)


def test_slurm_environment_outside_slurm_says_how_to_run(no_launcher):
    with pytest.raises(MisconfigurationError, match=r"SLURMEnvironment\(\)\]: this process was not started by srun"):
        quiet_trainer(plugins=[SLURMEnvironment()])
    with pytest.raises(MisconfigurationError, match=r"requeue_signal=.*SIGHUP.*SIGUSR1"):
        SLURMEnvironment(requeue_signal=signal.SIGHUP)


class FileBasedEnvironment(ClusterEnvironment):
    """A cluster's own environment, as a library would write it."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return "head-node"

    @property
    def main_port(self) -> int:
        return 23456

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._size

    def set_world_size(self, size: int) -> None:
        pass

    def global_rank(self) -> int:
        return self._rank

    def set_global_rank(self, rank: int) -> None:
        pass

    def local_rank(self) -> int:
        return self._rank % 2

    def node_rank(self) -> int:
        return self._rank // 2


def test_an_environment_of_your_own_gives_the_ranks(no_launcher):
    found = environment_for(FileBasedEnvironment(rank=3, size=4), num_nodes=2)
    assert (found.world_size, found.global_rank, found.local_rank, found.node_rank, found.local_world_size) == \
        (4, 3, 1, 1, 2)
    assert (found.main_address, found.main_port, found.source) == ("head-node", 23456, "FileBasedEnvironment")


def _fit_with(rank: int) -> int:
    trainer = quiet_trainer(devices=2, strategy="ddp", max_steps=2, plugins=[LightningEnvironment()])
    trainer.fit(Regressor(), loader())
    return trainer.world_size


def test_two_ranks_run_with_lightning_environment():
    assert spawn(2, _fit_with) == [2, 2]


def test_a_plugin_that_is_none_of_the_kinds_is_refused_listing_them():
    with pytest.raises(MisconfigurationError, match=r"plugins=.*is not a plugin. Accepted are a CheckpointIO"):
        quiet_trainer(plugins=[object()])


PREEMPTED_RUN = """
import os, signal, sys
import framework
from framework.plugins import SLURMEnvironment
from tests.helpers import Regressor, loader

class PreemptAtStepTwo(framework.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGUSR1)

trainer = framework.Trainer(accelerator="cpu", default_root_dir=sys.argv[1], max_epochs=5, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                            callbacks=[PreemptAtStepTwo()], plugins=[SLURMEnvironment(auto_requeue=sys.argv[2] == "1")])
trainer.fit(Regressor(), loader())
"""


@pytest.mark.parametrize("auto_requeue", [True, False])
def test_a_preempted_slurm_job_is_requeued_unless_auto_requeue_is_off(tmp_path, auto_requeue):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'scontrol-calls'}\n")
    scontrol.chmod(0o755)
    environ = {**os.environ, **SLURM_JOB, "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
               "SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", PREEMPTED_RUN, str(tmp_path), str(int(auto_requeue))],
                          env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == REQUEUE_EXIT_CODE, done.stderr[-3000:]
    assert (tmp_path / "hpc_ckpt_1.ckpt").is_file()  # saved either way
    calls = tmp_path / "scontrol-calls"
    assert (calls.read_text().split() == ["requeue", "4242"]) if auto_requeue else not calls.exists()
