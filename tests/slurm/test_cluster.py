"""Smoke tests of the real SLURM cluster that ``.ci/slurm-cluster`` sets up: a two-task step sees its rank
variables, a job that requeues itself runs a second time, and ``scancel --signal`` reaches an srun task."""

from __future__ import annotations

import json
import sys
import time

# Each srun task prints the variables a rank reads.
PRINT_RANK_ENV = (
    "import json, os; print('RANK ' + json.dumps({k: os.environ.get(k) for k in "
    "('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID', 'SLURM_NODELIST', 'SLURM_JOB_ID', 'SLURM_STEP_ID')}), "
    "flush=True)"
)


def test_srun_two_tasks_see_their_rank(slurm_cluster):
    job = slurm_cluster.submit(f"srun {sys.executable} -c \"{PRINT_RANK_ENV}\"\n", "--ntasks=2", "--time=1",
                               name="ranks")
    info = slurm_cluster.wait_finished(job, timeout=40)
    output = slurm_cluster.output(job)
    assert info["JobState"] == "COMPLETED", output
    ranks = [json.loads(line[len("RANK "):]) for line in output.splitlines() if line.startswith("RANK ")]
    assert sorted(rank["SLURM_PROCID"] for rank in ranks) == ["0", "1"], output
    for rank in ranks:
        assert rank["SLURM_NTASKS"] == "2"
        assert rank["SLURM_JOB_ID"] == job
        assert rank["SLURM_NODELIST"] == slurm_cluster.node
        assert rank["SLURM_LOCALID"] == rank["SLURM_PROCID"]  # one node


def test_job_that_requeues_itself_runs_again(slurm_cluster):
    runs = slurm_cluster.workdir / "runs"
    script = f"""#!/bin/bash
echo "${{SLURM_RESTART_COUNT:-unset}} $(date +%s.%N)" >> {runs}
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
    scontrol requeue "$SLURM_JOB_ID"
    sleep 30  # the requeue ends this run
    exit 3
fi
echo second run done
"""
    job = slurm_cluster.submit(script, "--requeue", "--ntasks=1", "--time=1", name="requeue")
    info = slurm_cluster.wait_finished(job, timeout=45)
    output = slurm_cluster.output(job)
    assert info["JobState"] == "COMPLETED", output
    assert info["Restarts"] == "1"
    assert "second run done" in output
    lines = [line.split() for line in runs.read_text().splitlines()]
    assert [count for count, _ in lines] == ["unset", "1"], lines
    delay = float(lines[1][1]) - float(lines[0][1])
    print(f"requeue delay: {delay:.1f} s (slurm.conf AuthInfo=cred_expire=10)")
    assert delay < 30


HANDLER = """
import os, signal, sys, time
here = sys.argv[1]
def on_usr1(signum, frame):
    with open(os.path.join(here, "got-usr1-" + os.environ["SLURM_PROCID"]), "w") as f:
        f.write(str(signum))
    sys.exit(0)
signal.signal(signal.SIGUSR1, on_usr1)
open(os.path.join(here, "ready-" + os.environ["SLURM_PROCID"]), "w").write(str(os.getpid()))
time.sleep(40)
sys.exit(5)
"""


def test_scancel_signal_reaches_srun_task(slurm_cluster):
    workdir = slurm_cluster.workdir
    (workdir / "handler.py").write_text(HANDLER)
    job = slurm_cluster.submit(f"srun {sys.executable} {workdir / 'handler.py'} {workdir}\n", "--ntasks=2",
                               "--time=1", name="signal")
    for rank in (0, 1):
        slurm_cluster.wait_for_file(workdir / f"ready-{rank}", job, timeout=40)
    started = time.monotonic()
    slurm_cluster.signal(job, "USR1")  # to the job's steps: both srun tasks, not the batch shell
    info = slurm_cluster.wait_finished(job, timeout=20)
    print(f"signal to job end: {time.monotonic() - started:.1f} s")
    output = slurm_cluster.output(job)
    assert info["JobState"] == "COMPLETED", output
    for rank in (0, 1):
        assert (workdir / f"got-usr1-{rank}").read_text() == "10"
