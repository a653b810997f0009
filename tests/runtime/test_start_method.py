"""How the ranks of a run no launcher started come to exist, on a machine without GPUs and on one with them.

Where CUDA should look present, the processes run with ``tests/fake_cuda`` on PYTHONPATH: every process
then sees two CUDA devices, as on a GPU machine, and any call that would initialise CUDA raises, as in a
rank forked there. Where it should look absent, ``CUDA_VISIBLE_DEVICES=""`` hides any real device.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from framework.errors import MisconfigurationError
from framework.runtime.relaunch import script_command
from framework.runtime.start_method import choose_start_method

ROOT = Path(__file__).resolve().parents[2]
PROBE = str(ROOT / "tests" / "runtime" / "start_method_probe.py")
RUN = str(ROOT / "tests" / "runtime" / "every_strategy_run.py")
REFUSAL = "A CUDA call in a process that must not use CUDA"


def _environment(cuda_present: bool) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
    paths = [str(ROOT / "tests" / "fake_cuda"), str(ROOT)] if cuda_present else [str(ROOT)]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    if not cuda_present:
        environment["CUDA_VISIBLE_DEVICES"] = ""
    return environment


def _run(command: list[str], cuda_present: bool, stdin: str | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, input=stdin, capture_output=True, text=True, cwd=ROOT,
                          env=_environment(cuda_present), timeout=timeout)


# -- the rule ---------------------------------------------------------------------------------------------

SITUATIONS = {
    "script": ([sys.executable, PROBE], None),
    "pytest": ([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", PROBE], None),
    "repl": ([sys.executable, "-q", "-i"], "from tests.runtime.start_method_probe import report\nreport()\n"),
}


@pytest.mark.parametrize("situation", list(SITUATIONS))
@pytest.mark.parametrize("cuda_present", [False, True], ids=["no_cuda", "cuda_present"])
def test_auto_forks_only_without_cuda_devices_and_else_reruns_a_script_or_uses_a_forkserver(situation, cuda_present):
    command, stdin = SITUATIONS[situation]
    done = _run(command, cuda_present, stdin)
    decisions = [line.split("decisions:")[1].split() for line in done.stdout.splitlines() if "decisions:" in line]
    assert len(decisions) == 1, done.stdout + done.stderr
    if not cuda_present:
        expected = "fork"  # a backward pass starts no device threads where there are no devices
    else:
        expected = "popen" if situation == "script" else "forkserver"  # before a backward as after it
    assert decisions[0] == [expected, expected]


def test_under_pytest_there_is_no_script_to_run_again():
    assert script_command() is None
    assert choose_start_method("spawn", script_available=False) == "spawn"
    with pytest.raises(MisconfigurationError, match=r"start_method='popen' runs the script again .* Use start_method"):
        choose_start_method("popen", script_available=False)
    with pytest.raises(MisconfigurationError, match=r"start_method='thread' is not supported. Accepted: 'auto'"):
        choose_start_method("thread", script_available=True)


FORK_TWICE = """
import framework
from tests.helpers import Regressor, loader, quiet_trainer
for _ in range(2):
    trainer = quiet_trainer(devices=2, strategy="ddp_fork", max_epochs=1)
    trainer.fit(Regressor(), loader())
    print("steps", trainer.global_step)
"""


def test_a_fork_asked_for_where_cuda_devices_exist_warns_once_naming_the_hazard():
    done = _run([sys.executable, "-c", FORK_TWICE], cuda_present=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("steps 4") == 2  # forked, as asked
    assert done.stderr.count("Forking the ranks as asked") == 1
    assert "this machine has 2 CUDA devices" in done.stderr and "autograd's per-device threads" in done.stderr


# -- every strategy, with CUDA looking present ---------------------------------------------------------------

@pytest.fixture(scope="module")
def forked_results(tmp_path_factory) -> dict:
    """What every_strategy_run.py gives with forked ranks, on a machine without CUDA devices.

    The ddp_spawn run's reference is DDP forked too: spawned ranks train as forked ones do without CUDA
    (tests/strategies/test_ddp.py::test_spawned_and_forkserver_ranks_train_like_forked_ones...), and spawning
    here, three times (fit, validate, predict), took more than half of this fixture's time."""
    out = tmp_path_factory.mktemp("forked")
    done = _run([sys.executable, RUN, str(out), "--forked"], cuda_present=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return torch.load(out / "results.pt", weights_only=True)


# From a function, the ranks of each fit, validate and predict come from a forkserver (spawned, for ddp_spawn), each
# run paying for their start: one run of each kind of rank start and sharding (ddp forkserver, ddp_spawn spawned,
# zero3 with sharded parameters, zero3 offloaded, the Runtime's own loop) is enough there, since precisions, zero1
# and zero2 are the same code in a rank however it started; the script and launched runs cover them all.
FUNCTION_RUNS = [("ddp", "32-true"), ("ddp_spawn", "16-mixed"), ("zero3", "bf16-mixed"), ("zero3_offload", "32-true")]


@pytest.fixture(scope="module")
def script_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """every_strategy_run.py run as a script where CUDA looks present: ranks 1.. run the script again. It ends with a
    Trainer(devices=1), for the test of a later trainer on those ranks, which then needs no run of its own."""
    out = tmp_path_factory.mktemp("script")
    return _run([sys.executable, RUN, str(out), "--then-one-device"], cuda_present=True), out


HOW = {
    "script": None,  # the script_run fixture
    "function": lambda out: [sys.executable, "-c", f"from tests.runtime.every_strategy_run import main; "
                             f"main({out!r}, runs={FUNCTION_RUNS!r})"],  # no script to run again: a forkserver
    "launched": lambda out: [sys.executable, "-m", "framework", "launch", "--nproc-per-node", "2", RUN, out],
}


@pytest.mark.parametrize("how", list(HOW))
def test_every_strategy_fits_two_cpu_ranks_where_cuda_looks_present_as_forked_ranks_do(how, tmp_path, forked_results,
                                                                                        request):
    if how == "script":
        done, out = request.getfixturevalue("script_run")
    else:
        done, out = _run(HOW[how](str(tmp_path)), cuda_present=True), tmp_path
    assert done.returncode == 0, done.stdout + done.stderr
    results = torch.load(out / "results.pt", weights_only=True)
    expected_runs = [*(f"{strategy} {precision}" for strategy, precision in FUNCTION_RUNS), "own loop, zero3"]
    assert list(results) == (expected_runs if how == "function" else list(forked_results))
    for run, result in results.items():
        expected = forked_results[run]
        for name, value in result["weights"].items():
            torch.testing.assert_close(value, expected["weights"][name], rtol=0, atol=0, msg=f"{run}: {name}")
        if run.startswith("own loop"):
            continue
        assert (result["val_loss"], result["best"], result["global_step"]) == (
            expected["val_loss"], expected["best"], expected["global_step"]), run
        # the Module holds whole weights after fit as the caller of forked ranks does, but where a launcher ran it
        assert result["sharded"] == (how == "launched" and run.startswith(("zero2", "zero3")))
        if how != "launched":  # launched ranks each return their own part, as in Lightning
            torch.testing.assert_close(result["predictions"], expected["predictions"], rtol=0, atol=0)


def test_a_cuda_call_in_a_cpu_run_is_caught_where_cuda_looks_present(tmp_path):
    done = _run([sys.executable, RUN, str(tmp_path), "--touch-cuda"], cuda_present=True)
    assert done.returncode != 0
    assert REFUSAL in done.stderr


def test_a_later_trainer_in_a_script_run_again_is_told_it_runs_on_the_ranks_the_first_one_started(script_run):
    done, _ = script_run
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused: This process is one of 2 ranks that an earlier fit") == 2  # on both ranks
    assert "give them the same devices and num_nodes" in done.stdout
