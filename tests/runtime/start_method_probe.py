"""Prints what ``start_method="auto"`` decides in this process, before and after a backward pass.

Run as a script, by pytest (``pytest tests/runtime/start_method_probe.py``: not a test_ file, so the
suite never collects it), or imported at a REPL prompt; ``tests/runtime/test_start_method.py`` reads
the line ``decisions: <before> <after>``.
"""

import torch

import framework


def report() -> None:
    runtime = framework.Runtime(accelerator="cpu", devices=2)
    before = runtime.start_method()
    torch.nn.Linear(2, 1)(torch.randn(3, 2)).sum().backward()  # where CUDA devices exist, autograd's threads start
    print("decisions:", before, runtime.start_method(), flush=True)


def test_report() -> None:
    report()


if __name__ == "__main__":
    report()
