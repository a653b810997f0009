"""``PyTorchProfiler``: ``torch.profiler`` over the run, each action a ``record_function`` range."""

import os
from typing import Any

import torch

from framework.profilers.base import Profiler


class PyTorchProfiler(Profiler):
    """Runs ``torch.profiler.profile`` from the first action to the run's end, marking every action (hooks, steps,
    fetches) as a ``record_function`` range. The report is the operators' table (``row_limit`` rows, sorted by
    ``sort_by_key``, by default the device time on a GPU, else the CPU time); with ``filename`` and
    ``export_to_chrome``, a Chrome trace ``<stage>-<filename>[-<rank>].pt.trace.json`` opens in
    chrome://tracing or Perfetto. ``profiler_kwargs`` go to ``torch.profiler.profile``: pass a ``schedule``
    for long runs (its step advances with every training step).

    Example::

        Trainer(profiler=PyTorchProfiler(filename="perf", row_limit=30, profile_memory=True))
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 group_by_input_shapes: bool = False, export_to_chrome: bool = True, row_limit: int = 20,
                 sort_by_key: str | None = None, record_module_names: bool = True, **profiler_kwargs: Any) -> None:
        super().__init__(dirpath, filename)
        self.group_by_input_shapes = group_by_input_shapes
        self.export_to_chrome = export_to_chrome
        self.row_limit = row_limit
        self.sort_by_key = sort_by_key
        self.record_module_names = record_module_names
        if group_by_input_shapes:
            profiler_kwargs.setdefault("record_shapes", True)
        self.profiler_kwargs = profiler_kwargs
        self.profiler: torch.profiler.profile | None = None
        self._ranges: dict[str, torch.profiler.record_function] = {}
        self._report = ""

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """A run starts: a new profile."""
        super().setup(stage, local_rank, log_dir)
        self._report = ""

    def start(self, action_name: str) -> None:
        """Open ``action_name``'s range (starting the profile with the first action)."""
        if self.profiler is None:
            self.profiler = torch.profiler.profile(**self.profiler_kwargs)
            self.profiler.__enter__()
        if action_name not in self._ranges:
            recording = torch.profiler.record_function(action_name)
            recording.__enter__()
            self._ranges[action_name] = recording

    def stop(self, action_name: str) -> None:
        """Close ``action_name``'s range."""
        recording = self._ranges.pop(action_name, None)
        if recording is not None:
            recording.__exit__(None, None, None)
        if action_name == "training_step" and self.profiler is not None and "schedule" in self.profiler_kwargs:
            self.profiler.step()

    def summary(self) -> str:
        """End the profile; the operators' table."""
        self._finish()
        return self._report

    def _finish(self) -> None:
        if self.profiler is None:
            return
        for recording in reversed(list(self._ranges.values())):
            recording.__exit__(None, None, None)
        self._ranges.clear()
        profiler, self.profiler = self.profiler, None
        profiler.__exit__(None, None, None)
        if self.export_to_chrome and self.output_path is not None:
            trace = os.path.join(os.path.dirname(self.output_path), self._prepare_filename(extension=".pt.trace.json"))
            os.makedirs(os.path.dirname(trace) or ".", exist_ok=True)
            profiler.export_chrome_trace(trace)
        events = profiler.key_averages(group_by_input_shape=self.group_by_input_shapes)
        default_key = "device_time_total" if torch.cuda.is_available() else "cpu_time_total"
        self._report = events.table(sort_by=self.sort_by_key or default_key, row_limit=self.row_limit)

    def teardown(self, stage: str | None) -> None:
        """Make sure the profile is closed."""
        self._finish()
        super().teardown(stage)
