"""The Services a component needs, and a PodGroup per multi-pod Instance.

The routing Service ``{isvc}-{component}`` selects only entry pods (the
single pod or a gang's leader, never a worker) and publishes them only while
they are Ready, which includes the ``ome.io/serving`` gate. A gang also gets
a headless Service that lists its pods as soon as they have an address, so
the workers can reach the leader while they all start.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from omegitops.model.actions import ApplyObject, DeleteObject
from omegitops.model.state import Json
from omegitops.render.instance import headless_name
from omegitops.render.templates import (
    LABEL_COMPONENT,
    LABEL_ENTRY,
    LABEL_ISVC,
    LEADER,
    MANAGED_BY,
    MANAGER,
)

PODGROUP_API = "scheduling.x-k8s.io/v1alpha1"

PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"



def _labels(desired: Any) -> dict[str, str]:
    return {LABEL_ISVC: desired.isvc, LABEL_COMPONENT: desired.component, MANAGED_BY: MANAGER}


def _ports(desired: Any) -> list[Json]:
    runner = LEADER if desired.gang else "default"
    containers = desired.templates[runner]["spec"].get("containers") or []
    ports = []
    for port in (containers[0].get("ports") or []) if containers else []:
        number = port.get("containerPort")
        if isinstance(number, int):
            entry = {"name": port.get("name") or f"port-{number}", "port": number,
                     "targetPort": number, "protocol": port.get("protocol", "TCP")}
            ports.append(entry)
    return ports or [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]


def serving_selector(desired: Any) -> dict[str, str]:
    """The pods that serve: single pods, or the leaders of gangs (workers never do). The
    routing Service selects them, and the scale subresource names them to an HPA, as
    LeaderWorkerSet's hpaPodSelector does."""
    return {LABEL_ISVC: desired.isvc, LABEL_COMPONENT: desired.component, LABEL_ENTRY: "true"}


def desired_services(desired: Any) -> list[Json]:
    selector = {LABEL_ISVC: desired.isvc, LABEL_COMPONENT: desired.component}
    services = [{
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": desired.name, "namespace": desired.namespace,
                     "labels": _labels(desired)},
        "spec": {"selector": serving_selector(desired), "ports": _ports(desired)},
    }]
    if desired.gang:
        services.append({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": headless_name(desired.isvc, desired.component),
                         "namespace": desired.namespace, "labels": _labels(desired)},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": selector, "ports": _ports(desired)},
        })
    return services


BUDGET_KIND = "PodDisruptionBudget"


def plan_services(desired: Any, observed: dict[str, Json]) -> list[ApplyObject]:
    """Create missing Services and put back the fields we own when they drift."""
    actions = []
    for service in desired_services(desired):
        current = observed.get(service["metadata"]["name"])
        if current is None:
            actions.append(ApplyObject(service, exists=False))
            continue
        spec = current.get("spec") or {}
        if any(spec.get(key) != value for key, value in service["spec"].items()):
            merged = {**current, "spec": {**spec, **service["spec"]}}
            actions.append(ApplyObject(merged, exists=True))
    return actions


def podgroup_name(desired: Any, index: int) -> str:
    return f"{desired.name}-{index}"


def plan_podgroup(desired: Any, index: int, observed: dict[str, Json] | None,
                  members: int | None = None) -> ApplyObject | None:
    """A PodGroup for a gang, when the cluster has the kind, so that a gang-aware
    scheduler places all its pods or none: made with the Instance's pods, and set to
    their count again when a resized revision rebuilds the Instance."""
    if observed is None or not desired.gang:
        return None
    members = desired.pods_per_instance if members is None else members
    name = podgroup_name(desired, index)
    current = observed.get(name)
    if current is not None:
        if (current.get("spec") or {}).get("minMember") == members:
            return None
        return ApplyObject({**current, "spec": {**(current.get("spec") or {}),
                                                "minMember": members}}, exists=True)
    return ApplyObject({
        "apiVersion": PODGROUP_API,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": desired.namespace, "labels": _labels(desired)},
        "spec": {"minMember": members},
    }, exists=False)


def left_podgroups(desired: Any, observed: dict[str, Json] | None, rows: Container[int],
                   groups: dict[int, list[Json]]) -> list[str]:
    """PodGroups of Instances that are gone (no row, no pod left): a gang replaced by
    SurgeThenDrain, or one removed by a scale-down, takes its PodGroup with it."""
    prefix = f"{desired.name}-"
    left = []
    for name in sorted(observed or {}):
        index = name[len(prefix):] if name.startswith(prefix) else ""
        if index.isdigit() and int(index) not in rows and not groups.get(int(index)):
            left.append(name)
    return left


def plan_budget(desired: Any, observed: dict[str, Json] | None,
                max_unavailable: int | None, expected: int) -> list[ApplyObject | DeleteObject]:
    """The component's PodDisruptionBudget, where the cluster keeps one (``observed``
    not None): selecting its pods, with ``max_unavailable`` pods of the ``expected``
    (None: no budget, and one left from before goes). A drain's evictions that would
    take more pods than that down are refused, and the drain tries them again.

    omegitops' pods declare no controller, and for such pods the disruption controller
    cannot work out how many are expected, so a ``maxUnavailable`` above 0 would allow
    nothing at all: the budget says ``minAvailable`` (expected less what may go)
    instead. None may go is ``maxUnavailable: 0``, which allows nothing whatever the
    count, a migration's replacement pods included."""
    if observed is None:
        return []
    current = observed.get(desired.name)
    if max_unavailable is None:
        return [] if current is None else [DeleteObject(BUDGET_KIND, desired.namespace,
                                                         desired.name)]
    spec: dict[str, Any] = {"selector": {"matchLabels": {LABEL_ISVC: desired.isvc,
                                                         LABEL_COMPONENT: desired.component}}}
    if max_unavailable == 0:
        spec["maxUnavailable"] = 0
    else:
        spec["minAvailable"] = max(0, expected - max_unavailable)
    if current is None:
        return [ApplyObject({
            "apiVersion": "policy/v1", "kind": BUDGET_KIND,
            "metadata": {"name": desired.name, "namespace": desired.namespace,
                         "labels": _labels(desired)},
            "spec": spec}, exists=False)]
    if current.get("spec") == spec:
        return []
    return [ApplyObject({**current, "spec": spec}, exists=True)]
