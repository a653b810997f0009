"""Helpers for tests against the real SLURM cluster that ``.ci/slurm-cluster`` sets up (one node, 4 CPUs,
partition ``debug``, requeued jobs start again about 11 s later). No mocks: every call runs a SLURM client.

There is no accounting database, so no ``sacct``: job states come from ``scontrol show job``, and a job's
record disappears ``MinJobAge`` (60 s) after it ends, so wait for a job soon after it finishes.

    job = cluster.submit(script_text, "--ntasks=2", "--requeue")
    cluster.wait_for_state(job, "RUNNING")
    cluster.signal(job, "USR1")                    # job steps (srun tasks), not the batch shell
    info = cluster.wait_finished(job)              # {"JobState": "COMPLETED", "Restarts": "1", ...}
    text = cluster.output(job)                     # the job's stdout+stderr file
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

NOT_INSTALLED = "SLURM is not installed here; .ci/slurm-cluster sets up a one-node cluster"
USABLE_NODE_STATES = ("idle", "mixed", "allocated", "completing")
# States after which a job runs no more (unless requeued by hand).
FINISHED_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
     "PREEMPTED", "SPECIAL_EXIT"}
)


class SlurmError(RuntimeError):
    pass


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


def unavailable_reason() -> str | None:
    """Why the SLURM tests cannot run here, or None when the cluster answers and has a usable node."""
    setup_error = os.environ.get("SLURM_CLUSTER_SKIP_REASON")
    suffix = f" ({setup_error})" if setup_error else ""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return NOT_INSTALLED + suffix
    try:
        result = _run("sinfo", "-h", "-o", "%T", timeout=15)
    except subprocess.TimeoutExpired:
        return "SLURM is installed but sinfo did not answer in 15 s; run .ci/slurm-cluster" + suffix
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        return f"SLURM is installed but not answering (sinfo: {message[-1] if message else result.returncode}); " \
               f"run .ci/slurm-cluster" + suffix
    states = result.stdout.split()
    if not any(state.rstrip("~#!%$@^-+") in USABLE_NODE_STATES for state in states):
        return f"SLURM answers but has no idle node (node states: {states or 'none'}); run .ci/slurm-cluster" + suffix
    return None


def parse_record(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces ...`` (one ``scontrol -o`` line) as a dict."""
    keys = list(re.finditer(r"(?:^|\s)([A-Za-z][\w:/]*)=", line))
    record = {}
    for match, following in zip(keys, keys[1:] + [None]):
        end = following.start() if following is not None else len(line)
        record[match.group(1)] = line[match.end() : end].strip()
    return record


def job_info(job_id: str) -> dict[str, str] | None:
    """``scontrol show job`` for one job, or None when SLURM no longer (or never) knew it."""
    result = _run("scontrol", "show", "job", "-o", str(job_id))
    if result.returncode != 0:
        if "Invalid job id" in result.stderr:
            return None
        raise SlurmError(f"scontrol show job {job_id} failed: {result.stderr.strip()}")
    line = result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""
    return parse_record(line) if line else None


class SlurmCluster:
    """Submits jobs to the local cluster from ``workdir`` and cancels what it submitted at :meth:`close`."""

    def __init__(self, workdir: str | os.PathLike):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.jobs: list[str] = []
        self._outputs: dict[str, Path] = {}
        self._last_seen: dict[str, dict[str, str]] = {}

    @property
    def node(self) -> str:
        return _run("sinfo", "-h", "-o", "%n").stdout.split()[0]

    def submit(self, script: str, *options: str, name: str = "test", output: str | os.PathLike | None = None) -> str:
        """``sbatch --parsable OPTIONS`` a script (text starting with ``#!``, or a bash body); returns the job id.

        The job runs in ``workdir`` with the caller's environment (``--export=ALL``, SLURM's default); its
        stdout and stderr go to ``output`` (default ``workdir/NAME-JOBID.out``), appended across requeues."""
        if not script.startswith("#!"):
            script = "#!/bin/bash\n" + script
        path = self.workdir / f"{name}-{len(self.jobs)}.sbatch"
        path.write_text(script)
        out = Path(output) if output is not None else self.workdir / f"{name}-%j.out"
        args = ["sbatch", "--parsable", f"--job-name={name}", f"--chdir={self.workdir}", f"--output={out}",
                "--open-mode=append", *options, str(path)]
        result = _run(*args)
        if result.returncode != 0:
            raise SlurmError(f"{' '.join(args)} failed: {result.stderr.strip()}")
        job_id = result.stdout.strip().split(";")[0]
        self.jobs.append(job_id)
        self._outputs[job_id] = Path(str(out).replace("%j", job_id))
        return job_id

    def info(self, job_id: str) -> dict[str, str] | None:
        info = job_info(job_id)
        if info is not None:
            self._last_seen[job_id] = info
        return info

    def state(self, job_id: str) -> str | None:
        """``PENDING``, ``RUNNING``, ``COMPLETED``, ... or None once the record is gone (MinJobAge after the end)."""
        info = self.info(job_id)
        return info["JobState"] if info is not None else None

    def wait_for(self, job_id: str, condition, timeout: float = 45, what: str = "condition") -> dict[str, str]:
        """Poll ``scontrol show job`` until ``condition(info)`` holds; returns that record."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.info(job_id)
            if info is None:
                last = self._last_seen.get(job_id, {})
                raise SlurmError(f"job {job_id} vanished while waiting for {what} (last state "
                                 f"{last.get('JobState', 'never seen')}); output:\n{self.output(job_id)}")
            if condition(info):
                return info
            if time.monotonic() > deadline:
                raise SlurmError(f"job {job_id} not {what} after {timeout} s: {info.get('JobState')} "
                                 f"(Reason={info.get('Reason')}); output:\n{self.output(job_id)}")
            time.sleep(0.2)

    def wait_for_state(self, job_id: str, states: str | tuple[str, ...], timeout: float = 45) -> dict[str, str]:
        states = (states,) if isinstance(states, str) else tuple(states)
        return self.wait_for(job_id, lambda info: info["JobState"] in states, timeout, f"in {'/'.join(states)}")

    def wait_finished(self, job_id: str, timeout: float = 45) -> dict[str, str]:
        """Wait until the job ends for good (a requeued job counts as pending again); returns its final record."""
        return self.wait_for(job_id, lambda info: info["JobState"] in FINISHED_STATES, timeout, "finished")

    def signal(self, job_id: str, signal: str = "USR1", *, batch: bool = False, full: bool = False) -> None:
        """``scancel --signal=SIG``: by default to the job's steps (srun tasks) only; ``batch=True``: to the batch
        shell only; ``full=True``: to the batch shell and every step."""
        args = ["scancel", f"--signal={signal}"]
        if batch:
            args.append("--batch")
        if full:
            args.append("--full")
        result = _run(*args, str(job_id))
        if result.returncode != 0:
            raise SlurmError(f"{' '.join(args)} {job_id} failed: {result.stderr.strip()}")

    def requeue(self, job_id: str) -> None:
        result = _run("scontrol", "requeue", str(job_id))
        if result.returncode != 0:
            raise SlurmError(f"scontrol requeue {job_id} failed: {result.stderr.strip()}")

    def output(self, job_id: str) -> str:
        path = self._outputs.get(job_id)
        return path.read_text() if path is not None and path.exists() else ""

    def wait_for_file(self, path: str | os.PathLike, job_id: str | None = None, timeout: float = 45) -> str:
        """Wait until ``path`` exists and is not empty; fails early when ``job_id`` ends first."""
        path = Path(path)
        deadline = time.monotonic() + timeout
        while not (path.exists() and path.stat().st_size):
            if job_id is not None and self.state(job_id) in FINISHED_STATES | {None}:
                if path.exists() and path.stat().st_size:
                    break
                raise SlurmError(f"job {job_id} ended ({self._last_seen.get(job_id, {}).get('JobState')}) "
                                 f"without writing {path}; output:\n{self.output(job_id)}")
            if time.monotonic() > deadline:
                raise SlurmError(f"{path} not written after {timeout} s; output:\n"
                                 f"{self.output(job_id) if job_id else ''}")
            time.sleep(0.2)
        return path.read_text()

    def cancel(self, job_id: str) -> None:
        _run("scancel", str(job_id))

    def close(self) -> None:
        """Cancel every job this object submitted that has not finished."""
        for job_id in self.jobs:
            if self.state(job_id) not in FINISHED_STATES | {None}:
                self.cancel(job_id)
