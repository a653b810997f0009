"""Stop a training run in the middle of an epoch, resume it, and end where an uninterrupted run ends.

A run that is killed (a preempted cloud machine, a full queue slot, Ctrl-C) should cost only the
steps since its last checkpoint. Resuming is exact here: the checkpoint holds the batch the epoch
had reached, the shuffled order of that epoch and the random state dropout draws from, so the
resumed run trains on the same remaining batches with the same dropout masks. Run it from the
repository root:

    python tutorials/06_resume.py

It trains the quickstart's digit classifier three ways: 60 steps in one go; a run stopped by an
exception mid-epoch after step 27 (as if the machine went away), with a checkpoint every 5 steps,
the last at step 25; and a resume of that run from its last checkpoint to step 60. It prints the
largest difference between the weights of the uninterrupted and the resumed run: 0.0.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

import framework as L
from framework.callbacks import Callback, ModelCheckpoint

# The quickstart's data and model, as a module (its file name starts with a digit).
_spec = importlib.util.spec_from_file_location("quickstart", Path(__file__).with_name("01_quickstart.py"))
quickstart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart)


class GoesAway(Callback):
    """Raises after ``step`` optimizer steps, the way a killed process stops: no chance to save anything."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"the machine went away after step {self.step}")


class DroppingClassifier(quickstart.DigitClassifier):
    """The quickstart's classifier with dropout, so the random state has to come back too."""

    def __init__(self) -> None:
        super().__init__()
        self.net.insert(1, torch.nn.Dropout(0.2))


def trainer(directory: str, max_steps: int, *callbacks: Callback) -> L.Trainer:
    every_5_steps = ModelCheckpoint(dirpath=directory, every_n_train_steps=5, save_last=True, save_top_k=0)
    return L.Trainer(accelerator="cpu", max_steps=max_steps, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=[every_5_steps, *callbacks])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=60, help="where both runs end")
    parser.add_argument("--stop-at", type=int, default=27, help="the step the first run is cut off after")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory:
        L.seed_everything(0, verbose=False)
        uninterrupted = DroppingClassifier()
        trainer(f"{directory}/whole", args.max_steps).fit(uninterrupted, quickstart.Digits())

        L.seed_everything(0, verbose=False)
        try:
            trainer(f"{directory}/cut", args.max_steps, GoesAway(args.stop_at)).fit(DroppingClassifier(),
                                                                                  quickstart.Digits())
        except RuntimeError as error:
            print(f"first run stopped: {error}")

        resumed = DroppingClassifier()  # a new process would start from nothing but the checkpoint
        resuming = trainer(f"{directory}/cut", args.max_steps)
        resuming.fit(resumed, quickstart.Digits(), ckpt_path="last")
        print(f"resumed from {Path(resuming.ckpt_path).name} and trained to step {resuming.global_step}")

    pairs = zip(uninterrupted.state_dict().values(), resumed.state_dict().values(), strict=True)
    difference = max((a - b).abs().max().item() for a, b in pairs)
    print(f"largest weight difference, uninterrupted vs resumed: {difference}")
    sys.exit(0 if difference == 0.0 else 1)


if __name__ == "__main__":
    main()
