"""Recovery time: from a lost rank to training again, and from a preemption signal to a checkpoint on disk.

On one process and on 2 ranks (DDP over gloo), for a small model (ten 32 x 32 linear layers) and the 100M model
of ``checkpoint.py`` (ten 3,162 x 3,162 layers with AdamW: a 1.2 GB checkpoint). The training script is this file
run with ``--train``: it trains without an end, saves ``last.ckpt`` with ``ModelCheckpoint(every_n_train_steps=K,
save_last=True, save_top_k=0)``, and each rank appends ``time.time()`` stamps to ``<run dir>/events-<rank>``: its
start (before torch is imported), imports done, ``setup`` (the process group is up), the checkpoint's read,
``on_train_start``, each optimizer step (rank 0, with the global step), each save begun, and the moment its SIGUSR1
handler ran (Python runs it between two bytecodes, so a long kernel delays it).

- **SIGKILL -> first new step.** Started by ``framework launch --nproc-per-node N --max-restarts 1``. Once rank 0
  has logged step S (one after a save), the last rank (rank 1, or the only one) is killed with SIGKILL; measured
  is the time to the first optimizer step rank 0 logs in the restarted attempt, which stops after it. Parts, one
  after the other (they add up to the total): the old attempt ended (the launcher noticed the death and stopped
  the other ranks: it prints that it restarts), a new torchrun agent started rank 0's process, imports (torch,
  the framework), the process group up (the Trainer, the ranks' rendezvous: ``setup``), the model wrapped and the
  newest complete checkpoint found, the file read (``torch.load``, wrapped by the script to stamp it), restored
  (weights, optimizers built, their state loaded, up to ``on_train_start``), and the first step. Also how many
  steps were done again.
- **SIGUSR1 -> checkpoint complete.** One process runs ``python recovery.py --train`` itself (``Trainer(devices=1)``,
  no launcher); 2 ranks run under ``framework launch``, and rank 1 gets the signal. Measured: the time until
  ``hpc_ckpt_1.ckpt`` is complete (``is_complete_checkpoint``, polled every 5 ms), and until the process (the
  launcher) has exited with status 75. Parts: the handler ran, the save began (the next step boundary; on 2 ranks
  the stop vote brings the wish to every rank one step later), the save; then the exit.

Each configuration runs ``--runs`` times (interleaved) and the median of each column is printed, so the parts of
a row need not add up to its median exactly.

    python benchmarks/recovery.py [--models small 100m] [--ranks 1 2] [--what kill usr1] [--runs 3] [--dir /tmp]
"""

from __future__ import annotations

import time

_STARTED = time.time()  # the training script's start, before anything heavy is imported

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# model -> (width of its ten layers, batch, save every K steps, step S after which the fault comes)
MODELS = {"small": (32, 32, 10, 41), "100m": (3162, 2, 4, 5)}
WHATS = {"kill": "SIGKILL -> first new step", "usr1": "SIGUSR1 -> checkpoint complete"}
EXITED = "SIGUSR1 -> exited (75)"
RESTARTING = "starting all ranks again"  # what framework launch prints when it restarts an attempt
REQUEUE_EXIT_CODE = 75


# -- the training script (run with --train) ------------------------------------------------------------------
def train(work: str, width: int, batch: int, every: int) -> None:
    attempt, rank = os.environ.get("FRAMEWORK_RESTART_COUNT", "0"), os.environ.get("RANK", "0")
    events = os.open(os.path.join(work, f"events-{rank}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def stamp(event: str, value: object = "-", when: float | None = None) -> None:
        os.write(events, f"{event} {attempt} {value} {time.time() if when is None else when!r}\n".encode())

    stamp("start", os.getpid(), _STARTED)
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import framework
    from framework.callbacks import Callback, ModelCheckpoint

    stamp("imported")
    load = torch.load

    def stamped_load(*args, **kwargs):  # the checkpoint file's read (the framework calls torch.load at call time)
        stamp("reading")
        loaded = load(*args, **kwargs)
        stamp("read")
        return loaded

    torch.load = stamped_load
    signal.signal(signal.SIGUSR1, lambda number, frame: stamp("signal"))  # the Trainer's handler calls it too

    class Stamps(Callback):
        def setup(self, trainer, module, stage):
            stamp("setup")

        def on_load_checkpoint(self, trainer, module, checkpoint):
            stamp("loaded", checkpoint["global_step"])

        def on_train_start(self, trainer, module):
            stamp("train_start", trainer.global_step)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.is_global_zero:
                stamp("step", trainer.global_step)
            if attempt != "0":  # the restarted attempt has shown its first step: done
                trainer.should_stop = True

        def on_save_checkpoint(self, trainer, module, checkpoint):
            stamp("save", trainer.global_step)

    class Layers(framework.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(*[nn.Linear(width, width) for _ in range(10)])

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).square().mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    saving = ModelCheckpoint(dirpath=os.path.join(work, "checkpoints"), every_n_train_steps=every, save_last=True,
                             save_top_k=0)
    trainer = framework.Trainer(accelerator="cpu", devices=ranks, strategy="ddp" if ranks > 1 else "auto",
                                max_epochs=-1, default_root_dir=work, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=[Stamps(), saving])
    data = TensorDataset(torch.randn(batch * 64 * ranks, width, generator=torch.Generator().manual_seed(0)))
    trainer.fit(Layers(), DataLoader(data, batch_size=batch))


# -- the measurement -------------------------------------------------------------------------------------------
class Run:
    """A started training run: its command's process, the lines of its stderr with when they came, its events."""

    def __init__(self, command: list[str], work: str, timeout: float) -> None:
        self.work, self.deadline = work, time.monotonic() + timeout
        self.events: list[tuple[int, str, int, str, float]] = []  # rank, event, attempt, value, time
        self.lines: list[tuple[float, str]] = []
        self._offsets: dict[str, int] = {}
        environment = {**os.environ, "PYTHONWARNINGS": "ignore",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.log = open(os.path.join(work, "output.log"), "w", buffering=1)  # noqa: SIM115
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=subprocess.PIPE, text=True,
                                        env=environment, start_new_session=True)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.lines.append((time.time(), line))
            self.log.write(line)

    def poll(self) -> None:
        for name in os.listdir(self.work):
            if not name.startswith("events-"):
                continue
            with open(os.path.join(self.work, name)) as file:
                file.seek(self._offsets.get(name, 0))
                text = file.read()
            whole = text[:text.rfind("\n") + 1]
            self._offsets[name] = self._offsets.get(name, 0) + len(whole)
            for line in whole.splitlines():
                event, attempt, value, when = line.split()
                self.events.append((int(name.split("-")[1]), event, int(attempt), value, float(when)))

    def find(self, event: str, attempt: int, rank: int | None = 0, last: bool = False,
             test: Callable[[str, float], bool] = lambda value, when: True) -> tuple[str, float] | None:
        found = [(value, when) for r, e, a, value, when in self.events
                 if e == event and a == attempt and rank in (None, r) and test(value, when)]
        return (found[-1] if last else found[0]) if found else None

    def wait(self, done: Callable[[], object], what: str) -> object:
        """Poll every 5 ms until ``done()`` returns something true; fail if the run ends or time runs out first."""
        while True:
            self.poll()
            result = done()
            if result:
                return result
            if self.process.poll() is not None or time.monotonic() > self.deadline:
                self.stop()
                tail = "".join(line for _, line in self.lines[-30:])
                raise RuntimeError(f"{what}: the run ended (status {self.process.returncode}) first:\n{tail}")
            time.sleep(0.005)

    def exit_status(self) -> tuple[int, float]:
        """Wait for the process to end: its status and when it ended (to 5 ms)."""
        self.wait(lambda: self.process.poll() is not None or None, "the end")
        ended = time.time()
        self._reader.join(timeout=10)
        return self.process.returncode, ended

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the session this run started: its launcher and ranks
            self.process.wait()
        self._reader.join(timeout=10)
        self.log.close()


def measure(model: str, ranks: int, what: str, directory: str, timeout: float) -> dict[str, dict[str, float]]:
    """One run: {row: {"total": seconds, part: seconds, ...}}."""
    width, batch, every, at = MODELS[model]
    if what == "usr1":
        import framework.io.checkpoint_storage  # noqa: F401  (torch, imported before the run starts, not during it)
    work = tempfile.mkdtemp(prefix=f"recovery-{model}-{ranks}-{what}-", dir=directory)
    script = [str(Path(__file__).resolve()), "--train", work, str(width), str(batch), str(every)]
    launch = [sys.executable, "-m", "framework", "launch", "--nproc-per-node", str(ranks), "--max-restarts", "1"]
    command = [sys.executable, *script] if what == "usr1" and ranks == 1 else [*launch, *script]
    run = Run(command, work, timeout)
    try:
        run.wait(lambda: run.find("step", 0, test=lambda value, when: int(value) >= at), f"step {at}")
        pid = int(run.wait(lambda: run.find("start", 0, rank=ranks - 1), "the last rank's start")[0])
        return (after_kill if what == "kill" else after_usr1)(run, pid, ranks)
    finally:
        run.stop()
        if run.process.returncode in (0, REQUEUE_EXIT_CODE):
            shutil.rmtree(work)
        else:  # keep what a failed run printed and its stamps, not its checkpoints
            for name in os.listdir(work):
                if ".ckpt" in name or name == "checkpoints":
                    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
                    if os.path.exists(os.path.join(work, name)):
                        os.remove(os.path.join(work, name))


def after_kill(run: Run, pid: int, ranks: int) -> dict[str, dict[str, float]]:
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    first = run.wait(lambda: run.find("step", 1), "the first step after the restart")[1]
    status, _ = run.exit_status()
    if status != 0:
        raise RuntimeError(f"the restarted run ended with status {status}: see {run.work}")
    last_before = max(int(value) for rank, event, attempt, value, _ in run.events
                      if event == "step" and attempt == 0)
    noticed = next(when for when, line in run.lines if RESTARTING in line)
    events = ("start", "imported", "setup", "reading", "read", "train_start")
    stamps = {event: run.find(event, 1)[1] for event in events}
    resumed = int(run.find("loaded", 1)[0])
    chain = [("old ranks ended", killed, noticed), ("rank 0 started", noticed, stamps["start"]),
             ("imports", stamps["start"], stamps["imported"]), ("process group", stamps["imported"], stamps["setup"]),
             ("wrap and find", stamps["setup"], stamps["reading"]),
             ("read", stamps["reading"], stamps["read"]),
             ("restored", stamps["read"], stamps["train_start"]), ("first step", stamps["train_start"], first)]
    parts = {name: end - start for name, start, end in chain}
    return {WHATS["kill"]: {"total": first - killed, **parts, "steps redone": last_before - resumed}}


def after_usr1(run: Run, pid: int, ranks: int) -> dict[str, dict[str, float]]:
    from framework.io.checkpoint_storage import is_complete_checkpoint

    path = os.path.join(run.work, "hpc_ckpt_1.ckpt")
    signalled = time.time()
    os.kill(pid, signal.SIGUSR1)
    run.wait(lambda: os.path.exists(path) and is_complete_checkpoint(path), "hpc_ckpt_1.ckpt")
    complete = time.time()
    status, ended = run.exit_status()
    if status != REQUEUE_EXIT_CODE:
        raise RuntimeError(f"the preempted run ended with status {status}, not {REQUEUE_EXIT_CODE}: see {run.work}")
    run.poll()
    handled = run.find("signal", 0, rank=ranks - 1)[1]
    saving = run.find("save", 0, last=True, test=lambda value, when: when < complete)[1]  # the last save: the hpc one
    return {WHATS["usr1"]: {"total": complete - signalled, "handler ran": handled - signalled,
                            "save began": saving - handled, "save": complete - saving},
            EXITED: {"total": ended - signalled, "after the checkpoint": ended - complete}}


def main() -> None:
    if sys.argv[1:2] == ["--train"]:
        work, width, batch, every = sys.argv[2:6]
        return train(work, int(width), int(batch), int(every))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--ranks", nargs="+", type=int, choices=(1, 2), default=[1, 2])
    parser.add_argument("--what", nargs="+", choices=tuple(WHATS), default=list(WHATS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the runs write their checkpoints")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    args = parser.parse_args()

    results: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    configurations = [(model, ranks, what) for model in args.models for ranks in args.ranks for what in args.what]
    for number in range(args.runs):
        for model, ranks, what in configurations[:: 1 if number % 2 == 0 else -1]:
            for row, values in measure(model, ranks, what, args.dir, args.timeout).items():
                results.setdefault((model, ranks, row), []).append(values)
            print(f"run {number + 1}: {model}, {ranks} rank(s), {what} done", file=sys.stderr, flush=True)

    print(f"{os.cpu_count()} cores, torch {version('torch')}, {args.dir}, median of {args.runs} runs\n")
    print("| model | ranks | what | s | parts (median s) |")
    print("|-------|------:|------|--:|------------------|")
    names = [WHATS[what] for what in WHATS if what in args.what] + ([EXITED] if "usr1" in args.what else [])
    rows = [(model, ranks, name) for model in args.models for ranks in args.ranks for name in names]
    for key in rows:
        runs = results[key]
        medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        parts = ", ".join(f"{name} {value:.0f}" if name == "steps redone" else f"{name} {seconds(value)}"
                          for name, value in medians.items() if name != "total")
        print(f"| {key[0]} | {key[1]} | {key[2]} | {seconds(medians['total'])} | {parts} |")


def seconds(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 0.1 else f"{value:.2f}"


if __name__ == "__main__":
    main()
