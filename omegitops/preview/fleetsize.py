"""The pods a repository needs at its peak, for a simulated cluster sized to fit it.

A forecast runs the real passes on a simulated cluster; on the default one (eight
8-GPU nodes) a 100-service repository forecasts hundreds of failures that a real
cluster sized for its fleet would never have. ``peak_pods`` renders, with the
same code a pass uses, every pod each managed component needs while it rolls:
its Instances plus the surge its budget allows (all of them when SurgeThenDrain
sets no maxSurge). ``sim.sizing.size_for`` turns them into node pools. Pure.
"""

from __future__ import annotations

from typing import Any

from omegitops.capacity.sizing import NodePool, size_for
from omegitops.manifests.load import ServiceComponent
from omegitops.model.budgets import scaled_value
from omegitops.render.desired import build_desired
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.resolve import SURGE_THEN_DRAIN


def peak_instances(item: ServiceComponent) -> int:
    """Instances of one component at the height of a rollout."""
    lifecycle = item.lifecycle
    replicas = lifecycle.replicas
    if lifecycle.strategy != SURGE_THEN_DRAIN:
        return replicas
    surge = scaled_value(lifecycle.settings.max_surge, replicas)
    return replicas + (replicas if surge is None else min(surge, replicas))


def peak_pods(items: list[ServiceComponent]) -> list[dict[str, Any]]:
    """One rendered pod per pod slot the managed components need at their peak."""
    pods: list[dict[str, Any]] = []
    for item in items:
        if not item.lifecycle.managed or not item.lifecycle.replicas:
            continue
        try:
            desired = build_desired(item.service.data,
                                    item.runtime.data if item.runtime else None,
                                    item.lifecycle, [], None, item.operator)
        except Exception:  # noqa: BLE001, S112 - the plan names this component's error itself
            continue
        spec = PodSpecInput(desired.namespace, desired.isvc, desired.component,
                            desired.revision, desired.templates,
                            desired.lifecycle.worker_size, desired.gang, desired.pod_metadata)
        one = instance_pods(spec, 0, 1)
        pods.extend(one * peak_instances(item))
    return pods


def sized_pools(*fleets: list[ServiceComponent]) -> list[NodePool]:
    """Node pools that hold every fleet given at its peak at once (a plan's base and
    head both: while one rolls into the other, both kinds of pods run)."""
    return size_for([pod for fleet in fleets for pod in peak_pods(fleet)])
