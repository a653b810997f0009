"""`framework launch --nnodes 2` run twice on one machine: one 4-rank job, whose failures end both nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import IO

import pytest
import torch

import framework
from framework.runtime.worker_processes import free_port
from tests.cli.test_launch import ROOT, RUN, _environment
from tests.strategies.ddp_models import Regressor, plain_pytorch_weights, regression_data

SCRIPT = str(ROOT / "tests" / "cli" / "multi_node_run.py")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
# Far below the 30-minute collective timeout a lost rank would otherwise leave the others waiting for.
TIMEOUT_S = 150


def _two_nodes(*script_arguments: str, outputs: list[IO[str]] | None = None, port: int | None = None,
               ranks_per_node: int = 2) -> list[subprocess.Popen]:
    """Node 0 and node 1 of one launch, ``ranks_per_node`` ranks each, as two `framework launch` processes on this
    machine, their output (standard error too) piped, or written to ``outputs``."""
    port = str(port or free_port())
    environment = {**_environment(), "OMP_NUM_THREADS": "1"}
    return [
        subprocess.Popen([*RUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", str(ranks_per_node),
                          "--master-addr",
                          "127.0.0.1", "--master-port", port, SCRIPT, *script_arguments], cwd=ROOT, env=environment,
                         stdout=outputs[node] if outputs else subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)
    ]


def _outputs(nodes: list[subprocess.Popen], files: list[Path] | None = None) -> list[str]:
    """Each launcher's output (piped, or written to ``files``), once it has ended; a launcher still running after
    TIMEOUT_S is killed, and fails the test."""
    outputs = []
    for node in nodes:
        try:
            outputs.append(node.communicate(timeout=TIMEOUT_S)[0])
        except subprocess.TimeoutExpired:
            for launcher in nodes:
                launcher.kill()
            written = [file.read_text() for file in files] if files else [n.communicate()[0] for n in nodes]
            pytest.fail(f"a launcher still ran after {TIMEOUT_S} s: {written}")
    return [file.read_text() for file in files] if files else outputs


def _assert_no_rank_outlived_its_launcher(out: Path) -> None:
    for record in out.glob("pid-rank*"):
        with pytest.raises(ProcessLookupError):
            os.kill(int(record.read_text()), 0)


def test_two_nodes_of_two_ranks_train_as_one_process_with_the_quadrupled_batch(tmp_path):
    nodes = _two_nodes(str(tmp_path), ",".join(STRATEGIES))
    outputs = _outputs(nodes)
    # the whole of each node's output: pytest cuts a long list short, and a rank's crash at exit shows only there
    assert [node.returncode for node in nodes] == [0, 0], "".join(f"\n--- node {node} ---\n{text}"
                                                              for node, text in enumerate(outputs))
    torch.manual_seed(0)
    reference = plain_pytorch_weights(Regressor(), regression_data(), batch_size=8, epochs=1)  # 4 ranks x 2
    for strategy in STRATEGIES:
        for rank in range(4):
            seen = torch.load(tmp_path / f"{strategy}-rank{rank}.pt", weights_only=True)
            assert (seen["world_size"], seen["node_rank"], seen["local_rank"]) == (4, rank // 2, rank % 2)
            assert seen["global_step"] == 8  # 64 samples, 8 a step
            assert seen["sharded"] == (strategy in ("zero2", "zero3")), strategy
            for name, value in seen["weights"].items():
                torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=f"{strategy} {name}")
    # gloo's threads left to the interpreter's finalization can abort a rank that finished (SIGABRT at exit)
    if os.path.isdir("/proc/self/task"):  # where the ranks can list them
        for rank in range(4):
            assert "gloo" not in (tmp_path / f"rank{rank}.threads").read_text(), rank
    _assert_no_rank_outlived_its_launcher(tmp_path)


# (when, strategy, ranks per node). One job has two ranks a node: there the failing rank's sibling fails too, once
# gloo loses its peer, and the launchers must still name the one that failed first. In the other two, one rank a node
# shows as well that their failure ends the other node and is named there, with half the ranks to start; the 2 x 2
# layout itself trains in the test above.
FAILURES = {"in-a-ddp-step": ("2", "ddp", 2), "in-a-zero3-step": ("2", "zero3", 1),
            "before-the-process-group": ("start", "ddp", 1)}


@pytest.fixture(scope="module")
def failed_jobs(tmp_path_factory):
    """The three jobs, started together: much of each is waiting (for gloo to notice the lost peer, for the
    launchers' grace before they end the other node), and those waits overlap instead of adding up. Each launcher's
    output goes to a file: a pipe left unread while the test of another job runs could fill and block it."""
    ports = set()
    while len(ports) < len(FAILURES):  # free now, each job's own: two jobs at one address would join each other
        ports.add(free_port())
    jobs = {}
    for (name, (when, strategy, per_node)), port in zip(FAILURES.items(), sorted(ports), strict=True):
        folder = tmp_path_factory.mktemp(name)
        outputs = [open(folder / f"node{node}.out", "w") for node in (0, 1)]
        jobs[name] = folder, _two_nodes(str(folder), strategy, str(2 * per_node - 1), when, str(per_node),
                                        outputs=outputs, port=port, ranks_per_node=per_node)
        for output in outputs:
            output.close()
    yield jobs
    for _, nodes in jobs.values():
        for launcher in nodes:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_rank_raising_on_one_node_ends_both_nodes_naming_it(failed_jobs, failure):
    # Before the process group, the other node's ranks wait for the last rank outside any collective: only the
    # launchers' watch ends them. In a step, gloo tells them a peer is gone, and the store which one and why.
    folder, nodes = failed_jobs[failure]
    ranks = 2 * FAILURES[failure][2]
    last = ranks - 1
    outputs = _outputs(nodes, [folder / f"node{node}.out" for node in (0, 1)])
    assert all(node.returncode not in (0, None) for node in nodes), outputs
    first_failure = f"Rank {last} of {ranks} (node 1) failed first, with ValueError: boom on rank {last}"
    assert f"[framework launch] {first_failure}. Its traceback:" in outputs[0], outputs[0]
    assert f"\n    ValueError: boom on rank {last}\n" in outputs[0]  # its traceback, indented under that line
    assert f"[framework launch] {first_failure}." in outputs[1], outputs[1]
    _assert_no_rank_outlived_its_launcher(folder)


@pytest.fixture
def launched_as_rank_3_of_2_nodes(monkeypatch):
    """This process's environment as torchrun leaves it in rank 3 of 2 nodes x 2 (no process group is started)."""
    variables = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(("devices", "num_nodes", "message"), [
    (4, 1, r"started 4 processes \(WORLD_SIZE\), 2 on this node \(LOCAL_WORLD_SIZE\), but devices=4 and num_nodes=1 "
           r"make 4, 4 on each node"),
    (1, 4, r"2 on this node .*but devices=1 and num_nodes=4 make 4, 1 on each node"),
    (2, 1, r"started 4 processes .*but devices=2 and num_nodes=1 make 2"),
])
def test_devices_and_nodes_other_than_the_launchers_say_what_to_change(launched_as_rank_3_of_2_nodes, devices,
                                                                       num_nodes, message):
    with pytest.raises(framework.MisconfigurationError, match=message):
        framework.Runtime(accelerator="cpu", devices=devices, num_nodes=num_nodes)
    with pytest.raises(framework.MisconfigurationError, match="--nproc-per-node <devices> --nnodes <num_nodes>"):
        framework.Trainer(accelerator="cpu", devices=devices, num_nodes=num_nodes, logger=False)
