"""``Profiler``: time named actions of a run (hooks, steps, data fetching) and report them when it ends.

A Trainer given ``profiler=`` wraps its hooks, steps and batch fetching in ``profile(action)``; without
one nothing is wrapped, so an unprofiled run pays nothing.
"""

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from framework import console


class Profiler(ABC):
    """Subclass and implement ``start``, ``stop`` and ``summary``.

    The report is printed when a run ends; with ``filename`` it is written to
    ``dirpath/<stage>-<filename>.txt`` instead (``-<local rank>`` added in a distributed run, so every
    rank writes its own; ``dirpath`` defaults to the Trainer's ``log_dir``).

    Example::

        class CountsCalls(Profiler):
            ...
        Trainer(profiler=CountsCalls(filename="perf"))
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None) -> None:
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename
        self._stage: str | None = None
        self._local_rank: int | None = None
        self._log_dir: str | None = None

    @abstractmethod
    def start(self, action_name: str) -> None:
        """Start timing ``action_name``."""

    @abstractmethod
    def stop(self, action_name: str) -> None:
        """Stop timing ``action_name``."""

    @abstractmethod
    def summary(self) -> str:
        """The report of what was recorded."""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[str]:
        """Time the block as ``action_name``."""
        self.start(action_name)
        try:
            yield action_name
        finally:
            self.stop(action_name)

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Called by the Trainer when a run (``stage``: fit, validate, test, predict) starts."""
        self._stage, self._local_rank, self._log_dir = stage, local_rank, log_dir

    def describe(self) -> None:
        """Report: to the file, or to the console (on local rank 0)."""
        report = self.summary()
        if not report:
            return
        path = self.output_path
        if path is None:
            if not self._local_rank:
                console.info(report)
            return
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as file:
            file.write(report + "\n")

    def teardown(self, stage: str | None) -> None:
        """Called by the Trainer when the run ends, after ``describe``."""
        self._stage = None

    @property
    def output_path(self) -> str | None:
        """Where ``describe`` writes (None: the console)."""
        if not self.filename:
            return None
        return os.path.join(self.dirpath or self._log_dir or ".", self._prepare_filename())

    def _prepare_filename(self, action_name: str | None = None, extension: str = ".txt",
                          split_token: str = "-") -> str:
        parts = [part for part in (self._stage, self.filename) if part]
        if self._local_rank is not None:
            parts.append(str(self._local_rank))
        if action_name is not None:
            parts.append(action_name)
        return split_token.join(parts) + extension


class PassThroughProfiler(Profiler):
    """Records nothing (``profiler=None`` does the same, without the calls)."""

    def start(self, action_name: str) -> None:
        """Nothing."""

    def stop(self, action_name: str) -> None:
        """Nothing."""

    def summary(self) -> str:
        """Nothing to report."""
        return ""


def profiled(profiler: Profiler | None, action_name: str, function: Callable[..., Any] | None) -> Any:
    """``function``, timed as ``action_name`` when there is a profiler (as it is otherwise, or when None)."""
    if profiler is None or function is None:
        return function
    start, stop = profiler.start, profiler.stop

    def timed(*args: Any, **kwargs: Any) -> Any:
        start(action_name)
        try:
            return function(*args, **kwargs)
        finally:
            stop(action_name)

    return timed


def profiled_batches(profiler: Profiler | None, action_name: str, batches: Iterable[Any]) -> Iterable[Any]:
    """``batches``, each fetch timed as ``action_name`` when there is a profiler."""
    if profiler is None:
        return batches
    return _timed_fetches(profiler, action_name, batches)


def _timed_fetches(profiler: Profiler, action_name: str, batches: Iterable[Any]) -> Iterator[Any]:
    iterator = iter(batches)
    while True:
        profiler.start(action_name)
        try:
            batch = next(iterator)
        except StopIteration:
            return
        finally:
            profiler.stop(action_name)
        yield batch
