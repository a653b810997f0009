"""``SimpleProfiler``: how long each action took, on average and in total."""

import os
import time
from collections import defaultdict

from framework.profilers.base import Profiler


class SimpleProfiler(Profiler):
    """Times every action; the report lists them by total time: mean duration, calls, total, share of the run.

    Example::

        trainer = Trainer(profiler="simple")            # or SimpleProfiler(filename="perf")
        trainer.fit(model)                              # prints the table when fit ends
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 extended: bool = True) -> None:
        super().__init__(dirpath, filename)
        self.extended = extended
        self.current_actions: dict[str, float] = {}
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self.start_time = time.monotonic()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """A run starts: its own records."""
        super().setup(stage, local_rank, log_dir)
        self.current_actions.clear()
        self.recorded_durations.clear()
        self.start_time = time.monotonic()

    def start(self, action_name: str) -> None:
        """Start timing ``action_name`` (an error if it already runs).

        :raises ValueError: where ``action_name`` is running already.
        """
        if action_name in self.current_actions:
            raise ValueError(f"Attempted to start {action_name} which has already started.")
        self.current_actions[action_name] = time.monotonic()

    def stop(self, action_name: str) -> None:
        """Stop timing ``action_name`` (an error if it was not started).

        :raises ValueError: where ``action_name`` is not running.
        """
        end = time.monotonic()
        started = self.current_actions.pop(action_name, None)
        if started is None:
            raise ValueError(f"Attempting to stop recording an action ({action_name}) which was never started.")
        self.recorded_durations[action_name].append(end - started)

    def summary(self) -> str:
        """The table, longest total first."""
        if not self.recorded_durations:
            return ""
        total = time.monotonic() - self.start_time
        rows = sorted(((name, sum(durations), len(durations)) for name, durations in self.recorded_durations.items()),
                      key=lambda row: row[1], reverse=True)
        title = f"{(self._stage or '').upper()} Profiler Report".strip()
        width = max(len("Action"), len("Total"), *(len(name) for name, _, _ in rows))
        if not self.extended:
            lines = [f"{'Action':<{width}}  {'Mean duration (s)':>18}  {'Total time (s)':>15}"]
            lines += [f"{name:<{width}}  {spent / calls:>18.5f}  {spent:>15.5f}" for name, spent, calls in rows]
        else:
            lines = [f"{'Action':<{width}}  {'Mean duration (s)':>18}  {'Num calls':>10}  {'Total time (s)':>15}  "
                     f"{'Percentage %':>13}"]
            lines.append(f"{'Total':<{width}}  {'-':>18}  {sum(c for _, _, c in rows):>10}  {total:>15.5f}  "
                         f"{100.0:>13.1f}")
            lines += [f"{name:<{width}}  {spent / calls:>18.5f}  {calls:>10}  {spent:>15.5f}  "
                      f"{100.0 * spent / total if total else 0.0:>13.1f}" for name, spent, calls in rows]
        rule = "-" * max(len(line) for line in lines)
        return "\n".join([title, rule, lines[0], rule, *lines[1:], rule])
