"""Cluster backends behind one interface (``omegitops.cluster.base.Cluster``).

``open_cluster("sim:PATH")`` opens the simulated cluster kept in a JSON file;
``kube`` and ``kube:CONTEXT`` open a real cluster through kubeconfig (that
context, or the current one) or the in-cluster service account;
``OMEGITOPS_KUBE_API=http://HOST:PORT`` points ``kube`` at a plain-HTTP API
server instead (the wire tests' double, ``kubectl proxy``). ``shard``
(``omegitops.app.shards.Shard``) scopes the lists to its namespaces and, on ``kube``,
takes that shard's own Lease.
"""

from __future__ import annotations

from omegitops.cluster.base import Cluster
from omegitops.util.errors import InputError, UsageError

DEFAULT_CLUSTER = "sim:.omegitops/cluster.json"

__all__ = ["DEFAULT_CLUSTER", "Cluster", "open_cluster", "sim_path"]


def sim_path(spec: str) -> str:
    """The file of a ``sim:PATH`` cluster spec; UsageError for any other spec."""
    if not spec.startswith("sim:") or not spec[len("sim:"):]:
        raise UsageError(f"--cluster {spec!r}: expected sim:PATH")
    return spec[len("sim:"):]


def open_cluster(spec: str = DEFAULT_CLUSTER, exclusive: bool = True,
                 shard=None) -> Cluster:
    """The cluster a ``--cluster`` value names; use it as a context manager.

    ``exclusive=False`` is for commands that only read: on a real cluster they
    do not take the run's Lease, so they work while a job runs; on ``sim:`` they
    never create a cluster, so a mistyped path is an error, not an empty cluster.
    """
    if spec.startswith("sim:"):
        from pathlib import Path

        from omegitops.cluster.sim import SimCluster

        path = sim_path(spec)
        if not exclusive and not Path(path).is_file():
            raise InputError(f"{spec}: no simulated cluster there (reconcile or "
                             "`omegitops sim init` makes one)")
        return _scoped(SimCluster(path), shard)
    if spec == "kube" or spec.startswith("kube:"):
        from omegitops.util.extras import require

        require("kubernetes", "--cluster kube")
        from omegitops.cluster.kube import KubeCluster

        if shard is None:
            return KubeCluster(spec[len("kube:"):] or None, lease=exclusive)
        return _scoped(KubeCluster(spec[len("kube:"):] or None, lease=exclusive,
                                   lease_name=shard.lease_name), shard)
    raise UsageError(f"--cluster {spec!r}: expected sim:PATH, kube or kube:CONTEXT")


def _scoped(cluster: Cluster, shard) -> Cluster:
    """``--shard``: the cluster lists only the shard's namespaces
    (``omegitops.app.shards``)."""
    if shard is not None:
        cluster.namespace_scope = shard.owns
    return cluster
