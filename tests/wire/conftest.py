"""Fixtures of the wire tests: the API double on 127.0.0.1, and KubeCluster pointed at it."""

from __future__ import annotations

import pytest
from apiserver import ApiServerDouble

from omegitops.cluster.kube import KubeCluster, RetryPolicy, plain_client


@pytest.fixture
def api():
    with ApiServerDouble() as server:
        yield server


@pytest.fixture
def sleeps() -> list[float]:
    """The back-off waits the backend asked for (recorded, not slept)."""
    return []


@pytest.fixture
def kube(api, sleeps):
    """A KubeCluster on the double, without the Lease, retrying without sleeping."""
    client = plain_client(api.url)
    cluster = KubeCluster(api_client=client, lease=False,
                          retry=RetryPolicy(attempts=3, backoff=0.2, sleep=sleeps.append),
                          timeout=2.0)
    yield cluster
    client.close()
