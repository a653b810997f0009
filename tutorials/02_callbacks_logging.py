"""Keep the best checkpoints, stop when validation stops improving, and log to CSV and TensorBoard.

The quickstart's digit classifier, trained with the callbacks and loggers a real run wants:

- ``ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True)`` keeps the two best
  checkpoints by validation loss (their file names carry the epoch and the loss) and the last one;
- ``EarlyStopping(monitor="val_loss", patience=3)`` ends training once the loss has not improved
  for three validations in a row;
- ``CSVLogger`` and ``TensorBoardLogger`` write every logged value (``tensorboard --logdir
  tutorial_logs`` shows the second).

Run it from the repository root:

    python tutorials/02_callbacks_logging.py

It prints where the best checkpoint is and its score, when early stopping ended the run, and the
columns of ``metrics.csv``; with matplotlib installed it also plots the losses to ``losses.png``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
from pathlib import Path

import framework as L
from framework.callbacks import EarlyStopping, ModelCheckpoint
from framework.loggers import CSVLogger, TensorBoardLogger

# The quickstart's data and model, as a module (its file name starts with a digit).
_spec = importlib.util.spec_from_file_location("quickstart", Path(__file__).with_name("01_quickstart.py"))
quickstart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart)


def plot(metrics_csv: Path, output: Path) -> str:
    """Plot the training and validation losses of ``metrics_csv``; what was done, in words."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed: skipping the plot (pip install matplotlib to get it)"
    matplotlib.use("Agg")  # a file, no window
    import matplotlib.pyplot as plt

    with open(metrics_csv, newline="") as file:
        rows = list(csv.DictReader(file))
    figure, axes = plt.subplots()
    for name in ("train_loss", "val_loss"):
        points = [(int(row["step"]), float(row[name])) for row in rows if row.get(name)]
        axes.plot(*zip(*points, strict=True), label=name, marker="." if name == "val_loss" else None)
    axes.set_xlabel("step")
    axes.legend()
    figure.savefig(output)
    return f"plotted the losses to {output}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--logs", default="tutorial_logs", help="where the loggers and checkpoints write")
    args = parser.parse_args()

    L.seed_everything(0, verbose=False)
    best = ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True, filename="{epoch}-{val_loss:.3f}")
    stopping = EarlyStopping(monitor="val_loss", patience=3)
    # Distinct names: two loggers of one name would count versions in one folder (version_0, version_1).
    loggers = [CSVLogger(args.logs, name="csv"), TensorBoardLogger(args.logs, name="tensorboard")]
    # The checkpoints go to the first logger's folder: logs/csv/version_0/checkpoints.
    trainer = L.Trainer(accelerator="cpu", max_epochs=args.max_epochs, callbacks=[best, stopping],
                        logger=loggers, log_every_n_steps=5, enable_progress_bar=False)
    trainer.fit(quickstart.DigitClassifier(), datamodule=quickstart.Digits())

    print(f"best checkpoint: {Path(best.best_model_path).name} (val_loss {best.best_model_score:.4f})")
    print(f"checkpoints kept in {best.dirpath}: {sorted(path.name for path in Path(best.dirpath).iterdir())}")
    if stopping.stopped_epoch:
        print(f"early stopping ended the run after epoch {stopping.stopped_epoch}: "
              f"{stopping.stopping_reason_message}")
    else:
        print(f"no early stop: the loss still improved at epoch {trainer.current_epoch - 1}")
    metrics_csv = Path(loggers[0].log_dir) / "metrics.csv"
    with open(metrics_csv, newline="") as file:
        print(f"{metrics_csv} columns: {next(csv.reader(file))}")
    print(f"TensorBoard events in {loggers[1].log_dir}")
    print(plot(metrics_csv, Path(loggers[0].log_dir) / "losses.png"))


if __name__ == "__main__":
    main()
