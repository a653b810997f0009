"""Only complete checkpoints count: a save SIGKILLed at any phase leaves the previous checkpoint as the one
a resume picks, never a half-written one under a final name, and no cleanup of the one before.

Each case runs ``tests/io/interrupted_save.py`` in a process of its own (with its ranks), which stops dead
at the phase and says so through a file; the test then kills its whole process group and looks at the
files it left, and saves again where it left them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from framework.callbacks import ModelCheckpoint
from framework.callbacks.checkpoint_files import remove_unfinished_writes
from framework.io.checkpoint_dir import save_sharded
from framework.io.checkpoint_storage import (
    is_complete_checkpoint,
    load_checkpoint,
    newest_complete_checkpoint,
    save_checkpoint,
)
from framework.io.fs import is_temporary, leftover_temporaries
from tests.io.interrupted_save import state_at

ROOT = Path(__file__).parents[2]

pytestmark = [
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL and process groups"),
    # DCP's notes on a save without a process group (the test's own saves are on one process) and on memory://
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning",
                               "ignore:fsync not supported:UserWarning"),
]


@pytest.fixture(scope="module")
def saver():
    """``interrupted_save --serve``: it forks each saving process from an interpreter that imported everything."""
    server = subprocess.Popen([sys.executable, "-m", "tests.io.interrupted_save", "--serve"], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    yield server
    server.stdin.close()
    server.wait(timeout=60)


def _start(saver: subprocess.Popen, spec: dict) -> int:
    """Start the saving process of ``spec`` (its output in ``spec["log"]``); its process id, also its group's."""
    saver.stdin.write(json.dumps(spec) + "\n")
    saver.stdin.flush()
    return int(saver.stdout.readline())


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a process that ended stays a zombie until the server reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stop_and_kill(tmp_path: Path, saver: subprocess.Popen, **spec) -> Path:
    """Run the saving process of ``spec`` until it stops at its phase, SIGKILL it and its ranks; its dirpath."""
    dirpath, signals = tmp_path / "checkpoints", tmp_path / "signals"
    dirpath.mkdir()
    signals.mkdir()
    log = tmp_path / "stderr.log"
    spec = {"dirpath": str(dirpath), "signals": str(signals), "ranks": 1, "target": "last.ckpt",
            "occurrence": 1, "run": "io", "log": str(log), **spec}
    expected = {f"{spec['phase']}-r1", "written-r0"} if spec["phase"] == "middle" and spec["ranks"] > 1 \
        else {f"{spec['phase']}-r0"}
    pid = _start(saver, spec)
    try:
        deadline = time.monotonic() + 90
        while not expected <= set(os.listdir(signals)):
            assert _running(pid), f"the saving process ended before {expected}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no stop at {expected}:\n{log.read_text()[-3000:]}"
            time.sleep(0.02)
    finally:
        os.killpg(pid, signal.SIGKILL)  # the process and the ranks it forked, wherever they are
        deadline = time.monotonic() + 30
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "finished-r0" not in os.listdir(signals)
    return dirpath


def _step(path: str | Path) -> int:
    checkpoint = load_checkpoint(path)
    step = checkpoint.get("step", checkpoint.get("global_step"))
    if "weight" in checkpoint:  # the io cases: the tensors are those of that step, whole
        assert torch.equal(checkpoint["weight"], state_at(step)["weight"]), path
    return step


def _entries(dirpath: Path) -> list[str]:
    return sorted(str(dirpath / name) for name in os.listdir(dirpath))


def _assert_only_whole_checkpoints_under_final_names(dirpath: Path) -> None:
    for path in _entries(dirpath):
        if is_temporary(path):
            assert not is_complete_checkpoint(path), path
        else:
            assert is_complete_checkpoint(path), f"{path} is under a final name but not complete"
            _step(path)  # and it loads


def _last(dirpath: Path) -> list[str]:
    return ModelCheckpoint(dirpath=dirpath, save_last=True).find_last_checkpoints()


IO_CASES = [("file", 1, mode, phase) for mode in ("sync", "async") for phase in ("before", "middle", "commit")] + \
    [("dir", 2, mode, phase) for mode in ("sync", "async") for phase in ("before", "middle", "commit", "swap")]


@pytest.mark.parametrize(("form", "ranks", "mode", "phase"), IO_CASES)
def test_a_save_killed_at_any_phase_leaves_the_previous_checkpoint_as_the_latest(tmp_path, saver, form, ranks,
                                                                                 mode, phase):
    # Save point 1 wrote last.ckpt and step=1.ckpt; save point 2 wrote step=2.ckpt whole, then was killed
    # while it replaced last.ckpt, before deleting step=1.ckpt.
    dirpath = _stop_and_kill(tmp_path, saver, form=form, ranks=ranks, mode=mode, phase=phase)
    if form == "dir" and phase == "middle":  # killed between the ranks' writes: one part is there, not the other
        unfinished = [path for path in _entries(dirpath) if is_temporary(path)]
        assert len(unfinished) == 1 and sorted(name for name in os.listdir(unfinished[0])
                                               if name.endswith(".distcp")) == ["__0_0.distcp"]
    if phase in ("middle", "commit"):
        assert leftover_temporaries(dirpath), "the kill was meant to land while a temporary was there"

    _assert_only_whole_checkpoints_under_final_names(dirpath)
    last = _last(dirpath)
    set_aside = phase == "swap"  # killed between the two renames: the previous one waits, whole, beside
    assert [os.path.basename(path) for path in last] == ["last.ckpt.previous" if set_aside else "last.ckpt"]
    assert newest_complete_checkpoint(last) == last[0] and _step(last[0]) == 1
    assert _step(dirpath / "step=1.ckpt") == 1  # the cleanup waits for the whole save point
    # Of everything there, temporaries included (the one killed before its commit is whole, and newest),
    # the newest complete checkpoint is the one save point 2 finished.
    assert newest_complete_checkpoint(_entries(dirpath)) == str(dirpath / "step=2.ckpt")

    # What the kill left does not stop the next save of last.ckpt, nor is it picked afterwards.
    path = str(dirpath / "last.ckpt")
    if form == "file":
        save_checkpoint(state_at(3), path)
    else:
        save_sharded(state_at(3), path, is_writer=True, barrier=lambda: None)
    remove_unfinished_writes(str(dirpath), ".ckpt")  # what ModelCheckpoint's setup does for the next run
    assert sorted(os.listdir(dirpath)) == ["last.ckpt", "step=1.ckpt", "step=2.ckpt"]
    assert _last(dirpath) == [path] and newest_complete_checkpoint(_entries(dirpath)) == path and _step(path) == 3


TRAINER_CASES = [
    # A link to the newest file: the file it pointed to before stays until it points to the new one.
    pytest.param({"form": "file", "mode": "sync", "phase": "link", "save_last": "link"}, "last.ckpt", id="file-link"),
    pytest.param({"form": "file", "mode": "async", "phase": "commit"}, "last.ckpt", id="file-async-commit"),
    pytest.param({"form": "dir", "ranks": 2, "mode": "sync", "phase": "swap"}, "last.ckpt.previous",
                 id="dir-sync-swap"),
    pytest.param({"form": "dir", "ranks": 2, "mode": "async", "phase": "middle"}, "last.ckpt", id="dir-async-middle"),
]


@pytest.mark.parametrize(("spec", "picked"), TRAINER_CASES)
def test_model_checkpoint_killed_in_its_second_save_resumes_from_the_first(tmp_path, saver, spec, picked):
    # ModelCheckpoint(every_n_train_steps=1, save_top_k=1, save_last=...): step 2's save point is killed while
    # it writes (or links) last.ckpt, after writing epoch=0-step=2.ckpt, before deleting epoch=0-step=1.ckpt.
    dirpath = _stop_and_kill(tmp_path, saver, run="trainer", occurrence=2, **spec)
    _assert_only_whole_checkpoints_under_final_names(dirpath)
    last = _last(dirpath)
    assert [os.path.basename(path) for path in last] == [picked] and _step(last[0]) == 1
    assert _step(dirpath / "epoch=0-step=1.ckpt") == 1
    if spec["phase"] == "link":
        assert os.readlink(dirpath / "last.ckpt") == "epoch=0-step=1.ckpt"

    # The next run resumes from it and saves over what the kill left.
    for name in os.listdir(tmp_path / "signals"):
        os.remove(tmp_path / "signals" / name)
    log = tmp_path / "resume.log"
    resume = {"dirpath": str(dirpath), "signals": str(tmp_path / "signals"), "ranks": 1, "target": "",
              "occurrence": 0, **spec, "run": "resume", "phase": "none", "log": str(log)}
    _start(saver, resume)
    deadline = time.monotonic() + 180
    while not Path(f"{log}.exit").exists():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    assert Path(f"{log}.exit").read_text() == "0", log.read_text()[-3000:]
    assert "finished-r0" in os.listdir(tmp_path / "signals")
    assert leftover_temporaries(dirpath) == [] and not os.path.lexists(dirpath / "last.ckpt.previous")
    assert _step(newest_complete_checkpoint(_last(dirpath))) == 4
    _assert_only_whole_checkpoints_under_final_names(dirpath)


# -- what counts as complete, without a kill ---
def test_is_complete_checkpoint_refuses_truncated_files_temporaries_and_uncommitted_directories(tmp_path):
    whole = tmp_path / "whole.ckpt"
    save_checkpoint(state_at(1), whole)
    data = whole.read_bytes()
    for name, content in [("empty.ckpt", b""), ("half.ckpt", data[: len(data) // 2]),
                          ("all-but-the-end.ckpt", data[:-1]), ("whole.ckpt.tmp-0123abcd", data)]:
        (tmp_path / name).write_bytes(content)
        assert not is_complete_checkpoint(tmp_path / name), name
    assert is_complete_checkpoint(whole) and not is_complete_checkpoint(tmp_path / "missing.ckpt")
    os.symlink("whole.ckpt", tmp_path / "link.ckpt")
    os.symlink("missing.ckpt", tmp_path / "dangling.ckpt")
    assert is_complete_checkpoint(tmp_path / "link.ckpt") and not is_complete_checkpoint(tmp_path / "dangling.ckpt")

    directory = tmp_path / "sharded.ckpt"
    save_sharded(state_at(2), str(directory), is_writer=True, barrier=lambda: None)
    assert is_complete_checkpoint(directory)
    (directory / "meta.pt").unlink()  # the commit marker: without it, the parts alone do not count
    assert not is_complete_checkpoint(directory) and not is_complete_checkpoint(tmp_path)


def test_newest_complete_checkpoint_goes_by_the_time_of_the_file_or_of_the_commit_marker(tmp_path):
    older, newer, directory = tmp_path / "a.ckpt", tmp_path / "b.ckpt", tmp_path / "c.ckpt"
    save_sharded(state_at(1), str(directory), is_writer=True, barrier=lambda: None)
    save_checkpoint(state_at(2), older)
    save_checkpoint(state_at(3), newer)
    os.utime(older, (time.time() + 60,) * 2)
    os.utime(directory, (time.time() + 120,) * 2)  # a directory's own time is not when it was committed
    assert newest_complete_checkpoint([newer, directory, older]) == str(older)
    assert newest_complete_checkpoint([tmp_path / "missing.ckpt"]) is None and newest_complete_checkpoint([]) is None


def test_a_sharded_checkpoint_is_replaced_and_restored_on_a_filesystem_without_renames():
    import fsspec

    from framework.io.checkpoint_dir import _rename
    from framework.io.checkpoint_storage import complete_checkpoint_at, remove_checkpoint

    fs, path = fsspec.filesystem("memory"), "memory://complete-checkpoints/last.ckpt"
    if fs.exists("/complete-checkpoints"):  # memory:// outlives a test
        fs.rm("/complete-checkpoints", recursive=True)
    for step in (1, 2):
        save_sharded(state_at(step), path, is_writer=True, barrier=lambda: None)
    assert fs.ls("/complete-checkpoints", detail=False) == ["/complete-checkpoints/last.ckpt"] and _step(path) == 2
    # The state a kill between the two renames of a replacement leaves: the next save puts it back first.
    _rename(fs, "/complete-checkpoints/last.ckpt", "/complete-checkpoints/last.ckpt.previous")
    assert complete_checkpoint_at(path) == path + ".previous" and _step(path + ".previous") == 2
    save_sharded(state_at(3), path, is_writer=True, barrier=lambda: None)
    assert fs.ls("/complete-checkpoints", detail=False) == ["/complete-checkpoints/last.ckpt"] and _step(path) == 3
    remove_checkpoint(path)
    assert not fs.exists("/complete-checkpoints/last.ckpt")
