"""Which SLURM processes are ranks, as the variables a real cluster sets show them (looked at with ``srun``,
``salloc`` and ``srun --pty`` on the one-node cluster of ``.ci/slurm-cluster``); no cluster is needed here."""

from __future__ import annotations

import pytest

from framework.runtime.environment import detect_environment

TASK = {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODELIST": "vm", "SLURM_JOB_ID": "7"}


@pytest.mark.parametrize(("variables", "ranks"), [
    ({"SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0"}, True),          # sbatch, then srun -n 2
    ({"SLURM_JOB_NAME": "interactive", "SLURM_STEP_ID": "0"}, True),    # salloc -n 2, then srun -n 2
    ({"SLURM_JOB_NAME": "bash", "SLURM_STEP_ID": "1"}, True),           # srun --pty bash, then srun -n 2 (no pty)
    ({"SLURM_JOB_NAME": "bash", "SLURM_STEP_ID": "0", "SLURM_PTY_PORT": "39081"}, False),  # srun -n 2 --pty bash
    ({"SLURM_JOB_NAME": "bash"}, False),                                # a shell of a job named bash, no step
    ({"SLURM_JOB_NAME": "interactive", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, False),
])
def test_srun_tasks_are_ranks_also_in_an_interactive_allocation(variables, ranks):
    environment = detect_environment({**TASK, **variables})
    assert (environment is not None) == ranks
    if ranks:
        assert (environment.source, environment.world_size, environment.global_rank) == ("slurm", 2, 1)
