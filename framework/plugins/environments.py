"""Lightning's cluster environments, for ``Trainer(plugins=[...])`` and ``Runtime(plugins=[...])``.

framework finds out by itself who started its ranks (torchrun and ``framework launch``, SLURM, or itself), so
most scripts need none of these. Given one, it decides instead:

- ``LightningEnvironment()``: framework starts the ranks (or torchrun did); SLURM's variables are ignored, as in
  an interactive allocation where you launch by hand.
- ``TorchElasticEnvironment()``: torchrun (or ``framework launch``) started the ranks; an error if it did not.
- ``SLURMEnvironment(auto_requeue=True, requeue_signal=None)``: SLURM started the ranks (``srun``); with
  ``auto_requeue=False`` a preempted run saves its checkpoint and exits without requeueing the job.
- A subclass of ``ClusterEnvironment`` of your own: its methods give the ranks and the main address.

Example::

    Trainer(devices=4, num_nodes=2, plugins=[SLURMEnvironment(auto_requeue=False)])
"""

from __future__ import annotations

import logging
import os
import re
import signal
from abc import ABC, abstractmethod
from collections.abc import Mapping

from framework.errors import MisconfigurationError

log = logging.getLogger(__name__)

__all__ = ["ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment"]


class ClusterEnvironment(ABC):
    """Where this process stands among the ranks, and how they find each other (Lightning's interface)."""

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether something else (torchrun, srun) started the ranks; else framework starts them."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """The host of global rank 0."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """The port the ranks meet on."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether this process runs in such an environment."""

    @abstractmethod
    def world_size(self) -> int:
        """How many ranks there are."""

    @abstractmethod
    def set_world_size(self, size: int) -> None:
        """Told the number of ranks when framework decides it."""

    @abstractmethod
    def global_rank(self) -> int:
        """This process's rank among all."""

    @abstractmethod
    def set_global_rank(self, rank: int) -> None:
        """Told this process's rank when framework decides it."""

    @abstractmethod
    def local_rank(self) -> int:
        """This process's rank on its node."""

    @abstractmethod
    def node_rank(self) -> int:
        """This node's rank."""

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:  # noqa: B027 - nothing to check here
        """Raise if ``num_devices`` per node on ``num_nodes`` nodes cannot run here."""

    def teardown(self) -> None:  # noqa: B027 - nothing to release here
        """Called when the run ends."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _FromVariables(ClusterEnvironment):
    """An environment read from the process's variables; ``set_*`` take what framework decides."""

    _WORLD_SIZE = "WORLD_SIZE"
    _GLOBAL_RANK = "RANK"
    _LOCAL_RANK = "LOCAL_RANK"
    _NODE_RANK = "NODE_RANK"

    def __init__(self) -> None:
        self._world_size: int | None = None
        self._global_rank: int | None = None

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT", 0))

    def world_size(self) -> int:
        return self._world_size if self._world_size is not None else int(os.environ.get(self._WORLD_SIZE, 1))

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._global_rank if self._global_rank is not None else int(os.environ.get(self._GLOBAL_RANK, 0))

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank

    def local_rank(self) -> int:
        return int(os.environ.get(self._LOCAL_RANK, 0))

    def node_rank(self) -> int:
        return int(os.environ.get(self._NODE_RANK, os.environ.get("GROUP_RANK", 0)))


class LightningEnvironment(_FromVariables):
    """framework starts the ranks itself (or torchrun did); SLURM's variables are not read."""

    def __init__(self) -> None:
        super().__init__()
        self._main_port: int | None = None

    @property
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else a port free on this machine now (the same one each time it is asked)."""
        if self._main_port is None:
            self._main_port = int(os.environ["MASTER_PORT"]) if "MASTER_PORT" in os.environ else _free_port()
        return self._main_port

    @staticmethod
    def detect() -> bool:
        return True


class _SetByLauncher(_FromVariables):
    """The launcher decided the ranks: what framework would set is ignored."""

    def set_world_size(self, size: int) -> None:
        log.debug("%s: the launcher set the world size; %d is ignored.", type(self).__name__, size)

    def set_global_rank(self, rank: int) -> None:
        log.debug("%s: the launcher set the global rank; %d is ignored.", type(self).__name__, rank)


class TorchElasticEnvironment(_SetByLauncher):
    """torchrun (or ``framework launch``) started the ranks."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        return all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Refuse a process that torchrun (or ``framework launch``) did not start.

        :raises MisconfigurationError: where one of ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
            ``MASTER_PORT`` is not set.
        """
        if not self.detect():
            raise MisconfigurationError(
                "plugins=[TorchElasticEnvironment()]: this process was not started by torchrun or `framework "
                "launch` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR or MASTER_PORT is not set). Start it with "
                "`framework launch`, or leave the plugin out."
            )


#: The signals framework's preemption watch answers (``framework.runtime.preemption_signals``).
_WATCHED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2", "SIGTERM") if hasattr(signal, name))


class SLURMEnvironment(_SetByLauncher):
    """``srun`` started the ranks. ``auto_requeue``: whether a preempted run asks SLURM to requeue the job once
    its checkpoint is saved; ``requeue_signal``: the signal the job is sent before its time is up (``sbatch
    --signal``); SIGUSR1, SIGUSR2 and SIGTERM are answered, whichever you choose.

    :raises MisconfigurationError: where ``requeue_signal`` is not one of SIGUSR1, SIGUSR2 and SIGTERM.
    """

    _WORLD_SIZE = "SLURM_NTASKS"
    _GLOBAL_RANK = "SLURM_PROCID"
    _LOCAL_RANK = "SLURM_LOCALID"
    _NODE_RANK = "SLURM_NODEID"

    def __init__(self, auto_requeue: bool = True, requeue_signal: signal.Signals | None = None) -> None:
        super().__init__()
        if requeue_signal is not None and requeue_signal not in _WATCHED_SIGNALS:
            watched = ", ".join(signal.Signals(number).name for number in _WATCHED_SIGNALS)
            raise MisconfigurationError(
                f"SLURMEnvironment(requeue_signal={requeue_signal!r}): framework answers {watched}; ask SLURM for one "
                "of them (sbatch --signal=USR1@90)."
            )
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal if requeue_signal is not None else getattr(signal, "SIGUSR1", None)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR") or first_host(os.environ.get("SLURM_NODELIST", "127.0.0.1"))

    @property
    def main_port(self) -> int:
        return int(os.environ["MASTER_PORT"]) if "MASTER_PORT" in os.environ else slurm_port(os.environ)

    @staticmethod
    def detect() -> bool:
        """A SLURM job step's task, not an interactive shell (``srun --pty bash``, ``salloc``)."""
        return "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")

    @staticmethod
    def job_id() -> int | None:
        """The SLURM job's id (None outside a job; an array task's own id)."""
        job = os.environ.get("SLURM_JOB_ID")
        return int(job) if job is not None and job.isdigit() else None

    @staticmethod
    def job_name() -> str | None:
        """The SLURM job's name (None outside a job)."""
        return os.environ.get("SLURM_JOB_NAME")

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Refuse a process that srun did not start.

        :raises MisconfigurationError: where ``SLURM_NTASKS`` or ``SLURM_PROCID`` is not set.
        """
        if "SLURM_NTASKS" not in os.environ or "SLURM_PROCID" not in os.environ:
            raise MisconfigurationError(
                "plugins=[SLURMEnvironment()]: this process was not started by srun (SLURM_NTASKS and "
                "SLURM_PROCID are not set). Run it as a SLURM job step (srun python train.py), or leave the "
                "plugin out."
            )

    def __repr__(self) -> str:
        return f"SLURMEnvironment(auto_requeue={self.auto_requeue}, requeue_signal={self.requeue_signal!r})"


def slurm_port(environ: Mapping[str, str]) -> int:
    """The port a SLURM job's ranks meet on: every task derives the same one from the job id, in a range few
    services use."""
    return 15000 + int(environ.get("SLURM_JOB_ID", 0)) % 5000


def first_host(nodelist: str) -> str:
    """The first host name of a SLURM node list such as ``"gpu[003-005,009]-ib,cpu01"`` (here ``"gpu003-ib"``)."""
    first = re.match(r"([^,\[\s]+)(?:\[([^\]]+)\]([^,\s]*))?", nodelist.strip())
    if first is None:
        raise MisconfigurationError(f"SLURM_NODELIST={nodelist!r} is not a node list this framework can read.")
    prefix, ranges, suffix = first.group(1), first.group(2), first.group(3)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0] + suffix


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]
