"""The ``cluster`` fixture: a fresh simulated cluster in tmp_path, open for the test."""

from __future__ import annotations

import pytest

from omegitops.cluster.sim import SimCluster


@pytest.fixture
def cluster(tmp_path):
    # GPU nodes only, so that the scheduler's messages count eight nodes.
    SimCluster.init(tmp_path / "cluster.json", cpu_nodes=0)
    with SimCluster(tmp_path / "cluster.json") as sim:
        yield sim
