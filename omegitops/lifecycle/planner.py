"""The planner: one bounded reconcile step for one component.

``plan_component(desired, observed, now)`` is a pure function. It reads the
Instance rows the InferenceReplica recorded on earlier passes and the pods
the cluster lists, moves each Instance by at most one step of its
operation, opens Create and Delete operations to reach the desired count,
and returns the actions, the new InferenceReplica, the events and when it
wants to be woken. It never reads the clock or the network.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from omegitops.cluster.times import format_time
from omegitops.lifecycle import pods as P
from omegitops.lifecycle.actions import (
    Action,
    CreatePod,
    DeleteObject,
    DeletePod,
    Event,
    SetServing,
)
from omegitops.lifecycle.instance import InstancePods, PodSpecInput, instance_pods
from omegitops.lifecycle.replica import API_VERSION, KIND, decode_rows, encode_rows
from omegitops.lifecycle.resolve import ComponentLifecycle, timeout_seconds
from omegitops.lifecycle.revisions import plan_revisions
from omegitops.lifecycle.services import plan_podgroup, plan_services, podgroup_name
from omegitops.lifecycle.status import component_status
from omegitops.lifecycle.templates import LABEL_COMPONENT, LABEL_ISVC, MANAGED_BY, MANAGER

# Operation types and their steps (DESIGN.md §4).
CREATE, DELETE = "Create", "Delete"
CREATE_PODS, WAIT_READY, WAIT_AVAILABLE = "CreatePods", "WaitReady", "WaitAvailable"
UNROUTE, DELETE_PODS, WAIT_GONE = "Unroute", "DeletePods", "WaitGone"
# Phases.
CREATING, DELETING, READY, PENDING, FAILED = "Creating", "Deleting", "Ready", "Pending", "Failed"
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@dataclass(frozen=True)
class DesiredComponent:
    """What the repository asks for one component, already resolved and rendered."""

    namespace: str
    isvc: str
    component: str
    lifecycle: ComponentLifecycle
    templates: dict[str, dict]
    revision: str
    runtime_config: dict = field(default_factory=dict)
    pinned: bool = False
    drifted: bool = False

    @property
    def name(self) -> str:
        return f"{self.isvc}-{self.component}"

    @property
    def gang(self) -> bool:
        return self.lifecycle.shape == "gang"

    @property
    def pods_per_instance(self) -> int:
        return 1 + self.lifecycle.worker_size if self.gang else 1

    def pod_input(self) -> PodSpecInput:
        return PodSpecInput(self.namespace, self.isvc, self.component, self.revision,
                            self.templates, self.lifecycle.worker_size, self.gang)


@dataclass
class ObservedComponent:
    """What the cluster holds for one component."""

    replica: dict | None = None
    pods: list[dict] = field(default_factory=list)
    revisions: list[dict] = field(default_factory=list)
    services: dict[str, dict] = field(default_factory=dict)
    podgroups: dict[str, dict] | None = None  # None: the PodGroup kind is not installed


@dataclass(frozen=True)
class Plan:
    component: str
    replica: dict
    replica_changed: bool
    actions: list[Action]
    events: list[Event]
    wake_at: datetime | None
    busy: bool

    @property
    def is_noop(self) -> bool:
        return not self.actions and not self.events and not self.replica_changed


@dataclass
class _Pass:
    """Working state of one planning pass."""

    desired: DesiredComponent
    now: float
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wakes: list[float] = field(default_factory=list)

    def event(self, kind: str, reason: str, index: int | None, text: str) -> None:
        where = f"OMENative component={self.desired.component}"
        if index is not None:
            where += f" instance={index}"
        self.events.append(Event(kind, reason, f"{where} {text}"))

    def wake(self, at: float | None) -> None:
        if at is not None and at > self.now:
            self.wakes.append(at)


def plan_component(desired: DesiredComponent, observed: ObservedComponent, now: datetime) -> Plan:
    """One bounded step for one component; pure."""
    work = _Pass(desired, now.timestamp())
    previous = (observed.replica or {}).get("status") or {}
    rows = {row["index"]: row for row in decode_rows(previous.get("instances"))}
    groups = _group_pods(observed.pods)
    _adopt_orphans(work, rows, groups)
    for index in sorted(rows):
        row = rows[index]
        pods = InstancePods(desired.pods_per_instance, groups.get(index, []))
        if _step(work, row, pods, observed) == "gone":
            del rows[index]
    _scale(work, rows, groups, observed)
    work.actions.extend(plan_services(desired, observed.services))
    work.actions.extend(plan_revisions(desired, observed.revisions, rows.values()))
    replica = _replica(desired, observed, rows, groups, work)
    changed = _replica_changed(observed.replica, replica)
    busy = bool(work.actions) or any(row.get("operation") for row in rows.values()) or (
        len(rows) != desired.lifecycle.replicas)
    wake = datetime.fromtimestamp(min(work.wakes), UTC) if work.wakes else None
    return Plan(desired.component, replica, changed, work.actions, work.events, wake, busy)


def _group_pods(pods: list[dict]) -> dict[int, list[dict]]:
    groups: dict[int, list[dict]] = {}
    for pod in pods:
        index = P.index_of(pod)
        if index is not None:
            groups.setdefault(index, []).append(pod)
    for members in groups.values():
        members.sort(key=lambda p: p["metadata"]["name"])
    return groups


def _adopt_orphans(work: _Pass, rows: dict[int, dict], groups: dict[int, list[dict]]) -> None:
    """Pods whose Instance has no row (a lost status) get their row back.

    The row is rebuilt from the pods' labels, so nothing is created twice.
    """
    for index, members in groups.items():
        if index in rows:
            continue
        live = [p for p in members if not P.is_terminating(p)]
        if not live:
            rows[index] = _row(index, max(P.incarnation_of(p) for p in members),
                               P.revision_of(members[0]), DELETING,
                               _operation(work, DELETE, WAIT_GONE))
            continue
        rows[index] = _row(index, max(P.incarnation_of(p) for p in live),
                           P.revision_of(live[0]), CREATING,
                           _operation(work, CREATE, CREATE_PODS))


def _row(index: int, incarnation: int, revision: str, phase: str, operation: dict | None) -> dict:
    return {"index": index, "incarnation": incarnation, "phase": phase, "revision": revision,
            "pods": [], "operation": operation, "lastFailure": None}


def _operation(work: _Pass, kind: str, step: str, strategy: str | None = None) -> dict:
    timeout = timeout_seconds(work.desired.lifecycle)
    return {
        "type": kind,
        "step": step,
        "strategy": strategy,
        "startedAt": format_time(work.now),
        "deadline": format_time(work.now + timeout) if timeout and kind != DELETE else None,
        "waiting": None,
    }


def _step(work: _Pass, row: dict, pods: InstancePods, observed: ObservedComponent) -> str | None:
    operation = row.get("operation")
    if not operation:
        _rest(work, row, pods)
        return None
    if operation["type"] == CREATE:
        _step_create(work, row, pods, observed)
    elif operation["type"] == DELETE:
        return _step_delete(work, row, pods, observed)
    return None


def _rest(work: _Pass, row: dict, pods: InstancePods) -> None:
    """An Instance with no operation: keep a Ready gang in rotation together."""
    if row["phase"] == READY and pods.containers_ready():
        for pod in pods.live:
            if not P.gate_set(pod):
                work.actions.append(_serve(pod, True))


def _serve(pod: dict, serving: bool) -> SetServing:
    meta = pod["metadata"]
    return SetServing(meta["namespace"], meta["name"], serving)


def _step_create(
    work: _Pass, row: dict, pods: InstancePods, observed: ObservedComponent
) -> None:
    operation = row["operation"]
    desired = work.desired
    index = row["index"]
    if operation["step"] == CREATE_PODS:
        existing = {p["metadata"]["name"] for p in pods.pods}
        wanted = instance_pods(_input_for(desired, row), index, row["incarnation"])
        missing = [pod for pod in wanted if pod["metadata"]["name"] not in existing]
        if not missing:
            operation["step"] = WAIT_READY
            return
        group = plan_podgroup(desired, index, observed.podgroups)
        if group is not None:
            work.actions.append(group)
            for pod in missing:
                pod["metadata"]["labels"][PODGROUP_LABEL] = podgroup_name(desired, index)
        work.actions.extend(CreatePod(pod) for pod in missing)
        return
    if operation["step"] == WAIT_READY:
        if pods.containers_ready():
            # The whole gang enters rotation together.
            work.actions.extend(_serve(p, True) for p in pods.live if not P.gate_set(p))
            operation["step"] = WAIT_AVAILABLE
        return
    if operation["step"] == WAIT_AVAILABLE:
        work.actions.extend(_serve(p, True) for p in pods.live
                            if P.containers_ready(p) and not P.gate_set(p))
        since = pods.ready_since()
        if since is None:
            return
        available_at = since + desired.lifecycle.min_ready_seconds
        if work.now >= available_at:
            row["phase"] = READY
            row["operation"] = None
            work.event("Normal", "InstanceReady", index,
                       f"ready on revision {row['revision']} (incarnation={row['incarnation']})")
        else:
            work.wake(available_at)


def _input_for(desired: DesiredComponent, row: dict) -> PodSpecInput:
    """Pods are rendered for the revision the row records."""
    return desired.pod_input()


def _step_delete(
    work: _Pass, row: dict, pods: InstancePods, observed: ObservedComponent
) -> str | None:
    operation = row["operation"]
    if operation["step"] == UNROUTE:
        work.actions.extend(_serve(p, False) for p in pods.live if P.gate_set(p))
        operation["step"] = DELETE_PODS
        return None
    if operation["step"] == DELETE_PODS:
        for pod in pods.pods:
            if not P.is_terminating(pod):
                meta = pod["metadata"]
                work.actions.append(DeletePod(meta["namespace"], meta["name"]))
        operation["step"] = WAIT_GONE
        return None
    if pods.pods:
        work.wake(min((P.deletion_deadline(p) or work.now) for p in pods.pods))
        return None
    desired = work.desired
    if observed.podgroups is not None and podgroup_name(desired, row["index"]) in (
            observed.podgroups):
        work.actions.append(DeleteObject("PodGroup", desired.namespace,
                                         podgroup_name(desired, row["index"])))
    work.event("Normal", "InstanceDeleted", row["index"], "deleted")
    return "gone"


def _scale(work: _Pass, rows: dict[int, dict], groups: dict[int, list[dict]],
           observed: ObservedComponent) -> None:
    """Open Create or Delete operations to reach the desired number of Instances."""
    desired = work.desired
    active = [row for row in rows.values()
              if (row.get("operation") or {}).get("type") != DELETE]
    want = desired.lifecycle.replicas
    if len(active) < want:
        used = set(rows) | set(groups)
        index = 0
        for _ in range(want - len(active)):
            while index in used:
                index += 1
            used.add(index)
            row = _row(index, 1, desired.revision, CREATING, _operation(work, CREATE, CREATE_PODS))
            rows[index] = row
            work.event("Normal", "InstanceCreating", index,
                       f"creating at revision {desired.revision} (incarnation=1)")
            pods = InstancePods(desired.pods_per_instance, [])
            _step_create(work, row, pods, observed)
    elif len(active) > want:
        # Keep Ready Instances before the others, lowest indices first (instances.txt).
        keep = sorted(active, key=lambda r: (r["phase"] != READY, r["index"]))[:want]
        kept = {row["index"] for row in keep}
        for row in active:
            if row["index"] in kept:
                continue
            row["phase"] = DELETING
            row["operation"] = _operation(work, DELETE, UNROUTE)
            work.event("Normal", "InstanceDeleting", row["index"], "deleting: scaled down")
            pods = InstancePods(desired.pods_per_instance, groups.get(row["index"], []))
            _step_delete(work, row, pods, observed)


def _replica(desired: DesiredComponent, observed: ObservedComponent, rows: dict[int, dict],
             groups: dict[int, list[dict]], work: _Pass) -> dict:
    """The InferenceReplica as this pass leaves it: spec from the repository,
    status from the rows and the pods."""
    previous = observed.replica or {}
    for row in rows.values():
        row["pods"] = [P.pod_row(p) for p in groups.get(row["index"], [])
                       if not P.is_terminating(p)]
    ordered = [rows[i] for i in sorted(rows)]
    status = component_status(desired, ordered, groups, previous.get("status") or {}, work.now)
    status["instances"] = encode_rows(ordered)
    metadata = copy.deepcopy(previous.get("metadata") or {})
    metadata.update({"name": desired.name, "namespace": desired.namespace})
    metadata["labels"] = {**(metadata.get("labels") or {}), LABEL_ISVC: desired.isvc,
                          LABEL_COMPONENT: desired.component, MANAGED_BY: MANAGER}
    lifecycle = desired.lifecycle
    spec: dict[str, Any] = {
        "inferenceService": desired.isvc,
        "component": desired.component,
        "replicas": lifecycle.replicas,
        "minReadySeconds": lifecycle.min_ready_seconds,
        "lifecycle": lifecycle.lifecycle_spec(),
        "revision": desired.revision,
        "shape": lifecycle.shape,
        "workerSize": lifecycle.worker_size,
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec,
            "status": status}


def _replica_changed(previous: dict | None, replica: dict) -> bool:
    if previous is None:
        return True
    return previous.get("spec") != replica["spec"] or previous.get("status") != replica["status"]

