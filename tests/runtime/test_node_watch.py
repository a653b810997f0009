"""What a ``framework launch`` launcher prints when one of its ranks ended first without a record of its error."""

from __future__ import annotations

import pytest

from framework.runtime.peer_failure import NodeWatch
from framework.runtime.worker_processes import free_port


@pytest.mark.parametrize(("exit_code", "said"), [(-6, "it was killed by SIGABRT"), (3, "it exited with code 3")])
def test_a_rank_that_ended_without_its_error_is_named_with_how_it_ended(exit_code, said, capsys):
    watch = NodeWatch("127.0.0.1", free_port(), nodes=1, node_rank=0, hosts_store=True)
    watch.start()
    try:
        watch.report_failure({1: exit_code})
    finally:
        watch.finish()
    assert f"[framework launch] Rank 1 failed first: {said} (its own output is in its node's log)." in (
        capsys.readouterr().err)
