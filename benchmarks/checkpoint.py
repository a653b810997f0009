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

    python benchmarks/checkpoint.py [--runs 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from torch import nn

import framework
from framework.io.checkpoint import load_checkpoint
from framework.trainer.checkpoint import dump_checkpoint, restore_checkpoint, restore_training_state

WIDTH, DEPTH = 3162, 10


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
    args = parser.parse_args()
    logging.getLogger("framework").setLevel(logging.WARNING)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    warnings.simplefilter("ignore")

    trainer, model = trained_trainer()
    parameters = sum(p.numel() for p in model.parameters())
    checkpoint = dump_checkpoint(trainer)
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
        restore_checkpoint(trainer, loaded)
        restore_training_state(trainer, loaded)

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


if __name__ == "__main__":
    main()
