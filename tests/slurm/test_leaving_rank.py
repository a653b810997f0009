"""Under real SLURM (``srun -n 2``, no torchrun): a rank that calls ``sys.exit(1)`` while the other waits for it in
``wait_for_everyone()`` ends the job within seconds, and the waiting rank's error names it."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "cli" / "leaving_script.py"


def test_a_rank_that_exits_while_another_waits_for_it_ends_the_srun_step_in_seconds(slurm_cluster):
    out = slurm_cluster.workdir
    job = slurm_cluster.submit(f"srun {sys.executable} {SCRIPT} {out}\n", "--ntasks=2", "--time=2", name="leaving")
    info = slurm_cluster.wait_finished(job, timeout=90)
    output = slurm_cluster.output(job)
    assert info["JobState"] == "FAILED", output
    left = float((out / "leaving").read_text())
    ended = datetime.fromisoformat(info["EndTime"]).timestamp()  # whole seconds, this machine's time zone
    assert ended - left < 11, f"the job ended {ended - left:.0f} s after rank 1 left:\n{output}"
    assert "Rank 1 reached its end (sys.exit, or the end of its script)" in output
    assert "rank 0 was answered" not in output
