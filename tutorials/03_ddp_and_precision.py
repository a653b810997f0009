"""The quickstart on two processes with DDP, in bf16 mixed precision: one Trainer argument each.

``devices=2, strategy="ddp"`` runs two processes, each on its own half of the training set in batches of the
same size, with gradients averaged between them in backward; ``precision="bf16-mixed"`` runs the matrix
multiplies in bfloat16 while the weights stay fp32. Nothing else in the model or the data changes. The Trainer
starts the two processes itself (here on the CPU, with gloo; with ``accelerator="cuda"`` on a GPU
machine, one GPU per process and nccl), and when ``fit`` returns, this process holds the trained model and
the synced validation metrics. Run it from the repository root:

    python tutorials/03_ddp_and_precision.py
    python tutorials/03_ddp_and_precision.py --devices 1 --precision 32-true   # the quickstart as it was

It prints the validation accuracy over the whole validation set (each process evaluated half of
it) and how long training took. On a CPU without bfloat16 instructions bf16-mixed is slower than
fp32; the point here is that the switch is one argument, on the CPU as on a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import framework as L

# The quickstart's data and model, as a module (its file name starts with a digit).
_spec = importlib.util.spec_from_file_location("quickstart", Path(__file__).with_name("01_quickstart.py"))
quickstart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--max-epochs", type=int, default=15)
    args = parser.parse_args()

    L.seed_everything(0, verbose=False)
    model = quickstart.DigitClassifier()
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy=args.strategy,
                        precision=args.precision, max_epochs=args.max_epochs, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    started = time.perf_counter()
    trainer.fit(model, datamodule=quickstart.Digits())
    took = time.perf_counter() - started
    results = trainer.validate(model, datamodule=quickstart.Digits(), verbose=False)
    print(f"{args.devices} process(es), strategy={args.strategy!r}, precision={args.precision!r}: "
          f"validation accuracy {results[0]['val_acc']:.3f}, trained in {took:.1f} s")


if __name__ == "__main__":
    main()
