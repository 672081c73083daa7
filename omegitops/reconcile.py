"""The imperative shell of a run: observe the cluster, plan, apply, repeat.

Observation is a constant number of list calls per pass, whatever the number
of components. Each component's plan is applied in order: its
InferenceReplica first (so every operation is recorded before its pods are
touched), then the pod and object actions, then the events. A failure stops
that component's pass where it is; the recorded operation lets the next
pass carry on from there, so nothing is lost or done twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from omegitops.cluster.base import (
    CONTROLLER_REVISION,
    INFERENCE_REPLICA,
    POD_GROUP,
    SERVICE,
    SERVING_GATE,
    Cluster,
)
from omegitops.cluster.errors import AlreadyExists, Conflict, NotFound
from omegitops.cluster.times import format_time
from omegitops.errors import ClusterError
from omegitops.gcpause import without_gc_pauses
from omegitops.lifecycle.actions import (
    Action,
    ApplyObject,
    CreatePod,
    DeleteObject,
    DeletePod,
    Event,
    PatchImages,
    SetServing,
)
from omegitops.lifecycle.desired import build_desired
from omegitops.lifecycle.planner import ObservedComponent, Plan, plan_component
from omegitops.lifecycle.templates import LABEL_COMPONENT, LABEL_ISVC, MANAGED_BY, MANAGER
from omegitops.manifests.load import ServiceComponent

log = logging.getLogger(__name__)
MANAGED = {MANAGED_BY: MANAGER}


@dataclass
class Observation:
    """Everything omegitops manages, listed once per pass."""

    pods: dict[tuple[str, str, str], list[dict]] = field(default_factory=dict)
    replicas: dict[tuple[str, str], dict] = field(default_factory=dict)
    revisions: dict[tuple[str, str, str], list[dict]] = field(default_factory=dict)
    services: dict[tuple[str, str, str], dict[str, dict]] = field(default_factory=dict)
    podgroups: dict[tuple[str, str, str], dict[str, dict]] | None = None

    def component(self, namespace: str, isvc: str, component: str) -> ObservedComponent:
        key = (namespace, isvc, component)
        groups = None
        if self.podgroups is not None:
            groups = self.podgroups.get(key, {})
        return ObservedComponent(
            replica=self.replicas.get((namespace, f"{isvc}-{component}")),
            pods=self.pods.get(key, []),
            revisions=self.revisions.get(key, []),
            services=self.services.get(key, {}),
            podgroups=groups,
        )


def _owner(obj: dict) -> tuple[str, str, str]:
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    return meta.get("namespace", ""), labels.get(LABEL_ISVC, ""), labels.get(LABEL_COMPONENT, "")


def observe(cluster: Cluster) -> Observation:
    """List every managed object: a fixed number of calls, never one per component."""
    seen = Observation()
    for pod in cluster.list_pods(MANAGED):
        seen.pods.setdefault(_owner(pod), []).append(pod)
    for replica in cluster.list_objects(INFERENCE_REPLICA, MANAGED):
        meta = replica["metadata"]
        seen.replicas[(meta.get("namespace", ""), meta["name"])] = replica
    for revision in cluster.list_objects(CONTROLLER_REVISION, MANAGED):
        seen.revisions.setdefault(_owner(revision), []).append(revision)
    for service in cluster.list_objects(SERVICE, MANAGED):
        seen.services.setdefault(_owner(service), {})[service["metadata"]["name"]] = service
    if cluster.has_kind(POD_GROUP):
        seen.podgroups = {}
        for group in cluster.list_objects(POD_GROUP, MANAGED):
            seen.podgroups.setdefault(_owner(group), {})[group["metadata"]["name"]] = group
    return seen


@dataclass
class PassResult:
    now: datetime
    plans: list[tuple[ServiceComponent, Plan]] = field(default_factory=list)
    applied: int = 0
    errors: list[str] = field(default_factory=list)
    # False when a LIST failed: nothing was planned or written, and the work is unknown.
    observed: bool = True

    @property
    def busy(self) -> bool:
        # A pass that could not observe knows nothing: treat it as busy so that
        # --until-idle tries again rather than stopping as if all were done.
        return not self.observed or any(plan.busy for _, plan in self.plans)

    @property
    def wake_at(self) -> datetime | None:
        wakes = [plan.wake_at for _, plan in self.plans if plan.wake_at]
        return min(wakes) if wakes else None


@without_gc_pauses  # see omegitops/gcpause.py: a third of a big pass was full collections
def plan_all(cluster: Cluster, items: list[ServiceComponent]) -> PassResult:
    """Observe once and plan every managed component; no writes."""
    now = cluster.now()
    seen = observe(cluster)
    result = PassResult(now=now)
    for item in items:
        if not item.lifecycle.managed:
            continue
        meta = item.service.data["metadata"]
        namespace = meta.get("namespace") or "default"
        observed = seen.component(namespace, meta["name"], item.lifecycle.component)
        desired = build_desired(item.service.data, item.runtime.data if item.runtime else None,
                                item.lifecycle, observed.revisions, observed.replica)
        result.plans.append((item, plan_component(desired, observed, now)))
    return result


@without_gc_pauses
def run_pass(cluster: Cluster, items: list[ServiceComponent]) -> PassResult:
    """Observe, plan and apply one pass."""
    try:
        result = plan_all(cluster, items)
    except ClusterError as err:
        # A failed LIST leaves the observation incomplete: acting on part of it could
        # recreate pods that exist or drop rows whose pods were not listed. The pass is
        # abandoned before any write and reported as failed; the next one observes again.
        result = PassResult(now=cluster.now(), observed=False)
        result.errors.append(f"observing the cluster: {err}")
        return result
    for item, plan in result.plans:
        try:
            result.applied += apply_plan(cluster, item, plan, result.now)
        except Conflict as err:
            # Someone else wrote the InferenceReplica: plan it again next pass.
            log.info("%s: %s; planning it again next pass", plan.replica["metadata"]["name"], err)
        except ClusterError as err:
            result.errors.append(f"{plan.replica['metadata']['name']}: {err}")
    return result


def apply_plan(cluster: Cluster, item: ServiceComponent, plan: Plan, now: datetime) -> int:
    """Apply one component's plan in order; returns the number of writes."""
    writes = 0
    if plan.replica_changed:
        _write_replica(cluster, plan.replica)
        writes += 1
        writes += _write_service_status(cluster, plan.replica)
    for action in plan.actions:
        _apply(cluster, action)
        writes += 1
    for event in plan.events:
        cluster.record_event(_event(item, event, now))
        writes += 1
    return writes


def _write_replica(cluster: Cluster, replica: dict) -> None:
    meta = replica["metadata"]
    if not meta.get("resourceVersion"):
        try:
            created = cluster.create_object(
                {k: v for k, v in replica.items() if k != "status"})
        except AlreadyExists as err:
            # A create that timed out may have landed: re-read and plan again next pass.
            raise Conflict(str(err)) from err
        replica = {**replica, "metadata": created["metadata"]}
        cluster.replace_status(replica)
        return
    # Status first: it records what this pass does (a reset, a release), while the
    # object write drops the annotations that asked for it. The other way round, a
    # failed status write after the object write lost the operator's request for good;
    # this way a failed object write leaves the annotation, and the next pass finds the
    # request already done (a reset or a release only acts on what is still Failed or held).
    stored = cluster.replace_status(replica)
    cluster.replace_object({**replica, "metadata": {
        **replica["metadata"], "resourceVersion": stored["metadata"]["resourceVersion"]}})


def _write_service_status(cluster: Cluster, replica: dict) -> int:
    """Where the InferenceService itself lives in the cluster (OME's CRDs installed),
    its status.components.{component}.lifecycle gets the component's totals and
    rolloutHold, as the documents show them. Backends without it skip this."""
    update = getattr(cluster, "update_service_status", None)
    if update is None:
        return 0
    spec, status = replica["spec"], replica["status"]
    totals = {
        "replicas": spec["replicas"],
        "currentReplicas": status["replicas"],
        "readyReplicas": status["readyReplicas"],
        "availableReplicas": status["availableReplicas"],
        "updatedReplicas": status["updatedReplicas"],
        "servingReplicas": status["servingReplicas"],
        "minReadySeconds": spec["minReadySeconds"],
        "revision": spec["revision"],
        "rolloutHold": status.get("rolloutHold"),
    }
    written = update(replica["metadata"]["namespace"], spec["inferenceService"],
                     spec["component"], totals)
    return 1 if written else 0


def _apply(cluster: Cluster, action: Action) -> None:
    if isinstance(action, CreatePod):
        try:
            cluster.create_pod(action.pod)
        except AlreadyExists:
            pass  # created by a pass that stopped before recording the next step
    elif isinstance(action, DeletePod):
        try:
            cluster.delete_pod(action.namespace, action.name, action.grace_seconds)
        except NotFound:
            pass
    elif isinstance(action, SetServing):
        cluster.set_pod_condition(action.namespace, action.name, SERVING_GATE, action.serving,
                                  reason="OMENative",
                                  message="in rotation" if action.serving else "out of rotation")
    elif isinstance(action, PatchImages):
        cluster.patch_pod_images(action.namespace, action.name, dict(action.images))
    elif isinstance(action, ApplyObject):
        if action.exists:
            cluster.replace_object(action.obj)
        else:
            try:
                cluster.create_object(action.obj)
            except AlreadyExists:
                pass
    elif isinstance(action, DeleteObject):
        try:
            cluster.delete_object(action.kind, action.namespace, action.name)
        except NotFound:
            pass
    else:  # pragma: no cover - every action type is handled above
        raise TypeError(f"unknown action {action!r}")


def _event(item: ServiceComponent, event: Event, now: datetime) -> dict:
    meta = item.service.data["metadata"]
    namespace = meta.get("namespace") or "default"
    stamp = format_time(now.timestamp())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": namespace, "labels": dict(MANAGED)},
        "involvedObject": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                           "namespace": namespace, "name": meta["name"]},
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "source": {"component": "omegitops"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
