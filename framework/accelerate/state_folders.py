"""How a ``save_state`` folder comes to be under its name, and goes: only complete states are ever there.

A save killed at any instant (SIGKILL included) leaves the states saved before it whole and findable, and never
leaves a partial folder where ``load_state()`` looks. The protocol (the main process does every step but 2):

1. Clear what a killed save left: its staging folder, a deletion under way, and a replacement stopped between its
   two renames (the state set aside at ``<output_dir>.previous`` goes back to ``<output_dir>``).
2. Every process writes its files into the staging folder: ``<project_dir>/checkpoints.tmp/checkpoint_<i>`` under
   automatic naming (outside ``checkpoints/``, so that it holds committed states only, and Accelerate's own
   listing of it never sees a partial one), ``<output_dir>.partial`` for a named folder.
3. Once every process is done, write the commit marker ``state_complete.json`` (atomically): it lists the
   folder's entries, and a folder counts as complete only with it and every entry it lists (``is_complete_state``).
4. Rename the staging folder to its name. A folder already there (``save_state("latest")`` again) is first set
   aside at ``<output_dir>.previous``, deleted once the new one is in place: at every instant a complete state is
   at ``<output_dir>`` or ``<output_dir>.previous``, where ``complete_state_at`` finds it.
5. Drop the states past ``total_limit``, never the newest complete ones: each is renamed out of ``checkpoints/``
   first, then deleted, so that a kill while deleting leaves no partial folder under a state's name.
"""

from __future__ import annotations

import json
import os
import re
import shutil

from framework.io.checkpoint_storage import SET_ASIDE_SUFFIX
from framework.io.fs import write_atomic

COMMIT_FILE = "state_complete.json"
STAGING_DIR = "checkpoints.tmp"
PARTIAL_SUFFIX = ".partial"
_DELETING_SUFFIX = ".deleting"
_CHECKPOINT = re.compile(r"checkpoint_(\d+)$")


def is_complete_state(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a whole ``save_state`` state: its commit marker, written last, is there and every
    entry the marker lists is too. A folder without the marker (a save cut short) is not: False; naming it,
    ``load_state(folder)``, still loads it. (Accelerate's own folders are laid out differently and do not load.)"""
    try:
        with open(os.path.join(folder, COMMIT_FILE), encoding="utf-8") as handle:
            entries = json.load(handle)["entries"]
        return all(os.path.exists(os.path.join(folder, name)) for name in entries)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def numbered_states(project_dir: str | None) -> list[tuple[int, str]]:
    """The ``checkpoints/checkpoint_<i>`` folders of ``project_dir``, complete or not, by number."""
    parent = os.path.join(project_dir or ".", "checkpoints")
    if not os.path.isdir(parent):
        return []
    found = [(int(match.group(1)), os.path.join(parent, name)) for name in os.listdir(parent)
             if (match := _CHECKPOINT.match(name))]
    return sorted(found)


def newest_complete_state(project_dir: str | None) -> str | None:
    """The highest-numbered complete ``checkpoints/checkpoint_<i>`` of ``project_dir`` (what ``load_state()``
    loads under automatic naming); None when there is none."""
    return next((path for _, path in reversed(numbered_states(project_dir)) if is_complete_state(path)), None)


def complete_state_at(path: str | os.PathLike) -> str | None:
    """``path`` when it is a folder; else the complete state a replacement killed between its renames left set
    aside at ``path.previous``; else None. (A folder named explicitly is loaded even without a marker.)"""
    path = os.fspath(path).rstrip("/")
    if os.path.isdir(path):
        return path
    previous = path + SET_ASIDE_SUFFIX
    return previous if is_complete_state(previous) else None


def state_number(folder: str) -> int | None:
    """``i`` of a ``checkpoint_<i>`` folder (set aside or not), else None."""
    name = os.path.basename(os.path.normpath(folder)).removesuffix(SET_ASIDE_SUFFIX)
    found = _CHECKPOINT.match(name)
    return int(found.group(1)) if found else None


def staging_folder(target: str, automatic: bool) -> str:
    """Where the state for ``target`` is written before it is committed (step 2)."""
    if automatic:  # target is <project_dir>/checkpoints/checkpoint_<i>
        project_dir = os.path.dirname(os.path.dirname(target))
        return os.path.join(project_dir, STAGING_DIR, os.path.basename(target))
    return target + PARTIAL_SUFFIX


def begin_save(target: str, staging: str) -> None:
    """Step 1, then an empty ``staging`` folder (main process)."""
    parent = os.path.dirname(staging)
    # Under automatic naming the whole staging area holds only leftovers of killed saves and deletions.
    shutil.rmtree(parent if os.path.basename(parent) == STAGING_DIR else staging, ignore_errors=True)
    shutil.rmtree(target + _DELETING_SUFFIX, ignore_errors=True)
    previous = target + SET_ASIDE_SUFFIX
    if os.path.lexists(previous):
        if is_complete_state(target) or not is_complete_state(previous):  # only step 4's deletion was missed
            _remove(previous, target + _DELETING_SUFFIX)
        else:  # killed between the renames of step 4: the set-aside state is the one to keep
            if os.path.lexists(target):
                _remove(target, target + _DELETING_SUFFIX)
            os.rename(previous, target)
    os.makedirs(staging)


def commit(staging: str, target: str) -> None:
    """Steps 3 and 4: mark the complete ``staging`` folder and rename it to ``target`` (main process, once every
    process has written its files)."""
    entries = sorted(os.listdir(staging))
    write_atomic(os.path.join(staging, COMMIT_FILE),
                 lambda handle: handle.write(json.dumps({"entries": entries}).encode()))
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    if os.path.isdir(target) and not os.path.islink(target) and not os.listdir(target):
        os.rmdir(target)  # an empty folder holds no state to keep
    if not os.path.lexists(target):
        os.rename(staging, target)  # the commit
        return
    previous = target + SET_ASIDE_SUFFIX
    os.rename(target, previous)
    os.rename(staging, target)  # the commit
    _remove(previous, target + _DELETING_SUFFIX)


def drop_old_states(project_dir: str | None, total_limit: int) -> None:
    """Step 5: keep the ``total_limit`` newest complete states and whatever is newer than the oldest of them;
    delete the folders older than it (main process)."""
    states = numbered_states(project_dir)
    complete = [number for number, path in states if is_complete_state(path)]
    if total_limit < 1 or len(complete) <= total_limit:
        return
    oldest_kept = complete[-total_limit]
    trash = os.path.join(project_dir or ".", STAGING_DIR)
    for number, path in states:
        if number < oldest_kept:
            _remove(path, os.path.join(trash, f"{os.path.basename(path)}{_DELETING_SUFFIX}"))


def end_save(staging: str) -> None:
    """Remove the emptied staging area of automatic naming, so that only ``checkpoints/`` stays (main process)."""
    parent = os.path.dirname(staging)
    if os.path.basename(parent) == STAGING_DIR:
        try:
            os.rmdir(parent)
        except OSError:  # not empty: a deletion left something; the next save clears it
            pass


def _remove(path: str, away: str) -> None:
    """Delete ``path``: first renamed to ``away`` at once, so a kill while deleting leaves no part under its name."""
    shutil.rmtree(away, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(away)), exist_ok=True)
    os.rename(path, away)
    if os.path.isdir(away) and not os.path.islink(away):
        shutil.rmtree(away)
    else:
        os.remove(away)
