"""Exporting a trained Module: TorchScript and ONNX, behind ``Module.to_torchscript`` / ``Module.to_onnx``."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from framework.errors import MisconfigurationError


def to_torchscript(module: nn.Module, file_path: str | os.PathLike | None = None, method: str = "script",
                   example_inputs: Any = None, **kwargs: Any) -> Any:
    """``module`` in eval mode as TorchScript, by ``torch.jit.script`` or ``torch.jit.trace``; saved when asked.

    Example::

        scripted = model.to_torchscript("model.pt", method="trace", example_inputs=torch.randn(1, 8))
    """
    with _eval_mode(module), torch.no_grad(), _scripting(module):
        if method == "script":
            exported = torch.jit.script(module, **kwargs)
        elif method == "trace":
            example = module.example_input_array if example_inputs is None else example_inputs
            if example is None:
                raise MisconfigurationError(
                    "to_torchscript(method='trace') needs example_inputs=..., or set model.example_input_array."
                )
            exported = torch.jit.trace(module, example_inputs=example, **kwargs)
        else:
            raise MisconfigurationError(f"to_torchscript(method={method!r}): accepted 'script' or 'trace'.")
    if file_path is not None:
        from framework.io.fs import write_bytes_atomic

        buffer = io.BytesIO()
        torch.jit.save(exported, buffer)
        write_bytes_atomic(file_path, buffer.getvalue())
    return exported


def to_onnx(module: nn.Module, file_path: str | os.PathLike, input_sample: Any = None, **kwargs: Any) -> Any:
    """``torch.onnx.export`` of ``module`` in eval mode; ``input_sample`` defaults to ``example_input_array``.

    Example::

        model.to_onnx("model.onnx", torch.randn(1, 8))
    """
    sample = module.example_input_array if input_sample is None else input_sample
    if sample is None:
        raise MisconfigurationError("to_onnx needs input_sample=..., or set model.example_input_array.")
    arguments = sample if isinstance(sample, tuple) else (sample,)
    with _eval_mode(module):
        return torch.onnx.export(module, arguments, os.fspath(file_path), **kwargs)


@contextlib.contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    modes = {sub: sub.training for sub in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for sub, training in modes.items():
            sub.training = training


@contextlib.contextmanager
def _scripting(module: nn.Module) -> Iterator[None]:
    """While exporting, ``module.trainer`` answers None instead of raising (TorchScript reads every attribute)."""
    module._jit_is_scripting = True
    try:
        yield
    finally:
        module._jit_is_scripting = False
