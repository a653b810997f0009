"""Makes every Python process started with this folder on PYTHONPATH look like one on a GPU machine
whose CUDA it must not use.

Python runs ``sitecustomize`` at start-up, so the ranks, re-run scripts and spawned children of a
run get it too. In them ``torch.cuda.is_available()`` is True and ``torch.cuda.device_count()`` is
2, as on a machine with two GPUs (fewer where ``CUDA_VISIBLE_DEVICES`` hides them), while anything
that would initialise CUDA raises, as it does in a process forked on such a machine. A CPU run must
pass untouched, and the framework must decide what it decides where GPUs are present (never to fork,
above all).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

DEVICES = 2
REFUSAL = ("A CUDA call in a process that must not use CUDA (tests/fake_cuda makes CUDA look present, "
           "as on a GPU machine, and refuses to initialise it, as a forked child there would).")


def _device_count() -> int:
    """As torch counts them: ``CUDA_VISIBLE_DEVICES`` (read at each call, as by torch's NVML count) hides some."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return DEVICES
    return min(DEVICES, len([part for part in visible.split(",") if part.strip()]))


def _refuse(*args: object, **kwargs: object) -> None:
    raise RuntimeError(REFUSAL)


def _pretend(cuda: object) -> None:
    """Replace the answers of ``torch.cuda`` (and of its submodules that imported them by name)."""
    originals = {"is_available": (cuda.is_available, lambda: _device_count() > 0),
                 "device_count": (cuda.device_count, _device_count),
                 "_lazy_init": (cuda._lazy_init, _refuse)}
    for name, module in list(sys.modules.items()):
        if name != "torch.cuda" and not name.startswith("torch.cuda."):
            continue
        for attribute, (original, replacement) in originals.items():
            if getattr(module, attribute, None) is original:
                setattr(module, attribute, replacement)
    import torch

    torch._C._cuda_init = _refuse


class _AfterTorchCuda(importlib.abc.MetaPathFinder):
    """Runs ``_pretend`` right after ``torch.cuda`` is imported, without importing torch before the process does."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch.cuda":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            _pretend(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterTorchCuda())
