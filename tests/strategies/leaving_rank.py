"""Two gloo ranks, as torchrun starts them, of which rank 1 ends while rank 0 waits for it in a collective, so that
``test_group_exit`` can time how long rank 0 takes to end, and read what it says (real processes, real gloo).

    python -m tests.strategies.leaving_rank --serve      # then one spec per line on stdin, one result per line out

The spec: ``out`` (a directory for the ranks' output), ``place`` and ``how``. Rank 1 ends ``how``:
``exit`` (``sys.exit(3)``), ``os_exit`` (``os._exit(4)``), ``raise`` (an exception; in the bare loop, outside any
framework code) or ``kill`` (SIGKILL), at ``place``: ``step`` (its third ``training_step``, while rank 0 goes on to
the gradients' all-reduce), ``validation`` (its second ``validation_step``), ``save`` (in ``on_save_checkpoint``
of a ModelCheckpoint save, while rank 0 writes the file), or ``accelerate`` (the third step of a bare Accelerate
loop, before its backward). Just before, it writes the time to ``<out>/leaving``.

The server imports torch and the framework once and forks each pair of ranks from itself, holding their store
as torchrun's agent does (nothing else of an agent: no one stops rank 0 once rank 1 has ended). The result line:
``{"codes": [rank 0's exit status, rank 1's], "rank0_ended_after_s": seconds from <out>/leaving to rank 0's end}``,
a status of None for a rank still running after ``_GIVE_UP_S`` (then killed).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

import torch
from torch.distributed import TCPStore
from torch.utils.data import DataLoader

import framework
from framework.accelerate import Accelerator
from framework.callbacks import ModelCheckpoint
from framework.runtime.worker_processes import free_port
from tests.helpers import Regressor, regression_data

_GIVE_UP_S = 60.0


def _leave(spec: dict[str, Any]) -> None:
    with open(os.path.join(spec["out"], "leaving"), "w") as stamp:
        stamp.write(repr(time.time()))
    how = spec["how"]
    if how == "exit":
        sys.exit(3)
    if how == "os_exit":
        os._exit(4)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"rank 1 fails at {spec['place']}")


class _LeavingRegressor(Regressor):
    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        self.spec = spec

    def training_step(self, batch, batch_idx):
        if self.spec["place"] == "step" and self.global_rank == 1 and batch_idx == 2:
            _leave(self.spec)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        if self.spec["place"] == "validation" and self.global_rank == 1 and batch_idx == 1:
            _leave(self.spec)
        return super().validation_step(batch, batch_idx)

    def on_save_checkpoint(self, checkpoint):
        if self.spec["place"] == "save" and self.global_rank == 1:
            _leave(self.spec)


def _fit(spec: dict[str, Any]) -> None:
    trainer = framework.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, limit_val_batches=3, val_check_interval=4,
        num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=os.path.join(spec["out"], "checkpoints"), every_n_train_steps=3)])
    data = DataLoader(regression_data(64), batch_size=4)
    trainer.fit(_LeavingRegressor(spec), data, DataLoader(regression_data(32, seed=1), batch_size=4))


def _bare_loop(spec: dict[str, Any]) -> None:
    accelerator = Accelerator(cpu=True)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(regression_data(64), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    for step, (x, y) in enumerate(data):
        if accelerator.process_index == 1 and step == 2:
            _leave(spec)
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    accelerator.wait_for_everyone()


def _rank(spec: dict[str, Any], rank: int, port: int) -> None:
    """In a forked process: become ``rank`` as torchrun's agent would start it, then run the case."""
    for stream, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(os.path.join(spec["out"], f"{name}-{rank}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, stream)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", GROUP_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RUN_ID="leaving-rank",
                      TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0", OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    (_bare_loop if spec["place"] == "accelerate" else _fit)(spec)


def run_case(spec: dict[str, Any]) -> dict[str, Any]:
    """Fork both ranks of ``spec``, wait for them, and say how they ended."""
    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=30), wait_for_workers=False,
                     multi_tenant=True)
    pids = []
    for rank in (0, 1):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _rank(spec, rank, port)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
                _run_exit_handlers()
            except BaseException:  # as the interpreter does with an uncaught exception
                sys.last_value = sys.exc_info()[1]
                sys.excepthook(*sys.exc_info())
                code = 1
                _run_exit_handlers()
            else:
                _run_exit_handlers()
            os._exit(code)
        pids.append(pid)
    codes: list[int | None] = [None, None]
    ended_at: list[float | None] = [None, None]
    deadline = time.monotonic() + _GIVE_UP_S
    while None in codes and time.monotonic() < deadline:
        for index, pid in enumerate(pids):
            if codes[index] is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[index], ended_at[index] = os.waitstatus_to_exitcode(status), time.time()
        time.sleep(0.02)
    for index, pid in enumerate(pids):
        if codes[index] is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    del store
    leaving = os.path.join(spec["out"], "leaving")
    left_at = float(open(leaving).read()) if os.path.exists(leaving) else None
    after = ended_at[0] - left_at if ended_at[0] is not None and left_at is not None else None
    return {"codes": codes, "rank0_ended_after_s": after}


def _run_exit_handlers() -> None:
    """What the interpreter does at exit (a forked child leaves through os._exit, which skips it)."""
    import atexit

    atexit._run_exitfuncs()


def _import_what_every_rank_imports() -> None:
    """Import once here what each forked rank would otherwise import on its own (the Trainer's modules, the
    strategies' torch.distributed parts, torch._dynamo that torch's Optimizer imports): some 2 s of CPU a rank,
    32 ranks. A rank torchrun starts has them imported too by the time one of its peers ends."""
    import torch._dynamo  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    import framework.trainer  # noqa: F401


def serve() -> None:
    """Run each spec read from stdin (one JSON object a line) and print its result line, until stdin ends."""
    _import_what_every_rank_imports()
    for line in sys.stdin:
        print(json.dumps(run_case(json.loads(line))), flush=True)


if __name__ == "__main__":
    serve()
