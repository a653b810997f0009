"""Preemption under real SLURM: ``sbatch --requeue`` jobs whose ``srun -n 2`` step trains with ``preempt_run.py``
(two SLURM ranks, DDP) receive ``scancel --signal=USR1`` or ``--signal=TERM`` mid-training. Every rank saves the
same step, rank 0 runs ``scontrol requeue`` (for an array task ``<array job>_<task>``), SLURM starts the job again
(``SLURM_RESTART_COUNT=1``) and the same command resumes from the hpc checkpoint by itself, ending with the
weights, optimizer state, global step and CSV rows of an uninterrupted SLURM job, to the bit. Where the step has no
``scontrol`` on PATH (a container), the ranks say so and exit with ``REQUEUE_EXIT_CODE``.

The jobs of this module run side by side (each ``--overcommit``: one CPU of the node's four), submitted and
signalled by one fixture, so SLURM's requeue delay (about 11 s) is waited once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from framework.runtime.preemption_signals import REQUEUE_EXIT_CODE
from tests.slurm.cluster import FINISHED_STATES, SlurmCluster

SCRIPT = Path(__file__).with_name("preempt_run.py")
WAIT_STEP = 3  # the global step at which the ranks wait for the signal
ARRAY_TASK = 3
# Variables of a launcher the test process may have, which would take precedence over SLURM's in the job.
LAUNCHER_VARIABLES = "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK MASTER_ADDR MASTER_PORT " \
                     "TORCHELASTIC_RESTART_COUNT FRAMEWORK_RESTART_COUNT FRAMEWORK_SCRIPT_RANKS"

# name: (signal sent once both ranks wait, or None; sbatch options; what runs the step's tasks before python)
JOBS = {
    "reference": (None, ("--requeue",), ""),
    "usr1": ("USR1", ("--requeue",), ""),
    "term": ("TERM", ("--requeue",), ""),
    "array": ("USR1", ("--requeue", f"--array={ARRAY_TASK}-{ARRAY_TASK}"), ""),
    "no-scontrol": ("USR1", ("--requeue",), "env PATH={empty} "),
}


class Run:
    def __init__(self, name: str, work: Path, job: str, signal: str | None) -> None:
        self.name, self.work, self.job, self.signal = name, work, job, signal
        self.signalled: float | None = None
        self.ended = False
        self.info: dict[str, str] | None = None  # the final record (scontrol forgets it MinJobAge after the end)
        self.output = ""
        self.seconds = 0.0
        self.returncode: int | None = None

    @property
    def target(self) -> str:
        """What scancel and scontrol name: an array task as ``<array job>_<task>``."""
        return f"{self.job}_{ARRAY_TASK}" if self.name == "array" else self.job

    @classmethod
    def by_hand(cls, work: Path, returncode: int) -> Run:
        """A run started outside sbatch (in an salloc allocation): its output and exit status."""
        run = cls(work.name, work, "", None)
        run.output, run.returncode = work.with_suffix(".out").read_text(), returncode
        return run

    def starts(self) -> list[str]:
        return sorted((self.work / "starts").read_text().splitlines())

    def outcome(self) -> tuple[dict, str]:
        return (torch.load(self.work / "result.pt", weights_only=True),
                (self.work / "logs" / "version_0" / "metrics.csv").read_text())


@pytest.fixture(scope="module")
def runs(_slurm_unavailable_reason, tmp_path_factory) -> dict[str, Run]:
    if _slurm_unavailable_reason is not None:
        pytest.skip(_slurm_unavailable_reason)
    base = tmp_path_factory.mktemp("slurm-preemption")
    cluster = SlurmCluster(base)
    empty = base / "empty-path"  # no scontrol (nor anything else) on this PATH
    empty.mkdir()
    started = time.monotonic()

    def submit(name: str) -> Run:
        signal, options, prefix = JOBS[name]
        work = base / name
        work.mkdir()
        wait = f" {WAIT_STEP}" if signal else ""
        script = (f"#!/bin/bash\nunset {LAUNCHER_VARIABLES}\nexport PYTHONWARNINGS=ignore\n"
                  f"srun {prefix.format(empty=empty)}{sys.executable} {SCRIPT} {work}{wait}\n"
                  "status=$?\necho \"srun exit status $status\"\nexit $status\n")
        job = cluster.submit(script, "--ntasks=2", "--overcommit", "--time=5", *options, name=name,
                             output=base / f"{name}.out")
        return Run(name, work, job, signal)

    def start_reference_and_interactive() -> Run:
        interactive = base / "interactive"
        interactive.mkdir()
        environment = {key: value for key, value in os.environ.items() if key not in LAUNCHER_VARIABLES.split()}
        with open(base / "interactive.out", "w") as output:  # salloc's job is named "interactive"
            runs_by_hand.append(subprocess.Popen(
                ["salloc", "--ntasks=2", "--overcommit", "--time=5", "srun", sys.executable, str(SCRIPT),
                 str(interactive)], cwd=base, env={**environment, "PYTHONWARNINGS": "ignore"}, stdout=output,
                stderr=subprocess.STDOUT))
        return runs.setdefault("reference", submit("reference"))

    # The reference (and the run in an salloc allocation) start once the others are signalled: they run while
    # those wait for their requeue.
    runs = {name: submit(name) for name, (signal, _, _) in JOBS.items() if signal}
    runs_by_hand: list[subprocess.Popen] = []
    try:
        _signal_and_wait(cluster, runs, started, deadline=started + 150,
                         when_signalled=start_reference_and_interactive)
        for process in runs_by_hand:
            process.wait(timeout=max(1.0, started + 150 - time.monotonic()))
            runs["interactive"] = Run.by_hand(base / "interactive", process.returncode)
    finally:
        cluster.close()
        for process in runs_by_hand:
            if process.poll() is None:
                process.kill()
                process.wait()
    for run in runs.values():
        if run.returncode is not None:
            print(f"{run.name}: salloc exit status {run.returncode}")
            continue
        signalled = f", signalled at {run.signalled - started:.1f} s" if run.signalled is not None else ""
        print(f"{run.name}: job {run.target} {run.info and run.info['JobState']} at {run.seconds:.1f} s{signalled}")
    return runs


def _signal_and_wait(cluster: SlurmCluster, runs: dict[str, Run], started: float, deadline: float,
                     when_signalled: Callable[[], Run]) -> None:
    """Signal each job once both its ranks wait at WAIT_STEP, then submit ``when_signalled()``; record each job's
    final state as soon as it ends."""
    pending, submitted_later = dict(runs), False
    while pending and time.monotonic() < deadline:
        for name, run in list(pending.items()):
            if run.signal and run.signalled is None and all((run.work / f"ready-{rank}").exists() for rank in (0, 1)):
                cluster.signal(run.target, run.signal)
                run.signalled = time.monotonic()
            info = cluster.info(run.job)
            if info is None or info["JobState"] in FINISHED_STATES:
                run.info, run.output, run.seconds = info, cluster.output(run.job), time.monotonic() - started
                run.ended = True
                del pending[name]
        if not submitted_later and all(run.signalled or run.ended for run in runs.values() if run.signal):
            submitted_later = True
            later = when_signalled()
            pending[later.name] = later
        time.sleep(0.2)
    for run in runs.values():
        if run.info is None:
            run.output = cluster.output(run.job)


def _finished(run: Run | None, state: str = "COMPLETED") -> None:
    assert run is not None, "the job was never submitted (the signalled jobs did not get to the signal in time)"
    assert run.info is not None, f"job {run.job} ({run.name}) did not finish in time; output:\n{run.output}"
    assert run.info["JobState"] == state, f"{run.info}\noutput:\n{run.output}"


def _assert_resumed_as_uninterrupted(run: Run, reference: Run | None, signal: str) -> None:
    _finished(reference)
    _finished(run)
    assert run.signalled is not None
    assert run.info["Restarts"] == "1"
    saved = run.work / "hpc_ckpt_1.ckpt"
    assert f"SIG{signal} received at global step {WAIT_STEP}: saved {saved}." in run.output
    assert f"Requeueing SLURM job {run.target}; it resumes from the checkpoint when it starts again." in run.output
    assert re.search(rf"Resuming from {re.escape(str(saved))}\b.*: restart 1 of this job\b", run.output), run.output
    assert run.starts() == ["0 -", "0 1", "1 -", "1 1"]  # both ranks, started by SLURM twice
    assert not saved.exists()  # done with once the resumed fit ended
    (result, rows), (expected, expected_rows) = run.outcome(), reference.outcome()
    assert result["global_step"] == expected["global_step"] == 9
    for name, tensor in expected["weights"].items():
        assert torch.equal(result["weights"][name], tensor), name
    for index, state in expected["optimizer"]["state"].items():
        assert torch.equal(result["optimizer"]["state"][index]["momentum_buffer"], state["momentum_buffer"])
    assert rows == expected_rows


def test_sigusr1_saves_requeues_and_the_requeued_job_resumes_as_if_uninterrupted(runs):
    reference = runs.get("reference")
    _finished(reference)
    assert reference.info["Restarts"] == "0"
    assert reference.starts() == ["0 -", "1 -"]
    assert "Resuming" not in reference.output
    _assert_resumed_as_uninterrupted(runs["usr1"], reference, "USR1")


def test_sigterm_saves_requeues_and_the_requeued_job_resumes_as_if_uninterrupted(runs):
    _assert_resumed_as_uninterrupted(runs["term"], runs.get("reference"), "TERM")


def test_an_array_task_requeues_itself_by_its_array_name_and_resumes(runs):
    run = runs["array"]
    assert run.info is not None and run.info.get("ArrayTaskId") == str(ARRAY_TASK), run.info
    _assert_resumed_as_uninterrupted(run, runs.get("reference"), "USR1")


def test_without_scontrol_the_ranks_say_so_and_exit_with_the_requeue_status(runs):
    run = runs["no-scontrol"]
    _finished(run, "FAILED")
    assert run.info["ExitCode"] == f"{REQUEUE_EXIT_CODE}:0"
    assert run.info["Restarts"] == "0"
    assert f"SIGUSR1 received at global step {WAIT_STEP}: saved {run.work / 'hpc_ckpt_1.ckpt'}." in run.output
    assert (f"SLURM job {run.job}: scontrol is not on PATH here (a container?), so the job was not requeued; the "
            f"exit status {REQUEUE_EXIT_CODE} says it should be.") in run.output
    exited = f": Exited with exit code {REQUEUE_EXIT_CODE}"  # both ranks, neither by a signal
    assert f"tasks 0-1{exited}" in run.output or all(f"task {rank}{exited}" in run.output for rank in (0, 1))
    assert f"srun exit status {REQUEUE_EXIT_CODE}" in run.output
    assert (run.work / "hpc_ckpt_1.ckpt").exists()  # for the next start of the job
    assert run.starts() == ["0 -", "1 -"]
    assert not (run.work / "result.pt").exists()


def test_srun_in_an_salloc_allocation_starts_ranks_that_join_as_the_trainers_devices(runs):
    # In an interactive allocation (salloc's job is named "interactive") `srun -n 2 python script.py`: each task is
    # one of the 2 ranks, not a launcher of 2 ranks of its own.
    reference, run = runs.get("reference"), runs.get("interactive")
    _finished(reference)
    assert run is not None, "salloc did not end in time"
    assert run.returncode == 0, run.output
    assert "Granted job allocation" in run.output, run.output
    assert "`Trainer.fit` stopped: `max_epochs=3` reached." in run.output, run.output
    assert run.starts() == ["0 -", "1 -"]
    (result, rows), (expected, expected_rows) = run.outcome(), reference.outcome()
    assert result["global_step"] == 9
    for name, tensor in expected["weights"].items():
        assert torch.equal(result["weights"][name], tensor), name
    assert rows == expected_rows
