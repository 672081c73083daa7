"""Cluster backends behind one interface (``omegitops.cluster.base.Cluster``).

``open_cluster("sim:PATH")`` opens the simulated cluster kept in a JSON file;
``kube`` and ``kube:CONTEXT`` name a real cluster (not available yet).
"""

from __future__ import annotations

from omegitops.cluster.base import Cluster
from omegitops.errors import ClusterError, UsageError

DEFAULT_CLUSTER = "sim:.omegitops/cluster.json"

__all__ = ["DEFAULT_CLUSTER", "Cluster", "open_cluster", "sim_path"]


def sim_path(spec: str) -> str:
    """The file of a ``sim:PATH`` cluster spec; UsageError for any other spec."""
    if not spec.startswith("sim:") or not spec[len("sim:"):]:
        raise UsageError(f"--cluster {spec!r}: expected sim:PATH")
    return spec[len("sim:"):]


def open_cluster(spec: str = DEFAULT_CLUSTER) -> Cluster:
    """The cluster a ``--cluster`` value names; use it as a context manager."""
    if spec.startswith("sim:"):
        from omegitops.cluster.sim import SimCluster

        return SimCluster(sim_path(spec))
    if spec == "kube" or spec.startswith("kube:"):
        raise ClusterError(f"--cluster {spec}: the kube backend is not available yet; use sim:PATH")
    raise UsageError(f"--cluster {spec!r}: expected sim:PATH, kube or kube:CONTEXT")
