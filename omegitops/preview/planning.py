"""The plan of every component, made from one observation of a cluster; no writes."""

from __future__ import annotations

from omegitops.app.passes import component_key, observe, plan_each, unaccounted_replicas
from omegitops.cluster.base import Cluster
from omegitops.manifests.load import ServiceComponent
from omegitops.preview.planview import PlannedComponent, Removal

# What a plan is made of: each component of the repository, planned; and the ones the
# cluster runs that the repository no longer has.
Planned = tuple[list[PlannedComponent], list[Removal]]


def plan_components(cluster: Cluster, items: list[ServiceComponent]) -> Planned:
    """Observe once and plan every component, keeping what the plan was made from
    (the desired templates and observed revisions the revision diff needs); no writes.
    A component whose plan raises carries the error instead, and the others go on.
    Second: the components the cluster runs that the repository no longer has."""
    now = cluster.now()
    seen = observe(cluster)
    wanted = {component_key(item) for item in items if item.lifecycle.managed}
    removed = [Removal.of(replica) for _, replica, _ in unaccounted_replicas(seen, wanted)]
    planned: list[PlannedComponent] = []
    for item, made, error in plan_each(seen, items, now):
        if error is not None:
            planned.append(PlannedComponent(item, error=error))
        else:
            planned.append(PlannedComponent(item, *(made or ())))
    return planned, removed
