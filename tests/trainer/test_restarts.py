"""Jobs that recover by themselves: a Lightning-form DDP script (``restart_run.py``: shuffling, dropout,
accumulation, a scheduler, two loader workers, a CSV log), started by ``framework launch``, loses a rank or receives
a preemption signal, and the same command, unchanged, ends with the weights, optimizer state, global step and CSV
rows of the run never interrupted, to the bit."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from framework.runtime.preemption_signals import REQUEUE_EXIT_CODE

ROOT = Path(__file__).parents[2]
SCRIPT = str(ROOT / "tests" / "trainer" / "restart_run.py")


def _launch(work: Path, fault: str = "", restarts: int = 0) -> subprocess.CompletedProcess:
    work.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "framework", "launch", "--nproc-per-node", "2", "--max-restarts", str(restarts),
               SCRIPT, str(work), *([fault] if fault else [])]
    return _run(command, {**os.environ, "PYTHONWARNINGS": "ignore"})


TIMEOUT_S = 180


def _run(command: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess:
    """``command`` run to its end; if it is still running after TIMEOUT_S, its process group (the script and the
    ranks it forks; ranks `framework launch` starts are in sessions of their own, so only the launcher there) is
    sent SIGABRT, which faulthandler answers with each thread's Python stack, and the test fails showing them."""
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**environment, "PYTHONFAULTHANDLER": "1"}, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)
        try:
            stdout, stderr = process.communicate(timeout=20)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"still running after {TIMEOUT_S} s; where each process was:\n{stderr[-12000:]}\n{stdout[-2000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _outcome(work: Path) -> tuple[dict, str, dict]:
    rows = (work / "logs" / "version_0" / "metrics.csv").read_text()
    return torch.load(work / "result.pt", weights_only=True), rows, _scalars(work / "tensorboard" / "version_0")


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series as TensorBoard shows it: across the folder's event files, a restart's ``purge_step``
    dropping what the interrupted run logged from that step on."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), purge_orphaned_data=True)
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    work = tmp_path_factory.mktemp("uninterrupted")
    done = _launch(work)
    assert done.returncode == 0, done.stderr[-3000:]
    return _outcome(work)


def _assert_same_run(outcome: tuple[dict, str, dict], expected: tuple[dict, str, dict]) -> None:
    (result, rows, scalars), (reference, reference_rows, reference_scalars) = outcome, expected
    assert scalars == reference_scalars and reference_scalars["loss_step"]  # each step once, in order, the same
    assert result["global_step"] == reference["global_step"] == 9
    for name, tensor in reference["weights"].items():
        assert torch.equal(result["weights"][name], tensor), name
    for index, state in reference["optimizer"]["state"].items():
        assert torch.equal(result["optimizer"]["state"][index]["momentum_buffer"], state["momentum_buffer"])
    assert rows == reference_rows  # no step row missing or twice, the epoch means exact


def test_a_killed_rank_is_restarted_and_the_run_resumes_from_the_newest_complete_checkpoint(tmp_path, uninterrupted):
    """Started as ``python restart_run.py`` with ``DDPStrategy(max_restarts=2, start_method="popen")``: a Trainer
    whose ranks run the script again becomes ``framework launch --nproc-per-node 2 --max-restarts 2`` for it (an
    exec, the command line the other tests here start themselves), so this one launch shows both that and the
    launcher's restart; the first line of ``starts`` is the script's own start, before it became the launcher."""
    # rank 0 is busy outside any collective when rank 1 dies; torchrun's agent then sends it SIGTERM, a preemption
    # wish it cannot answer without rank 1: it ends at once instead of holding the restart for the agent's 30 s
    environment = {**os.environ, "PYTHONWARNINGS": "ignore", "RESTART_RUN_RESTARTS": "2", "RESTART_RUN_START": "popen"}
    done = _run([sys.executable, SCRIPT, str(tmp_path), "kill:1:4,stall:0:4"], environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 was killed by SIGKILL; starting all ranks again (restart 1 of 2)" in done.stderr
    assert "rank 0: SIGTERM received while rank 1 is gone; a preemption checkpoint needs every rank" in done.stderr
    assert "of this job: rank 1 was killed by SIGKILL; the newest complete checkpoint this job wrote" in \
        done.stdout + done.stderr
    assert (tmp_path / "starts").read_text().split("\n")[0] == "0 -"
    assert sorted((tmp_path / "starts").read_text().split("\n")[1:-1]) == ["0 0", "0 1", "1 0", "1 1"]
    _assert_same_run(_outcome(tmp_path), uninterrupted)
    [record] = [json.loads(line) for line in (tmp_path / "logs" / "version_0" / "restarts.jsonl").open()]
    assert record == {"restart": 1, "max_restarts": 2, "reason": "rank 1 was killed by SIGKILL",
                      "checkpoint": str(tmp_path / "checkpoints" / "last.ckpt"), "global_step": record["global_step"]}
    assert record["global_step"] in (3, 4)  # the last save before the kill at step 4 (or the one at 4, if it finished)
    assert f"at global step {record['global_step']}: restart 1 of 2 of this job" in done.stdout + done.stderr


def test_an_exception_in_the_script_is_not_retried(tmp_path):
    """It fails the job once, with its traceback, though restarts are left."""
    done = _launch(tmp_path, "raise:1:4", restarts=2)
    assert done.returncode == 1
    assert "ValueError: a bug in the training script" in done.stderr
    assert "starting all ranks again" not in done.stderr
    assert sorted((tmp_path / "starts").read_text().split("\n")[:-1]) == ["0 0", "1 0"]  # one attempt only


def test_a_preemption_signal_to_one_rank_saves_every_rank_at_one_step_and_the_next_start_resumes(
        tmp_path, uninterrupted):
    """One job preempted twice, the same command started again after each: SIGUSR2 to rank 0 at the first step,
    then, in the start that resumed from it, SIGUSR1 while a loader worker of rank 1 fetches (to the rank and to
    the worker). Each stop is checked as a job preempted once would be; during validation and during a save: in
    the fault soak below."""
    faults = "SIGUSR1:1:2:worker,SIGUSR2:0:0"  # the worker's first: a loader worker knows the first one's marker
    resumed = None
    for said_by_rank_0 in ("SIGUSR2 received ", ""):  # the second's wording depends on timing (seen both)
        stopped = _launch(tmp_path, faults)
        assert stopped.returncode == REQUEUE_EXIT_CODE, stopped.stderr[-3000:]
        assert not (tmp_path / "result.pt").exists()
        if resumed is not None:
            assert f"Resuming from {resumed}" in stopped.stdout + stopped.stderr
        # the first one's removed: else this one would be hpc_ckpt_2
        [saved] = [name for name in os.listdir(tmp_path) if name.startswith("hpc_ckpt_")]
        assert saved == "hpc_ckpt_1.ckpt"
        checkpoint = torch.load(tmp_path / saved, weights_only=True)
        said = stopped.stdout + stopped.stderr
        assert f"{said_by_rank_0}at global step {checkpoint['global_step']}: saved {tmp_path / saved}" in said
        # taken between batches (not inside one) and right after an optimizer step: no accumulated gradient is lost
        assert not any(results["in_batch"] for results in checkpoint["loops"]["fit"]["train_results"])
        assert checkpoint["loops"]["fit"]["batch_stepped"]
        resumed = tmp_path / saved

    done = _launch(tmp_path, faults)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Resuming from {resumed}" in done.stdout + done.stderr
    assert not resumed.exists()  # done with: a later run of the script starts afresh
    _assert_same_run(_outcome(tmp_path), uninterrupted)


def test_a_run_through_a_sequence_of_random_faults_ends_as_the_uninterrupted_run(tmp_path, uninterrupted):
    """Four faults (SIGKILL, SIGTERM, SIGUSR1 to one rank; in a batch, a validation, a save, an epoch's end), drawn
    with a fixed seed so CI runs the same sequence. The test's loop plays the scheduler: it starts the job again
    when it exits with the requeue status, as SLURM's requeue would; nothing else steps in. This seed's sequence
    kills a rank in epoch 0's end and then in the next batch: the start after the second kill resumes from the
    last.ckpt the one before rewrote at that epoch's end, whose epoch row only the checkpoint carries (it once
    went missing)."""
    draw = random.Random(35)
    # every place and every kind at least once, at distinct steps; a signal (not a kill) in the validation and in the
    # save. Validations and epoch ends come at steps 3 and 6 (three optimizer steps an epoch). One fault in a batch:
    # a kill and a signal in a batch are each tested on their own above.
    val_step = draw.choice((3, 6))
    save, batch = draw.sample([1, 2, 4, 5, 7, 8], 2)
    places = [("SIGTERM", val_step, "val"), ("kill", 9 - val_step, "epochend"), ("SIGUSR1", save, "save"),
              (draw.choice(["kill", "SIGUSR1"]), batch, "batch")]
    faults = ",".join(f"{kind}:{draw.randrange(2)}:{step}:{where}"
                      for kind, step, where in sorted(places, key=lambda place: place[1]))
    statuses = []
    while not statuses or statuses[-1] == REQUEUE_EXIT_CODE:
        assert len(statuses) < 8, statuses
        done = _launch(tmp_path, faults, restarts=5)
        statuses.append(done.returncode)
    assert statuses[-1] == 0, (faults, statuses, done.stderr[-3000:])
    fired = sorted(name for name in os.listdir(tmp_path) if name.startswith("fault-done"))
    assert faults == "SIGUSR1:1:2:save,kill:1:3:epochend,kill:1:4:batch,SIGTERM:0:6:val"  # the sequence meant
    assert len(fired) == 4, (faults, fired)  # every fault happened
    _assert_same_run(_outcome(tmp_path), uninterrupted)


def test_the_trainers_own_launcher_restarts_its_forked_ranks_too(tmp_path, uninterrupted):
    """``python train.py`` with ``DDPStrategy(max_restarts=2, start_method="fork")``: ranks the Trainer forks are
    started again by it. (Where it would run the script again for them, "popen", it becomes ``framework launch``:
    the killed-rank test above.)"""
    environment = {**os.environ, "PYTHONWARNINGS": "ignore", "RESTART_RUN_RESTARTS": "2", "RESTART_RUN_START": "fork"}
    done = _run([sys.executable, SCRIPT, str(tmp_path), "kill:1:4"], environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 was killed by SIGKILL; starting all ranks again (restart 1 of 2)" in done.stderr
    result, rows, scalars = _outcome(tmp_path)
    reference, reference_rows, reference_scalars = uninterrupted
    assert scalars == reference_scalars
    assert result["global_step"] == reference["global_step"]
    for name, tensor in reference["weights"].items():
        assert torch.equal(result["weights"][name], tensor), name
    assert rows == reference_rows  # no optimizer to compare: not in this process, where ranks were forked


def test_max_restarts_must_be_a_whole_number():
    from framework.errors import MisconfigurationError
    from framework.strategies import DDPStrategy

    with pytest.raises(MisconfigurationError, match=r"DDPStrategy\(max_restarts=-1\): accepted a whole number >= 0"):
        DDPStrategy(max_restarts=-1)
