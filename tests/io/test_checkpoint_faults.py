"""What each way in to a checkpoint does with a faulty one: code planted in any pickled member of a file or a
directory (no code runs: ``UnsafeCheckpointError`` naming the file), a truncated "last" (the newest whole checkpoint
beside it, with a warning naming both), a stale preemption checkpoint (consumed by the run that went past it), a
full disk (``CheckpointError`` naming the path and the space, the earlier checkpoint kept), and a path that holds
no checkpoint (what it holds). Directory layouts of real zero3 (sync and async) and TP x FSDP2 runs are checked in
``tests/callbacks/test_async_checkpoint.py`` and ``tests/strategies/test_model_parallel.py``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from framework.accelerate import Accelerator
from framework.cli.consolidate import consolidate_command
from framework.errors import CheckpointError, UnsafeCheckpointError
from framework.io.checkpoint_dir import save_sharded
from framework.io.checkpoint_storage import load_checkpoint, save_checkpoint
from tests.helpers import Regressor, loader, quiet_trainer
from tests.io.planting import MEMBERS, REFUSED_FILE, Payload, plant


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """A one-process fit's checkpoint, as a file and as a directory."""
    root = tmp_path_factory.mktemp("saved")
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(root / "run.ckpt")
    save_sharded(load_checkpoint(root / "run.ckpt"), root / "run-dir.ckpt", is_writer=True, barrier=lambda: None)
    return {"file": root / "run.ckpt", "directory": root / "run-dir.ckpt"}


def _planted(saved: dict[str, Path], form: str, where: Path) -> tuple[Path, Path]:
    marker = where.parent / "payload-ran"
    if form == "file":
        torch.save({**load_checkpoint(saved["file"]), "planted": Payload(marker)}, where)
    else:
        shutil.copytree(saved["directory"], where)
        plant(where, form, marker)
    return where, marker


def _fit(path, root):
    quiet_trainer(max_steps=4, default_root_dir=root).fit(Regressor(), loader(), ckpt_path=path)


def _auto_resume(path, root):
    shutil.move(path, root / "hpc_ckpt_9.ckpt")  # what a preempted run leaves: a plain fit() finds it
    quiet_trainer(max_steps=4, default_root_dir=root).fit(Regressor(), loader())


def _accelerator(path, root):
    accelerator = Accelerator(cpu=True, project_dir=str(root))
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state(str(root / "state"))
    if Path(path).is_dir():  # where an FSDP run keeps a model's sharded state
        shutil.move(path, root / "state" / "pytorch_model_fsdp_0")
    else:
        shutil.move(path, root / "state" / "optimizer.bin")
    accelerator.load_state(str(root / "state"))


def _consolidate(path, root):
    if consolidate_command([str(path), str(root / "whole.ckpt")]) != 0:
        assert not (root / "whole.ckpt").exists()
        raise UnsafeCheckpointError("see stderr")


ENTRY_POINTS = {
    "fit": _fit,
    "validate": lambda path, root: quiet_trainer().validate(Regressor(), loader(), ckpt_path=path, verbose=False),
    "test": lambda path, root: quiet_trainer().test(Regressor(), loader(), ckpt_path=path, verbose=False),
    "predict": lambda path, root: quiet_trainer().predict(Regressor(), loader(), ckpt_path=path),
    "auto-resume": _auto_resume,
    "load_from_checkpoint": lambda path, root: Regressor.load_from_checkpoint(path),
    "io.load_checkpoint": lambda path, root: load_checkpoint(path, weights_only=True),
    "Accelerator.load_state": _accelerator,
    "consolidate": _consolidate,
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("form", ["file", *MEMBERS])
def test_code_planted_in_a_checkpoint_never_runs_whatever_the_way_in(saved, tmp_path, capsys, form, entry):
    if form == "file" and entry == "consolidate":
        pytest.skip("consolidate takes directories")
    path, marker = _planted(saved, form, tmp_path / "planted.ckpt")
    with pytest.raises(UnsafeCheckpointError) as refused:
        ENTRY_POINTS[entry](path, tmp_path)
    moved_to = {"auto-resume": "hpc_ckpt_9.ckpt", "Accelerator.load_state": "optimizer.bin"}
    named = REFUSED_FILE.get(form) or moved_to.get(entry, "planted.ckpt")
    assert named in str(refused.value) + capsys.readouterr().err
    assert not marker.exists(), "the planted code ran"


def test_a_planted_checkpoint_loads_when_told_to_trust_it(saved, tmp_path):
    path, marker = _planted(saved, "metadata", tmp_path / "planted.ckpt")
    quiet_trainer(max_steps=4).fit(Regressor(), loader(), ckpt_path=path, weights_only=False)
    assert marker.exists()


# -- a truncated "last", a stale preemption checkpoint ---

def _cut(path: Path) -> None:
    target = path / "__0_0.distcp" if path.is_dir() else path
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])


@pytest.mark.parametrize("form", ["file", "directory"])
def test_a_truncated_last_resumes_from_the_newest_whole_checkpoint_beside_it_naming_both(saved, tmp_path, form):
    root = tmp_path / "checkpoints"
    root.mkdir()
    copy = shutil.copytree if form == "directory" else shutil.copy
    copy(saved[form], root / "epoch=0-step=3.ckpt")
    copy(saved[form], root / "last.ckpt")
    _cut(root / "last.ckpt")
    trainer = quiet_trainer(max_steps=4, default_root_dir=tmp_path, enable_checkpointing=True)
    with pytest.warns(UserWarning, match=r"last\.ckpt.*epoch=0-step=3\.ckpt"):
        trainer.fit(Regressor(), loader(), ckpt_path="last")
    assert trainer.ckpt_path == str(root / "epoch=0-step=3.ckpt") and trainer.global_step == 4
    alone = tmp_path / "alone" / "checkpoints"
    alone.mkdir(parents=True)
    copy(saved[form], alone / "last.ckpt")
    _cut(alone / "last.ckpt")
    trainer = quiet_trainer(max_steps=4, default_root_dir=alone.parent, enable_checkpointing=True)
    with pytest.raises(CheckpointError, match=r"last\.ckpt.*no complete checkpoint beside it"):
        trainer.fit(Regressor(), loader(), ckpt_path="last")
    with pytest.raises(CheckpointError, match=r"last\.ckpt.*(damaged|truncated)"):  # named, it is refused
        quiet_trainer(max_steps=4).fit(Regressor(), loader(), ckpt_path=alone / "last.ckpt")


class _Preempted(Regressor):
    def training_step(self, batch, batch_idx):
        if self.global_step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)


def test_a_preemption_checkpoint_is_resumed_once_and_a_finished_runs_never_again(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        quiet_trainer(max_steps=8, default_root_dir=tmp_path).fit(_Preempted(), loader())
    assert stopped.value.code == 75 and os.listdir(tmp_path) == ["hpc_ckpt_1.ckpt"]
    resumed = quiet_trainer(max_steps=8, default_root_dir=tmp_path)
    resumed.fit(Regressor(), loader())  # started again: resumes from it, then consumes it at its end
    assert resumed.ckpt_path == str(tmp_path / "hpc_ckpt_1.ckpt") and resumed.global_step == 8
    assert os.listdir(tmp_path) == []
    later = quiet_trainer(max_steps=8, default_root_dir=tmp_path)
    later.fit(Regressor(), loader())
    assert later.ckpt_path is None


# -- a full disk; a path that is no checkpoint ---

@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("form", ["file", "directory"])
def test_a_full_disk_is_a_checkpoint_error_naming_the_path_and_the_space_and_keeps_the_earlier_one(small_disk,
                                                                                                   form):
    small = {"state_dict": {"w": torch.ones(1000)}}
    big = {"state_dict": {"w": torch.ones(200_000)}}  # 800 kB: more than the disk holds

    def save(checkpoint, path):
        if form == "file":
            save_checkpoint(checkpoint, path)
        else:
            save_sharded(checkpoint, path, is_writer=True, barrier=lambda: None)

    save(small, small_disk / "last.ckpt")
    before = sorted(os.listdir(small_disk))
    with pytest.raises(CheckpointError, match=r"last\.ckpt.*(needed|needs).*left"):
        save(big, small_disk / "last.ckpt")
    assert sorted(os.listdir(small_disk)) == before  # no temporary left, the earlier checkpoint in place
    torch.testing.assert_close(load_checkpoint(small_disk / "last.ckpt")["state_dict"]["w"], torch.ones(1000))


@pytest.mark.parametrize(("held", "said"), [
    (torch.ones(3), "holds a tensor of shape"),
    ({"layer.weight": torch.ones(3)}, "state_dict"),
    ({"step": 3}, "state_dict"),
])
def test_a_ckpt_path_that_holds_no_trainer_checkpoint_says_what_it_holds(tmp_path, held, said):
    torch.save(held, tmp_path / "other.ckpt")
    with pytest.raises(CheckpointError, match=said):
        quiet_trainer(max_steps=1).fit(Regressor(), loader(), ckpt_path=tmp_path / "other.ckpt")
