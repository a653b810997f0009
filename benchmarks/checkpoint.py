"""Checkpoint save and load time and file size, for a ~100M-parameter model, against plain torch.save/torch.load.

The model (ten 3,162 x 3,162 linear layers, 100.0M parameters) is trained one AdamW step, so the
checkpoint holds the weights and two optimizer moments (1.2 GB). Compared, on the same state:

- save: ``trainer.save_checkpoint(path)`` (assemble the dict, write a temporary file, rename it)
  against ``torch.save(the same dict, path)``, to a new file and over an existing one (as
  ``last.ckpt`` is saved). ext4 starts writing a file renamed over another to disk at the rename
  (its ``auto_da_alloc``), which is what keeps the old or the new file whole through a power cut
  and costs time that an in-place ``torch.save`` (which leaves a truncated file if killed) does not;
  the disk is synced before each save, so that no save pays for an earlier one's write-back;
- load: ``framework.io.load_checkpoint(path)`` (``weights_only=True``, with its checks) against
  ``torch.load(path, weights_only=True)``;
- resume: what ``fit(ckpt_path=...)`` adds on top of the load, restoring weights and optimizer
  state, against ``load_state_dict`` on a plain model and optimizer.

Each is run ``--runs`` times, interleaved (in alternating order), and the median reported. A Lightning row appears when
``lightning`` is importable (run with an interpreter that has it and ``framework`` on PYTHONPATH).

The second table (``--table training``) is what saving costs a training run: ``--steps`` AdamW steps of the same
model, saving every ``--every`` steps with ``ModelCheckpoint`` (keeping the latest file), written synchronously or
in the background (``async_save=True``), against not saving at all; on one process (one file) and with zero3 on 2
ranks (a sharded directory, every rank writing its part). Per run: the median step (no save due), the steps at
which a save was due (step and save, or step and staging copy), the training time to the last step and what each
save made before it added to it against the run without saving, and the end of fit after the last step (the
last save: written then, or waited for).

The third (``--table safety``) is what loading without running code costs: the file and the sharded directory of
the same state loaded as they are by default (torch's ``weights_only`` unpickler; ``.metadata`` through the
restricted unpickler of ``framework.io.dcp_reader``, part files checked one by one) against ``weights_only=False``
(torch's own unpickler, DCP's own reader); and the unpickling alone, both ways (the file memory-mapped so that
its tensors are not read, the directory's ``.metadata``), whose difference is what the check costs a load.

    python benchmarks/checkpoint.py [--runs 3] [--dir /tmp] [--table files|safety|training|both] [--steps 16 --every 4]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import pickle
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn

import framework
from framework.callbacks import Callback, ModelCheckpoint
from framework.io.checkpoint_dir import save_sharded
from framework.io.checkpoint_storage import load_checkpoint
from framework.io.dcp_reader import METADATA_FILE, load_metadata
from framework.trainer.checkpoint_contents import dump_checkpoint, restore_checkpoint, restore_training_state

WIDTH, DEPTH = 3162, 10
SAVINGS = ("none", "sync", "async")
RUNS_ON = {"one process": ("single", 1), "zero3, 2 ranks": ("zero3", 2)}


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH)])


class BigSteps:
    """The model's steps, shared by the framework's Module and Lightning's LightningModule below."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Big(BigSteps, framework.Module):
    pass


def one_batch() -> list:
    return [(torch.randn(2, WIDTH),)]


def trained_trainer() -> tuple[framework.Trainer, Big]:
    model = Big()
    trainer = framework.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, one_batch())
    return trainer, model


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def lightning_trainer():
    """A Lightning trainer that has run the same step, or None when Lightning is not installed."""
    try:
        import lightning
    except ImportError:
        return None

    class LightningBig(BigSteps, lightning.LightningModule):
        pass

    trainer = lightning.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LightningBig(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(2, WIDTH)),
                                                            batch_size=2))
    return trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the checkpoint files are written")
    parser.add_argument("--table", choices=("files", "safety", "training", "both"), default="both",
                        help="both: files and training")
    parser.add_argument("--steps", type=int, default=16, help="training steps per run (training table)")
    parser.add_argument("--every", type=int, default=4, help="save every this many steps (training table)")
    parser.add_argument("--width", type=int, default=3162, help="of each of the 10 layers (3162: 100M parameters)")
    args = parser.parse_args()
    logging.getLogger("framework").setLevel(logging.WARNING)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")
    global WIDTH
    WIDTH = args.width
    if args.table in ("files", "both"):
        files_table(args)
    if args.table == "safety":
        safety_table(args)
    if args.table in ("training", "both"):
        training_table(args)


def files_table(args: argparse.Namespace) -> None:
    trainer, model = trained_trainer()
    parameters = sum(p.numel() for p in model.parameters())
    checkpoint = dump_checkpoint(trainer.fit_loop.run)
    ours, plain = os.path.join(args.dir, "framework.ckpt"), os.path.join(args.dir, "plain.ckpt")
    lightning = lightning_trainer()
    theirs = os.path.join(args.dir, "lightning.ckpt")

    fresh_model = make_net()
    fresh_optimizer = torch.optim.AdamW(fresh_model.parameters(), lr=1e-4)

    def plain_resume() -> None:
        loaded = torch.load(plain, weights_only=True)
        fresh_model.load_state_dict({k.removeprefix("net."): v for k, v in loaded["state_dict"].items()})
        fresh_optimizer.load_state_dict(loaded["optimizer_states"][0])

    def framework_resume() -> None:
        loaded = load_checkpoint(ours)
        restore_checkpoint(trainer.fit_loop.run, loaded)
        restore_training_state(trainer.fit_loop.run, loaded)

    variants: dict[str, dict[str, Callable[[], object]]] = {
        "plain torch": {"save": lambda: torch.save(checkpoint, plain),
                        "load": lambda: torch.load(plain, weights_only=True), "resume": plain_resume},
        "framework": {"save": lambda: trainer.save_checkpoint(ours), "load": lambda: load_checkpoint(ours),
                      "resume": framework_resume},
    }
    if lightning is not None:
        variants["Lightning"] = {"save": lambda: lightning.save_checkpoint(theirs),
                                 "load": lambda: torch.load(theirs, weights_only=True)}
    paths = {"plain torch": plain, "framework": ours, "Lightning": theirs}
    times: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        # the order alternates: whichever writer goes second finds memory and page cache busier
        for name, actions in list(variants.items())[:: 1 if run % 2 == 0 else -1]:
            if os.path.exists(paths[name]):
                os.remove(paths[name])
            os.sync()  # every save starts with nothing left to write back
            times.setdefault((name, "new file"), []).append(timed(actions["save"]))
            os.sync()
            times.setdefault((name, "replace"), []).append(timed(actions["save"]))
            for what in ("load", "resume"):
                if what in actions:
                    times.setdefault((name, what), []).append(timed(actions[what]))
    print(f"{parameters / 1e6:.1f}M parameters + AdamW state, {args.dir}, median of {args.runs} runs, "
          f"torch {torch.__version__}\n")
    print_table(variants, times, paths)
    for path in paths.values():
        if os.path.exists(path):
            os.remove(path)


COLUMNS = ("new file", "replace", "load", "resume")


def print_table(variants: dict, times: dict[tuple[str, str], list[float]], paths: dict[str, str]) -> None:
    print("| writer      | save to a new file s | × plain | save over a file s | × plain | load s | × plain "
          "| resume s | × plain | file MB |")
    print("|-------------|---------------------:|--------:|-------------------:|--------:|-------:|--------:"
          "|---------:|--------:|--------:|")
    base = {what: statistics.median(times[("plain torch", what)]) for what in COLUMNS}
    for name in variants:
        cells = []
        for what in COLUMNS:
            if (name, what) in times:
                median = statistics.median(times[(name, what)])
                cells += [f"{median:.2f}", f"{median / base[what]:.2f}"]
            else:
                cells += ["", ""]
        widths = (20, 7, 18, 7, 6, 7, 8, 7)
        row = " | ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths, strict=True))
        print(f"| {name:<11} | {row} | {os.path.getsize(paths[name]) / 1e6:>7.0f} |")


# -- the cost of loading without running code ---
def safety_table(args: argparse.Namespace) -> None:
    """Loading the 100M checkpoint as a file and as a sharded directory: the restricted unpickling (the default)
    against the unrestricted load of the same bytes (``weights_only=False``: torch's own unpickler for the file,
    DCP's own reader for the directory), interleaved, median of ``--runs``. Whole loads differ by more than the
    check costs (the bytes are read again each time), so the unpickling is also timed alone, both ways: the file
    memory-mapped (its records unpickled, its tensors not read), the directory's ``.metadata``."""
    trainer, _ = trained_trainer()
    checkpoint = dump_checkpoint(trainer.fit_loop.run)
    paths = {"file": os.path.join(args.dir, "safety.ckpt"), "directory": os.path.join(args.dir, "safety-dir.ckpt")}
    trainer.save_checkpoint(paths["file"])
    save_sharded(checkpoint, paths["directory"], is_writer=True, barrier=lambda: None)
    del checkpoint
    times: dict[tuple[str, str, bool], list[float]] = {}
    for run in range(args.runs):
        for form in paths:
            for restricted in (True, False)[:: 1 if run % 2 == 0 else -1]:
                load = functools.partial(load_checkpoint, paths[form], weights_only=None if restricted else False)
                times.setdefault((form, "load", restricted), []).append(timed(load))
                unpickle = functools.partial(UNPICKLINGS[form], paths[form], restricted)
                times.setdefault((form, "unpickle", restricted), []).append(
                    statistics.median(timed(unpickle) for _ in range(20)))
    print(f"\nLoading without running code: {args.dir}, median of {args.runs} runs, torch {torch.__version__}\n")
    print("| checkpoint | restricted load s | unrestricted load s | restricted × unrestricted "
          "| restricted unpickling ms | unrestricted unpickling ms | check / load % |")
    print("|------------|------------------:|--------------------:|--------------------------:"
          "|-------------------------:|---------------------------:|--------------:|")
    for form in paths:
        load, unrestricted_load, unpickle, unrestricted_unpickle = (
            statistics.median(times[(form, what, restricted)])
            for what in ("load", "unpickle") for restricted in (True, False))
        check = max(unpickle - unrestricted_unpickle, 0.0) / unrestricted_load * 100
        print(f"| {form:<10} | {load:>17.2f} | {unrestricted_load:>19.2f} | {load / unrestricted_load:>25.3f} "
              f"| {unpickle * 1e3:>24.2f} | {unrestricted_unpickle * 1e3:>26.2f} | {check:>13.3f} |")
    os.remove(paths["file"])
    shutil.rmtree(paths["directory"])


def _unpickle_file(path: str, restricted: bool) -> None:
    torch.load(path, mmap=True, weights_only=restricted)


def _unpickle_directory(path: str, restricted: bool) -> None:
    with open(os.path.join(path, METADATA_FILE), "rb") as file:
        if restricted:
            load_metadata(file, path)
        else:
            pickle.load(file)


UNPICKLINGS = {"file": _unpickle_file, "directory": _unpickle_directory}


# -- the cost of saving while training ---
class StepClock(Callback):
    """When each training step ended, and when the run ended with every file complete; rank 0 writes them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ends: list[float] = []

    def on_train_start(self, trainer, module):
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.ends.append(time.perf_counter())  # before the checkpoint callback: a save counts in the next step

    def on_fit_end(self, trainer, module):  # after ModelCheckpoint waited for its last write
        if trainer.is_global_zero:
            with open(self.path, "w") as file:
                json.dump({"start": self.start, "ends": self.ends, "end": time.perf_counter()}, file)


def timed_training(args: argparse.Namespace, runs_on: str, saving: str) -> dict[str, float]:
    strategy, devices = RUNS_ON[runs_on]
    directory = os.path.join(args.dir, f"checkpoint-benchmark-{strategy}-{saving}")
    clock = StepClock(os.path.join(args.dir, "checkpoint-benchmark-times.json"))
    callbacks: list[Callback] = [clock]
    if saving != "none":
        callbacks.append(ModelCheckpoint(dirpath=directory, every_n_train_steps=args.every,
                                         async_save=saving == "async"))
    trainer = framework.Trainer(max_steps=args.steps, accelerator="cpu", devices=devices, strategy=strategy,
                                logger=False, enable_checkpointing=saving != "none", enable_progress_bar=False,
                                enable_model_summary=False, callbacks=callbacks)
    batches = torch.utils.data.TensorDataset(torch.randn(2 * args.steps * devices, WIDTH))
    trainer.fit(Big(), torch.utils.data.DataLoader(batches, batch_size=2))
    shutil.rmtree(directory, ignore_errors=True)
    with open(clock.path) as file:
        times = json.load(file)
    os.remove(clock.path)
    steps = [end - start for start, end in zip([times["start"], *times["ends"]], times["ends"], strict=False)]
    # step k's interval holds the save made at the end of step k - 1 (steps count from 1)
    with_save = [step for number, step in enumerate(steps, 1) if number > 1 and (number - 1) % args.every == 0]
    plain = [step for number, step in enumerate(steps, 1) if number > 1 and (number - 1) % args.every != 0]
    return {"step": statistics.median(plain), "with save": statistics.mean(with_save) if with_save else 0.0,
            "training": times["ends"][-1] - times["start"], "end": times["end"] - times["ends"][-1],
            "saves during": len(with_save)}


def training_table(args: argparse.Namespace) -> None:
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for run in range(args.runs):
        for runs_on in RUNS_ON:
            for saving in SAVINGS[:: 1 if run % 2 == 0 else -1]:
                os.sync()
                results.setdefault((runs_on, saving), []).append(timed_training(args, runs_on, saving))
    parameters = sum(p.numel() for p in make_net().parameters())
    saves = args.steps // args.every
    print(f"\n{parameters / 1e6:.1f}M parameters + AdamW, {args.steps} steps saving every {args.every} "
          f"({saves} saves), {args.dir}, median of {args.runs} runs, {os.cpu_count()} cores, "
          f"torch {torch.__version__}\n")
    print("| run            | saving | step ms (no save due) | step ms (save due) | training s | cost per save s "
          "| end of fit s |")
    print("|----------------|--------|----------------------:|-------------------:|-----------:|----------------:"
          "|-------------:|")
    for runs_on in RUNS_ON:
        baseline = statistics.median(result["training"] for result in results[(runs_on, "none")])
        for saving in SAVINGS:
            measured = {key: statistics.median(result[key] for result in results[(runs_on, saving)])
                        for key in ("step", "with save", "training", "end", "saves during")}
            due, cost = "-", "-"
            if saving != "none":
                due = f"{measured['with save'] * 1e3:.0f}"
                cost = f"{(measured['training'] - baseline) / measured['saves during']:.2f}"
            print(f"| {runs_on:<14} | {saving:<6} | {measured['step'] * 1e3:>21.0f} | {due:>18} "
                  f"| {measured['training']:>10.3f} | {cost:>15} | {measured['end']:>12.2f} |")

if __name__ == "__main__":
    main()
