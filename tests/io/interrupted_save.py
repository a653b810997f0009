"""A process that saves checkpoints and stops dead at a chosen point of one save, so that
``test_complete_checkpoints`` can SIGKILL it exactly there (real processes, real files).

    python -m tests.io.interrupted_save '<spec as JSON>'
    python -m tests.io.interrupted_save --serve     # then one spec per line on stdin: see ``serve``

The spec: ``dirpath``, ``signals`` (a directory), ``form`` ("file" or "dir": a sharded checkpoint written by
``ranks`` gloo ranks), ``mode`` ("sync" or "async": through an ``AsyncCheckpointIO``), ``phase`` and
``target`` (the file name whose save stops), ``occurrence`` (which save of it stops: the first is 1), and
``run`` ("io": the checkpoint functions called directly; "trainer": a ``Trainer`` with a ``ModelCheckpoint``
saving every step; "resume": the same, resumed from "last", not stopped).

The phases: "before" (nothing of the save written), "middle" (a file half written; a directory: rank 0's
part written, rank 1's not), "commit" (all written under the temporary name, the rename into place next),
"swap" (a directory replacing one: the old one renamed aside, the new one not yet in place), "link" (a
``last.ckpt`` link about to point at the new file). Where it stops, the process writes the file
``<signals>/<phase>-r<rank>`` and sleeps; rank 0 of a directory stopped in "middle" first writes
``written-r0`` once its part is on disk. The stops are made by wrapping this package's functions in this
process only (and the ranks it forks), never in the test's own.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
import time
import traceback
from typing import Any

import torch

import framework.io.checkpoint_dir as checkpoint_dir
import framework.io.checkpoint_file as checkpoint_file
import framework.io.fs as fs
from framework.io.async_writer import AsyncCheckpointIO
from framework.io.checkpoint_storage import remove_checkpoint, save_checkpoint

_counts: dict[str, int] = {}


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _signal(spec: dict[str, Any], name: str) -> None:
    with open(os.path.join(spec["signals"], f"{name}-r{_rank()}"), "w"):
        pass


def _stop(spec: dict[str, Any], name: str) -> None:
    _signal(spec, name)
    time.sleep(600)  # until killed
    os._exit(3)


def _due(spec: dict[str, Any], path: str, phase: str) -> bool:
    """Whether this save of ``path`` is where ``phase`` stops (each phase counts the saves it sees)."""
    if spec["phase"] != phase or os.path.basename(str(path).rstrip("/")) != spec["target"]:
        return False
    _counts[phase] = _counts.get(phase, 0) + 1
    return _counts[phase] == spec["occurrence"]


def install_stops(spec: dict[str, Any]) -> None:
    """Wrap the functions a save goes through so that the save ``spec`` names stops at its phase."""
    write_atomic, replace_local = checkpoint_file.write_atomic, fs._replace_local
    write_parts, writer, move_into_place, rename = (checkpoint_dir._write_parts, checkpoint_dir._writer,
                                                     checkpoint_dir.move_into_place, checkpoint_dir._rename)

    def stopping_write_atomic(path, write, storage_options=None):
        if _due(spec, path, "before"):
            _stop(spec, "before")
        if _due(spec, path, "middle"):
            def half(file):
                whole = io.BytesIO()
                write(whole)
                file.write(whole.getvalue()[: len(whole.getvalue()) // 2])
                file.flush()
                _stop(spec, "middle")
            return write_atomic(path, half, storage_options)
        return write_atomic(path, write, storage_options)

    def stopping_replace_local(source, target):
        if _due(spec, target, "commit"):
            _stop(spec, "commit")
        return replace_local(source, target)

    def stopping_write_parts(tensors, temporary, group):
        if _rank() == 0 and _due(spec, _final(temporary), "before"):
            _stop(spec, "before")
        return write_parts(tensors, temporary, group)

    def stopping_writer(path, on_host):
        storage_writer = writer(path, on_host)
        if not _due(spec, _final(path), "middle"):
            return storage_writer
        write_data = storage_writer.write_data

        def write_some(plan, planner):
            if _rank() != 0:
                _stop(spec, "middle")  # rank 1 never writes its part
            written = write_data(plan, planner)
            written.wait()
            _signal(spec, "written")
            return written
        storage_writer.write_data = write_some
        return storage_writer

    def stopping_move_into_place(temporary, path):
        if _due(spec, path, "commit"):
            _stop(spec, "commit")
        return move_into_place(temporary, path)

    def stopping_rename(filesystem, source, target):
        if fs.is_temporary(source) and _due(spec, target, "swap"):
            _stop(spec, "swap")
        return rename(filesystem, source, target)

    checkpoint_file.write_atomic, fs._replace_local = stopping_write_atomic, stopping_replace_local
    checkpoint_dir._write_parts, checkpoint_dir._writer = stopping_write_parts, stopping_writer
    checkpoint_dir.move_into_place, checkpoint_dir._rename = stopping_move_into_place, stopping_rename
    if spec["phase"] == "link":
        import framework.callbacks.model_checkpoint as model_checkpoint

        link = model_checkpoint.link

        def stopping_link(target, linkpath):
            if _due(spec, linkpath, "link"):
                _stop(spec, "link")
            return link(target, linkpath)
        model_checkpoint.link = stopping_link


def _final(temporary: str) -> str:
    return temporary.rsplit(".tmp-", 1)[0]


# -- "io": two save points through the checkpoint functions, as ModelCheckpoint makes them ---
def state_at(step: int) -> dict[str, Any]:
    """What the checkpoints of ``step`` hold: a test tells them apart by ``step`` and checks the weights."""
    return {"step": step, "weight": torch.full((64, 64), float(step)), "bias": torch.arange(64.0) + step}


def save_points(rank: int, spec: dict[str, Any]) -> None:
    """Save point 1: last.ckpt and step=1.ckpt. Save point 2: step=2.ckpt, last.ckpt again, then step=1.ckpt
    deleted once both are written (where ``spec`` stops one of them)."""
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    writer = AsyncCheckpointIO() if spec["mode"] == "async" else None

    def save(step: int, name: str) -> None:
        path = os.path.join(spec["dirpath"], name)
        if spec["form"] == "file":
            if rank == 0:
                save_checkpoint(state_at(step), path)
        else:
            checkpoint_dir.save_sharded(state_at(step), path, is_writer=rank == 0,
                                        barrier=dist.barrier if distributed else lambda: None)

    def save_point(step: int, names: list[str], removals: list[str]) -> None:
        with writer.save_point() if writer is not None else contextlib.nullcontext():
            for name in names:
                save(step, name)
            for name in removals if rank == 0 else []:
                action = functools.partial(remove_checkpoint, os.path.join(spec["dirpath"], name))
                writer.then(action, f"deleting {name}") if writer is not None else action()
        if writer is not None:
            writer.wait()

    save_point(1, ["last.ckpt", "step=1.ckpt"], [])
    install_stops(spec)
    save_point(2, ["step=2.ckpt", "last.ckpt"], ["step=1.ckpt"])
    _signal(spec, "finished")


# -- "trainer" and "resume": a Trainer whose ModelCheckpoint saves every step ---
def train(spec: dict[str, Any]) -> None:
    import framework
    from framework.callbacks import ModelCheckpoint

    class Tiny(framework.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if spec["run"] == "trainer":
        install_stops(spec)
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    checkpoint = ModelCheckpoint(dirpath=spec["dirpath"], every_n_train_steps=1, save_top_k=1,
                                 save_last=spec.get("save_last", True), async_save=spec["mode"] == "async")
    sharded = {"devices": spec["ranks"], "strategy": "zero3"} if spec["form"] == "dir" else {}
    trainer = framework.Trainer(accelerator="cpu", max_steps=4, logger=False, default_root_dir=spec["dirpath"],
                                enable_progress_bar=False, enable_model_summary=False, callbacks=[checkpoint],
                                **sharded)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4),
                ckpt_path="last" if spec["run"] == "resume" else None)
    _signal(spec, "finished")


def main(spec: dict[str, Any]) -> None:
    if spec["run"] != "io":
        train(spec)
    elif spec["form"] == "dir" and spec["ranks"] > 1:
        from framework.testing import spawn

        spawn(spec["ranks"], save_points, spec)
    else:
        save_points(0, spec)


def serve() -> None:
    """For each spec read from stdin (a line of JSON, with ``log``: a file for its output), fork a process that runs
    ``main(spec)`` in a session of its own and print its process id. Everything is imported once, here: a fork
    starts in milliseconds where a new interpreter takes two seconds. The process writes its exit status to
    ``<log>.exit`` when it ends by itself (not when killed)."""
    import torch.distributed.checkpoint  # noqa: F401  (what the sharded saves import on first use)

    import framework  # noqa: F401
    import framework.testing  # noqa: F401
    from framework.callbacks import ModelCheckpoint  # noqa: F401

    for line in sys.stdin:
        spec = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_forked(spec)
        print(pid, flush=True)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # the ones that ended (or were killed) meanwhile
                pass


def _run_forked(spec: dict[str, Any]) -> None:
    status = 1
    try:
        os.setsid()
        log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        main(spec)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with open(f"{spec['log']}.exit.partial", "w") as exit_file:
            exit_file.write(str(status))
        os.replace(f"{spec['log']}.exit.partial", f"{spec['log']}.exit")  # the test reads it as soon as it exists
        os._exit(status)


if __name__ == "__main__":
    serve() if sys.argv[1] == "--serve" else main(json.loads(sys.argv[1]))
