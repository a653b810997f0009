"""``accelerator.profile()``: ``torch.profiler`` around a block, each process's trace written where asked."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from framework.accelerate.utils.constants import PROFILE_PATTERN_NAME
from framework.accelerate.utils.kwargs_handlers import ProfileKwargs


@contextlib.contextmanager
def profile(accelerator: Any, handler: ProfileKwargs) -> Iterator[torch.profiler.profile]:
    """Run the block under the profiler ``handler`` builds; with its ``output_trace_dir``, every process writes
    its Chrome trace there (``profile_<process index>.json``) and waits for the others."""
    with handler.build() as profiler:
        yield profiler
    if handler.output_trace_dir is None:
        return
    folder = os.fspath(handler.output_trace_dir)
    os.makedirs(folder, exist_ok=True)
    profiler.export_chrome_trace(os.path.join(folder, PROFILE_PATTERN_NAME.format(suffix=accelerator.process_index)))
    accelerator.wait_for_everyone()
