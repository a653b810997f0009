"""``slurm_cluster``: the real one-node SLURM cluster that ``.ci/slurm-cluster`` sets up, or a skip that says
why there is none. Jobs run in the test's ``tmp_path`` and whatever a test leaves running is cancelled."""

from __future__ import annotations

import pytest

from tests.slurm.cluster import SlurmCluster, unavailable_reason


@pytest.fixture(scope="session")
def _slurm_unavailable_reason():
    return unavailable_reason()


@pytest.fixture
def slurm_cluster(_slurm_unavailable_reason, tmp_path):
    if _slurm_unavailable_reason is not None:
        pytest.skip(_slurm_unavailable_reason)
    cluster = SlurmCluster(tmp_path / "slurm")
    try:
        yield cluster
    finally:
        cluster.close()
