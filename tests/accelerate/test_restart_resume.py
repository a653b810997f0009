"""Restarts with the Accelerator: an Accelerate loop restarted by ``framework launch --max-restarts`` after a rank is
SIGKILLed ends with the uninterrupted run's weights, bit for bit; a ``save_state`` killed at any phase leaves the
state saved before it as the one ``load_state()`` picks, and the next save goes on cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from framework.accelerate import Accelerator, state_folders
from tests.accelerate.killed_save import accelerator_for

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "framework", "launch", "--nproc-per-node", "2", "--max-restarts", "2",
          str(ROOT / "tests" / "accelerate" / "restart_loop.py")]
KILLED_SAVE = str(ROOT / "tests" / "accelerate" / "killed_save.py")


def _environment() -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("ACCELERATE_", "FSDP_", "FRAMEWORK_RESTART")) and key != "OMP_NUM_THREADS"}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    environment["CUDA_VISIBLE_DEVICES"] = ""
    return environment


def _launch(work: Path, *fault: str) -> str:
    work.mkdir()
    done = subprocess.run([*LAUNCH, str(work), *fault], capture_output=True, text=True, cwd=ROOT,
                          env=_environment(), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stderr


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, torch.Tensor]:
    work = tmp_path_factory.mktemp("uninterrupted") / "work"
    _launch(work)
    return torch.load(work / "weights.pt", weights_only=True)


# Both faults strike in one launch, each once, so the run is restarted twice, each time from what the kill left:
# step:4 ends the first epoch, so the first restart loads the state saved at the last batch of a pass and the
# loop's next pass must be the next epoch's; save:5 then kills rank 1 of the restarted run inside save_state while
# the main process writes the state, so the second restart must pass over that half-written state. Either resume
# going wrong leaves different weights at the end (one launch instead of one per fault: a launcher and a first
# round of ranks fewer).
def test_a_loop_restarted_after_a_rank_is_killed_ends_bitwise_as_the_uninterrupted_one(tmp_path, uninterrupted):
    work = tmp_path / "work"
    errors = _launch(work, "step:4", "save:5")
    assert "rank 1 was killed by SIGKILL; starting all ranks again (restart 1 of 2)" in errors
    assert "rank 1 was killed by SIGKILL; starting all ranks again (restart 2 of 2)" in errors
    assert sorted((work / "starts").read_text().split("\n")[:-1]) == ["0 0", "0 1", "1 0", "1 1", "2 0", "2 1"]
    assert sorted(os.listdir(work)) == ["fault-done-save-5", "fault-done-step-4", "run", "starts", "weights.pt"]
    weights = torch.load(work / "weights.pt", weights_only=True)
    assert sorted(weights) == sorted(uninterrupted)
    for name, value in uninterrupted.items():
        assert torch.equal(weights[name], value), name
    # 9 optimizer steps, one save each, numbered on after the restarts; total_limit=2; nothing left half-done
    assert sorted(os.listdir(work / "run")) == ["checkpoints"]
    assert sorted(os.listdir(work / "run" / "checkpoints")) == ["checkpoint_7", "checkpoint_8"]


# (mode, phase of the second save at which it is killed, the save count of the state load_state then finds)
KILLS = [
    ("automatic", "staging", 1), ("automatic", "files", 1), ("automatic", "marker", 1),
    ("automatic", "rename:1:before", 1),  # the commit marker written, the folder not renamed into place
    ("automatic", "rename:1:after", 2),  # committed; total_limit's deletion of checkpoint_0 not begun
    ("automatic", "rename:2:after", 2),  # checkpoint_0 renamed away, not yet deleted
    ("named", "files", 1), ("named", "marker", 1),
    ("named", "rename:1:after", 1),  # the old state set aside at state.previous, the new one not in place
    ("named", "rename:2:after", 2),  # the new state in place, the old one still set aside
    ("named", "rename:3:after", 2),  # the old state renamed away, not yet deleted
]


@pytest.fixture(scope="module")
def killed_saves(tmp_path_factory) -> dict[tuple[str, str], tuple[str, int]]:
    """Every kill of KILLS, each in a process of its own: its folder and exit status."""
    base = tmp_path_factory.mktemp("killed")
    specs = [f"{mode},{phase}" for mode, phase, _ in KILLS]
    subprocess.run([sys.executable, KILLED_SAVE, str(base), *specs], cwd=ROOT, env=_environment(), timeout=300,
                   check=True)
    statuses = json.loads((base / "statuses.json").read_text())
    return {(mode, phase): (str(base / str(index)), status)
            for index, ((mode, phase, _), status) in enumerate(zip(KILLS, statuses, strict=True))}


@pytest.mark.parametrize(("mode", "phase", "expected"), KILLS)
def test_a_save_killed_at_any_phase_leaves_the_state_before_it_to_load_state(killed_saves, mode, phase, expected):
    folder, status = killed_saves[mode, phase]
    assert status == -9 and os.path.exists(f"{folder}.reached"), f"not killed at {phase} (exit status {status})"
    if mode == "automatic":
        # checkpoints/ holds complete states only, so even Accelerate's own pick (the highest number) is complete
        numbered = state_folders.numbered_states(folder)
        assert numbered and all(state_folders.is_complete_state(path) for _, path in numbered)
    accelerator, model, saves = accelerator_for(folder, mode)
    accelerator.load_state(None if mode == "automatic" else os.path.join(folder, "state"))
    assert saves.count == expected
    first = accelerator_for(folder + "-fresh", mode)[1].module[0].weight  # the second save's: the first's plus one
    assert torch.equal(model.module[0].weight, first + (expected - 1.0))
    saves.count = 3
    saved = accelerator.save_state(None if mode == "automatic" else os.path.join(folder, "state"))
    if mode == "automatic":  # the numbering goes on after the loaded state; total_limit=1 keeps the new one
        assert saved.endswith(f"checkpoint_{expected}") and accelerator.save_iteration == expected + 1
        assert sorted(os.listdir(folder)) == ["checkpoints"]
        assert os.listdir(os.path.join(folder, "checkpoints")) == [f"checkpoint_{expected}"]
    else:
        assert sorted(os.listdir(folder)) == ["state"]
    later, _, again = accelerator_for(folder, mode)
    later.load_state(None if mode == "automatic" else saved)
    assert again.count == 3


def test_load_state_skips_an_incomplete_newest_folder_and_total_limit_keeps_the_newest_complete(tmp_path):
    accelerator, _, saves = accelerator_for(str(tmp_path), "automatic")
    accelerator.project_configuration.total_limit = 2
    for count in (1, 2):
        saves.count = count
        accelerator.save_state()
    # A folder under a newer number without the commit marker (a save cut short)
    (tmp_path / "checkpoints" / "checkpoint_5").mkdir()
    (tmp_path / "checkpoints" / "checkpoint_5" / "model.safetensors").write_bytes(b"partial")
    os.remove(tmp_path / "checkpoints" / "checkpoint_0" / state_folders.COMMIT_FILE)
    later, _, loaded = accelerator_for(str(tmp_path), "automatic")
    later.load_state()
    assert loaded.count == 2 and later.save_iteration == 2
    later.project_configuration.total_limit = 1
    loaded.count = 3
    later.save_state()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_2", "checkpoint_5"]
    (tmp_path / "checkpoints" / "checkpoint_2" / state_folders.COMMIT_FILE).unlink()
    with pytest.raises(Exception, match="checkpoint_2, checkpoint_5 lack state_complete.json"):
        accelerator_for(str(tmp_path), "automatic")[0].load_state()


def test_files_a_save_state_pre_hook_writes_into_its_folder_are_part_of_the_committed_state(tmp_path):
    accelerator, _, _ = accelerator_for(str(tmp_path), "automatic")
    handle = accelerator.register_save_state_pre_hook(
        lambda models, weights, folder: Path(folder, "extra.txt").write_text("written by the hook"))
    saved = accelerator.save_state()
    assert (Path(saved) / "extra.txt").read_text() == "written by the hook"
    assert "extra.txt" in json.loads((Path(saved) / state_folders.COMMIT_FILE).read_text())["entries"]
    handle.remove()
    assert "extra.txt" not in os.listdir(accelerator.save_state())


def _passes(loader, count: int) -> list[list[int]]:
    return [[int(i) for (batch,) in loader for i in batch] for _ in range(count)]


def test_a_state_saved_at_the_last_batch_of_a_pass_resumes_with_the_next_pass_as_accelerate_does():
    """Accelerate marks a loader saved at its last batch as finished: the resumed loop's next pass is the next
    epoch (its examples compute the epoch from the steps done); skipping the done pass's batches yields none."""
    dataset = TensorDataset(torch.arange(20))

    def loader():
        torch.manual_seed(0)
        return Accelerator(cpu=True).prepare(DataLoader(dataset, batch_size=4, shuffle=True))

    whole = loader()
    expected = _passes(whole, 3)
    interrupted = loader()
    for index, _ in enumerate(interrupted):
        if index == 4:
            state, rng = interrupted.state_dict(), torch.get_rng_state()
    assert state["finished"] and not state["in_pass"]
    for skip in (None, 5):  # the epoch computed from the steps; the batches of the epoch done skipped
        resumed = loader()
        resumed.load_state_dict(state)
        torch.set_rng_state(rng)
        if skip is not None:
            assert list(resumed.iterate(skip=skip)) == []
        assert _passes(resumed, 2) == expected[1:]
