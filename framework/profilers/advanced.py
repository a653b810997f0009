"""``AdvancedProfiler``: Python's cProfile statistics of each action."""

import cProfile
import io
import os
import pstats

from framework.profilers.base import Profiler


class AdvancedProfiler(Profiler):
    """Runs cProfile during each action and reports its functions by cumulative time (``line_count_restriction``:
    how many lines of each, a count or a fraction). An action started inside another is counted in the outer
    one's statistics: Python allows one active profiler at a time.

    Example::

        Trainer(profiler=AdvancedProfiler(filename="perf", line_count_restriction=20))
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 line_count_restriction: float = 1.0, dump_stats: bool = False) -> None:
        super().__init__(dirpath, filename)
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats
        self.profiled_actions: dict[str, cProfile.Profile] = {}
        self._active: str | None = None

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """A run starts: its own records."""
        super().setup(stage, local_rank, log_dir)
        self.profiled_actions.clear()
        self._active = None

    def start(self, action_name: str) -> None:
        """Profile ``action_name`` unless another action is being profiled."""
        if self._active is not None:
            return
        self._active = action_name
        self.profiled_actions.setdefault(action_name, cProfile.Profile()).enable()

    def stop(self, action_name: str) -> None:
        """Stop profiling ``action_name``."""
        if self._active != action_name:
            return
        self.profiled_actions[action_name].disable()
        self._active = None

    def summary(self) -> str:
        """Each action's statistics, by cumulative time."""
        reports = []
        for name, profile in self.profiled_actions.items():
            if self.dump_stats and self.output_path is not None:
                profile.dump_stats(os.path.join(os.path.dirname(self.output_path),
                                                self._prepare_filename(name, extension=".prof")))
            stream = io.StringIO()
            pstats.Stats(profile, stream=stream).strip_dirs().sort_stats("cumulative").print_stats(
                self.line_count_restriction)
            reports.append(f"Profile stats for: {name}\n{stream.getvalue()}")
        return "\n".join(reports)
