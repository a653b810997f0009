"""Preemption: the signals a scheduler sends before it takes the machine, and the exit that asks to be run again.

SLURM sends ``SIGUSR1`` (``--signal=USR1@90``) or ``SIGTERM`` (its grace time before ``SIGKILL``), Kubernetes and
cloud spot VMs ``SIGTERM``. The handler installed here only notes which signal came: saving a checkpoint inside a
signal handler can deadlock (the handler may interrupt a write or a collective). The training loop reads the note
at its next step boundary, the ranks agree on it (:mod:`framework.trainer.stop_vote`), every rank saves the same
step, and each process ends with ``REQUEUE_EXIT_CODE``: "preempted, the checkpoint is saved, start me again".

Example::

    watch = PreemptionWatch()
    watch.install()
    ...                       # at a step boundary:
    if watch.received is not None:
        save_and_leave()      # raises Preempted, so the process exits with REQUEUE_EXIT_CODE
    watch.restore()
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# sysexits.h's EX_TEMPFAIL, "a temporary failure; the user is invited to retry": the process saved a checkpoint
# on a preemption signal and a new start resumes from it.
REQUEUE_EXIT_CODE = 75

PREEMPTION_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR1", "SIGUSR2") if hasattr(signal, name))


class Preempted(SystemExit):
    """Raised on every rank once the preemption checkpoint is saved: the process exits with ``REQUEUE_EXIT_CODE``
    (a ``SystemExit``, so no traceback is printed and ``except Exception`` in user code does not swallow it)."""

    def __init__(self, reason: str, checkpoint_path: str | None) -> None:
        super().__init__(REQUEUE_EXIT_CODE)
        self.reason = reason  # "SIGUSR1 received"
        self.checkpoint_path = checkpoint_path

    def __reduce__(self) -> tuple[Any, ...]:  # sent back from a rank process to the one that started it
        return type(self), (self.reason, self.checkpoint_path)

    def __str__(self) -> str:
        return (f"{self.reason}: saved {self.checkpoint_path} and stopped; exit status "
                f"{REQUEUE_EXIT_CODE} asks for the job to be started again, which resumes from it.")


class PreemptionWatch:
    """Notes the first preemption signal this process receives (``received``, a signal number, else None).

    Installed only from the main thread (Python delivers signals there). A handler the program had before is
    called too, so a user's own handler keeps working. The loop sets ``answering`` once it begins to save and
    leave (see ``unanswered_signal``).
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = PREEMPTION_SIGNALS) -> None:
        self.signals = signals
        self.received: int | None = None
        self.answering = False
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Handle the signals from now on; False (and nothing done) off the main thread."""
        global _watching
        if threading.current_thread() is not threading.main_thread():
            return False
        for number in self.signals:
            self._previous[number] = signal.signal(number, self._note)
        _watching += 1
        if not _installed:
            _hear_signals_at_once()
        _installed.append(self)
        return True

    def restore(self) -> None:
        """Give the signals back to the handlers they had before ``install``.

        Called while an exception ends the loop (a collective lost a peer), a signal received and not answered
        stays ``unanswered_signal()``'s: Python drops a signal whose handler it had not run yet once the handler
        is gone, so torchrun's SIGTERM to a rank whose peer died would otherwise be lost while the rank's error
        is still being reported.
        """
        global _watching, _unanswered_at_error
        if not self._previous:
            return
        if sys.exc_info()[0] is not None:
            unanswered_signal()  # takes in a signal whose number is in the pipe
            if self.received is not None and not self.answering:
                _unanswered_at_error = self.received
        for number, handler in self._previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()
        _watching -= 1
        _installed.remove(self)
        if not _installed:
            _stop_hearing_signals_at_once()

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def _note(self, number: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = number
        previous = self._previous.get(number)
        if callable(previous):
            previous(number, frame)


def unanswered_signal() -> int | None:
    """The preemption signal an installed watch received and its loop has not begun to answer (or one that a
    watch ended by an error left unanswered), else None.

    Read from another thread (the heartbeat's): when a peer is gone meanwhile, no checkpoint can be saved, since
    every rank takes part (:mod:`framework.runtime.peer_failure`). A signal counts as soon as it arrives, even while
    the main thread is in a long C call (a backward, a collective waiting for a dead peer) and Python's handler
    has not run yet: Python's C-level handler writes its number into a pipe at once (``signal.set_wakeup_fd``).
    """
    arrived = _signals_arrived()
    for watch in list(_installed):
        if watch.received is None:
            watch.received = next((number for number in arrived if number in watch.signals), None)
        if watch.received is not None and not watch.answering:
            return watch.received
    return _unanswered_at_error


_unanswered_at_error: int | None = None  # see PreemptionWatch.restore

_installed: list[PreemptionWatch] = []
# Made once and never closed: its read end is read from the heartbeat's thread, which must never read a number
# the process has given to another file meanwhile.
_wakeup_pipe: tuple[int, int] | None = None
_hearing = False


def _hear_signals_at_once() -> None:
    """Have Python's C-level signal handler write each signal's number into ``_wakeup_pipe``, unless the process
    uses that already (an asyncio loop does)."""
    global _wakeup_pipe, _hearing
    if _wakeup_pipe is None:
        _wakeup_pipe = os.pipe()
        for end in _wakeup_pipe:
            os.set_blocking(end, False)
    try:
        previous = signal.set_wakeup_fd(_wakeup_pipe[1], warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        return
    if previous != -1:
        signal.set_wakeup_fd(previous)
        return
    _hearing = True


def _stop_hearing_signals_at_once() -> None:
    global _hearing
    if _hearing:
        signal.set_wakeup_fd(-1)
        _hearing = False
        _signals_arrived()


def _signals_arrived() -> bytes:
    """The numbers of the signals that arrived since the last call (each a byte), while ``_hearing``."""
    if not _hearing or _wakeup_pipe is None:
        return b""
    try:
        return os.read(_wakeup_pipe[0], 4096)
    except OSError:  # nothing arrived (EAGAIN)
        return b""


# How many watches are installed. A process forked meanwhile (a DataLoader worker) blocks the signals: SLURM signals
# every process of a job step, and a worker would die of SIGUSR1 or of torch's SIGTERM handler, failing the batch
# its rank is waiting for instead of letting the rank save. Such a worker cannot be stopped with SIGTERM any more, so
# at exit this process stops the ones still running with SIGKILL (before multiprocessing would wait for them).
_watching = 0
_forked_while_watching = False


def _block_in_forked_child() -> None:
    global _watching, _forked_while_watching
    if _watching:
        signal.pthread_sigmask(signal.SIG_BLOCK, PREEMPTION_SIGNALS)
        _watching, _forked_while_watching = 0, False


def _note_fork_in_parent() -> None:
    global _forked_while_watching
    if _watching:
        _forked_while_watching = True


def _kill_deaf_children() -> None:
    if not _forked_while_watching:
        return
    import multiprocessing

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # torch's handler would report the workers' deaths as errors
    for child in multiprocessing.active_children():
        if child.daemon:
            child.kill()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_block_in_forked_child, after_in_parent=_note_fork_in_parent)
    atexit.register(_kill_deaf_children)


def slurm_requeue(say: Callable[[str], None], environ: os._Environ[str] | dict[str, str] | None = None) -> None:
    """Ask SLURM to requeue this job (``scontrol requeue``; for an array task, that task), telling ``say`` what
    happens. The line that says the job is requeued comes first: ``scontrol requeue`` kills every process of the job
    within milliseconds, and a line written after it returns may never reach the job's output. Never raises, since
    the checkpoint is saved and the exit status still says "requeue me"."""
    environ = os.environ if environ is None else environ
    job = slurm_job_id(environ)
    if job is None:
        return
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        say(f"SLURM job {job}: scontrol is not on PATH here (a container?), so the job was not requeued; the "
            f"exit status {REQUEUE_EXIT_CODE} says it should be.")
        return
    say(f"Requeueing SLURM job {job}; it resumes from the checkpoint when it starts again.")
    try:
        done = subprocess.run([scontrol, "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        say(f"SLURM job {job}: `scontrol requeue {job}` failed ({error}); it was not requeued.")
        return
    if done.returncode != 0:
        say(f"SLURM job {job}: `scontrol requeue {job}` failed: {done.stderr.strip() or done.stdout.strip()}; it was "
            "not requeued (was the job submitted with --requeue, and does the cluster allow JobRequeue?)")


def slurm_job_id(environ: os._Environ[str] | dict[str, str]) -> str | None:
    """The id ``scontrol`` requeues: an array task's ``<array job>_<task>``, else the job's id; None outside a
    batch job (``srun`` run by hand in a shell starts no job to requeue)."""
    if "SLURM_JOB_ID" not in environ or environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    if "SLURM_ARRAY_JOB_ID" in environ and "SLURM_ARRAY_TASK_ID" in environ:
        return f"{environ['SLURM_ARRAY_JOB_ID']}_{environ['SLURM_ARRAY_TASK_ID']}"
    return environ["SLURM_JOB_ID"]


def restart_count(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """How many times this job was started again after a failure or a preemption: by ``framework launch
    --max-restarts`` or torchrun (``TORCHELASTIC_RESTART_COUNT``), or by SLURM's requeue (``SLURM_RESTART_COUNT``)."""
    environ = os.environ if environ is None else environ
    counts = [environ.get(name, "0") for name in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT",
                                                  RESTART_COUNT_VARIABLE)]
    return max(int(count) if count.isdigit() else 0 for count in counts)


# Set by ``framework launch`` on the ranks of its k-th restart (torchrun's own count starts at 0 in each attempt the
# launcher makes).
RESTART_COUNT_VARIABLE = "FRAMEWORK_RESTART_COUNT"
# Set by ``framework launch`` on the ranks of a restart: why the last attempt ended (which rank, and how).
RESTART_REASON_VARIABLE = "FRAMEWORK_RESTART_REASON"
# Set by ``framework launch --max-restarts N`` on its ranks: N.
MAX_RESTARTS_VARIABLE = "FRAMEWORK_MAX_RESTARTS"
# Set by ``framework launch`` (and the Trainer's own launcher) once per job, the same in every attempt: an id.
JOB_ID_VARIABLE = "FRAMEWORK_JOB_ID"


def job_identity(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """The job this process belongs to, the same in every attempt of it (a restart, a requeue): ``"slurm:<id>"``
    in a SLURM batch job (its id survives a requeue), else ``"launch:<id>"`` under ``framework launch`` or ranks
    the Trainer started, else ``"torchelastic:<run id>"`` under torchrun with a rendezvous id; ``""`` for a
    process no launcher started."""
    environ = os.environ if environ is None else environ
    slurm = slurm_job_id(environ)
    if slurm is not None:
        return f"slurm:{slurm}"
    if environ.get(JOB_ID_VARIABLE):
        return f"launch:{environ[JOB_ID_VARIABLE]}"
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    return f"torchelastic:{run_id}" if run_id not in ("", "none") else ""
