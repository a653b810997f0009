"""The whole suite (``pytest`` with no paths, as the README and CI run it) is shared out to two processes with
pytest-xdist, a test file to a process. Every test runs in its own empty working directory, so default log and
checkpoint folders (``lightning_logs/``, ``checkpoints/``) never land in the repository or leak between tests, and
leaves the variables MLflow sets as it found them; ``memory_root`` is a fresh folder on fsspec's in-memory
filesystem."""

from __future__ import annotations

import compileall
import os
import sys
import uuid

import fsspec
import pytest

from tests.docs.site_build import ROOT, SiteBuild, shared_folder

WORKERS = 2
_DOCS_SITE_BUILD = pytest.StashKey[SiteBuild]()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest`` alone runs as ``pytest -n 2 --dist loadfile``: most tests spend their time in one process (a
    launched rank, a script) and leave the second core idle. Named paths, ``-n``, ``--pdb``, ``-s`` or
    ``--collect-only`` keep the one process a person debugging expects; ``-n 0`` asks for it outright."""
    chosen = getattr(config.option, "numprocesses", "no xdist")  # -p no:xdist leaves no such option
    if (chosen is None and config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and not hasattr(config, "workerinput") and len(os.sched_getaffinity(0)) >= WORKERS
            and not (config.option.usepdb or config.option.collectonly or config.option.capture == "no")):
        config.option.numprocesses = WORKERS
        if config.option.dist == "no":
            config.option.dist = "loadfile"  # a file's module-scoped fixtures (a browser, a launched run) made once


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker computes on its share of the cores: two workers with a thread per core each, on as many
    cores, spend their time waiting for each other's threads (the in-process tests took a tenth longer so, on 2
    cores). The processes its tests start (scripts, launchers and their ranks) inherit that share through
    OMP_NUM_THREADS, as ``framework launch`` gives its ranks theirs: a script's idle OpenMP thread spins on a core the
    other worker needs (the tutorials' tests used 8% more CPU without it, the GPU benchmark's twice as much). Tests of
    the launchers' own share take the variable out. The run itself (a plain one, or xdist's controller) compiles the
    repository's code once first."""
    if hasattr(config, "workerinput"):
        import torch

        share = max(1, len(os.sched_getaffinity(0)) // config.workerinput["workercount"])
        torch.set_num_threads(share)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
    else:
        _compile_once()
        if hasattr(config.option, "loadscopereorder"):
            config.option.loadscopereorder = False  # xdist would hand out the files with most tests first instead


def _compile_once() -> None:
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, set on this project's machines), each process
    the suite starts (ranks, launchers, scripts: well over a thousand) compiled the package from source again,
    about a quarter of a second of CPU each. The run compiles it once, into the ``__pycache__`` folders Python reads
    anyway (git ignores them); installed packages have theirs from pip. Not PYTHONPYCACHEPREFIX: every process
    would then look there for torch's bytecode too, and compile torch."""
    if sys.dont_write_bytecode:
        for folder in ("framework", "tests", "tutorials", "benchmarks"):
            compileall.compile_dir(ROOT / folder, quiet=2)


# The files that take longest, longest first (summed test durations of a `pytest -n 2` run on 2 cores, 2026-12-06:
# 183 s down to 38 s). A worker starts them before the rest, so the run does not end with one worker still in one of
# them while the other has nothing left.
LONGEST_FILES = (
    "tests/runtime/test_start_method.py", "tests/trainer/test_restarts.py", "tests/strategies/test_sharded.py",
    "tests/test_tutorials.py", "tests/strategies/test_ddp.py", "tests/test_benchmarks.py",
    "tests/cli/test_launch_restarts.py", "tests/as_lightning/test_switch.py", "tests/strategies/test_deepspeed.py",
    "tests/slurm/test_preemption.py", "tests/accelerate/test_examples.py", "tests/accelerate/test_deepspeed.py",
    "tests/accelerate/test_launched.py", "tests/cli/test_launch.py", "tests/cli/test_multi_node.py",
    "tests/strategies/test_model_parallel.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the longest files first (xdist hands files out in the order its workers collected them,
    every worker sorting alike, once ``pytest_configure`` has turned off its own reordering by number of tests); a
    run in one process keeps the order of the folders."""
    if hasattr(config, "workerinput"):
        place = {path: index for index, path in enumerate(LONGEST_FILES)}
        items.sort(key=lambda item: place.get(item.nodeid.split("::")[0], len(place)))  # stable: the rest as found


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """In a ``pytest -n N`` run, the controller (which runs no test) builds the docs site once for every worker,
    from when the first worker has collected, beside the tests that come before tests/docs."""
    config = node.config
    if any(test_id.startswith("tests/docs/") for test_id in ids) and _DOCS_SITE_BUILD not in config.stash:
        build = config.stash[_DOCS_SITE_BUILD] = SiteBuild(shared_folder(node.workerinput["testrunuid"]), niced=False)
        config.add_cleanup(build.stop)


@pytest.fixture(autouse=True)
def _in_an_empty_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


# Written into os.environ by the tools the tests run, outside monkeypatch: MLflow's set_tracking_uri (called by
# MLFlowLogger) sets the tracking URI, so an Accelerate example launched later by a test in the same process (under
# `pytest -n 2`, whichever test its worker ran before) logged into that test's folder instead of its own.
# Not every variable yet: others leak too (seed_everything's PL_GLOBAL_SEED, what in-process launches set), but in the
# one full run that restored them all, the fork-restart test of tests/trainer/test_restarts.py hung once (not seen
# in six runs of it alone); the suite's launched tests keep the environment they have passed in until that is known.
_TOOLS_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE")


@pytest.fixture(autouse=True)
def _tools_variables_as_found():
    found = {name: os.environ.get(name) for name in _TOOLS_VARIABLES}
    yield
    for name, value in found.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def memory_root():
    root = f"memory://test-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)
