"""Checkpoint files and directories: the default directory, whether it can be written to, what a killed run
left, file-name templates, ``last`` links."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from typing import Any

import torch

from framework import console
from framework.io.fs import (
    filesystem,
    is_dir,
    leftover_temporaries,
    make_dirs,
    names_in,
    remove,
    write_bytes_atomic,
)
from framework.protocols import TrainerLike


def resolved_dirpath(dirpath: str | os.PathLike) -> str:
    """A local directory as an absolute real path (as Lightning reports it); any other URL unchanged."""
    dirpath = os.fspath(dirpath)
    if "://" in dirpath and not dirpath.startswith("file://"):
        return dirpath
    return os.path.realpath(os.path.expanduser(dirpath.removeprefix("file://")))


def default_dirpath(trainer: TrainerLike) -> str:
    """``<save_dir>/<name>/<version>/checkpoints`` of the logger, else ``<default_root_dir>/checkpoints``."""
    loggers = [logger for logger in trainer.loggers if logger.save_dir is not None or logger.log_dir is not None]
    if not loggers:
        return os.path.join(trainer.default_root_dir, "checkpoints")
    logger = loggers[0]
    save_dir = logger.save_dir or trainer.default_root_dir  # the first logger's, with several too (Lightning 2.6)
    version = logger.version
    version = version if isinstance(version, str) else f"version_{version}"
    return os.path.join(save_dir, str(logger.name or ""), version, "checkpoints")


def write_problem(dirpath: str) -> str | None:
    """Why checkpoints cannot be written to ``dirpath`` (found at set-up, not after an hour of training), or None.

    The directories the probe had to create are removed again: they appear with the first checkpoint,
    so a run that saves nothing (or only sets up) leaves no empty folders behind, as in Lightning.
    """
    fs, inner = filesystem(dirpath)
    missing = []  # deepest first
    path = inner.rstrip("/")
    while path and not fs.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        path = parent if parent != path else ""
    probe = os.path.join(dirpath, f".write-test-{uuid.uuid4().hex[:8]}")
    try:
        make_dirs(dirpath)
        write_bytes_atomic(probe, b"")
        remove(probe)
    except OSError as error:
        return str(error)
    finally:
        _remove_empty(fs, missing)
    return None


def _remove_empty(fs: Any, directories: list[str]) -> None:
    for directory in directories:
        try:
            if fs.exists(directory) and not fs.ls(directory, detail=False):
                fs.rmdir(directory)
        except (OSError, NotImplementedError):  # in use by another process by now, or no directories here
            return


def holds_checkpoints(dirpath: str, extension: str) -> bool:
    """Whether ``dirpath`` holds files ending with ``extension``."""
    return is_dir(dirpath) and any(name.endswith(extension) for name in names_in(dirpath))


def remove_unfinished_writes(dirpath: str, extension: str) -> None:
    """Delete the temporaries of saves a killed run left unfinished (each as large as a checkpoint)."""
    leftovers = leftover_temporaries(dirpath, extension)
    for path in leftovers:
        remove(path)
    if leftovers:
        console.info(f"Removed {len(leftovers)} unfinished checkpoint write(s) of an interrupted run from "
                     f"{dirpath}: {', '.join(os.path.basename(path) for path in leftovers)}")


def fill_template(template: str, metrics: dict[str, Any], equals: str, insert_names: bool) -> str:
    """``template`` filled with ``metrics``: ``"{epoch}-{val_loss:.2f}"`` gives ``epoch=3-val_loss=0.12``
    (``equals`` is "=", ``insert_names`` puts each name before its value); a missing metric counts as 0."""
    metrics = dict(metrics)
    # "{val_loss:.2f}" -> "val_loss={0[val_loss]:.2f}": names may hold dots and slashes this way
    groups = sorted(set(re.findall(r"(\{.*?)[:\}]", template)), key=len, reverse=True)
    for group in groups:
        name = group[1:]
        shown = name + equals if insert_names else ""
        template = template.replace(group, shown + "{0[" + name + "]")
        metrics.setdefault(name, torch.tensor(0))
    return template.format(metrics)


def versions_of(dirpath: str, name: str, extension: str) -> list[str]:
    """The paths of ``<name>.ckpt``, ``<name>-v1.ckpt`` ... in ``dirpath``."""
    pattern = re.compile(rf"^{re.escape(name)}(-v\d+)?{re.escape(extension)}$")
    return [os.path.join(dirpath, entry) for entry in names_in(dirpath) if pattern.match(entry)]


def link(target: str, linkpath: str) -> None:
    """Make ``linkpath`` a link to ``target`` (relative, so the directory can move), replacing it atomically."""
    temporary = f"{linkpath}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        os.symlink(os.path.relpath(target, os.path.dirname(linkpath)), temporary)
    except OSError:  # no symbolic links here (Windows without the privilege): a copy does the job
        shutil.copyfile(target, temporary)
    os.replace(temporary, linkpath)


def removable(previous: str, current: str, resumed_from: str | None, dirpath: str) -> bool:
    """Whether ``previous`` may be deleted: only a file of ``dirpath``, never the one being written (``current``)
    nor one in the directory the run resumed from."""
    if previous == current or (resumed_from is not None
                               and resolved_dirpath(previous) == resolved_dirpath(resumed_from)):
        return False
    directory = dirpath.rstrip("/") + "/"
    return previous.startswith(directory) or os.path.abspath(previous).startswith(os.path.abspath(directory))


def write_scores(best_k_models: dict[str, Any], path: str | os.PathLike) -> None:
    """``best_k_models`` (path: score) as YAML at ``path``, written atomically."""
    import yaml

    scores = {file: float(score) for file, score in best_k_models.items()}
    write_bytes_atomic(path, yaml.safe_dump(scores).encode("utf-8"))
