"""What the cluster runs, rebuilt from the job's status report: where ``plan --base`` starts.

Replaying the base's manifests on an empty simulated cluster puts every Instance on
its component's newest revision. What the cluster really runs can differ, and it is
what a pull request's plan must start from (as ``terraform plan`` plans from its
state): Instances staged on an older revision by a partition, a revision held after
failed attempts, Failed Instances, a service that pins its runtime. The job's report
keeps each managed component's rows and revision retries (``report.instance_state``);
``seed`` puts them back on the replayed cluster:

1. every revision the rows and the InferenceReplica name is stored, its templates
   rendered again from the commit that made it (``find``, a walk back through the
   repository's history that the caller supplies), or, when no commit in reach made
   it, said so in a note;
2. the component's pods are replaced by the pods the rows list, each built from its
   own revision (a surge's new pod from the revision it surges to), with the faults
   the rows' last failures name (an image that cannot be pulled fails again, a crash
   loop crashes again) injected before the kubelet starts them;
3. after the simulated kubelets have brought them up, the pods the report says served
   are put in rotation, and the InferenceReplica gets the report's revision, rows and
   revision retries, every timestamp moved by the time between the report and now;
   a component an autoscaler scales gets the count the report last saw, not
   minReplicas, which is all a replay of the manifests knows (lifecycle/scaling.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from omegitops.app.passes import apply_plan, plan_all
from omegitops.cluster.base import CONTROLLER_REVISION, INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import ServiceComponent
from omegitops.model.ids import ComponentKey
from omegitops.model.replica import decode_rows, replica_name, stored_rows
from omegitops.model.state import Mode, OperationType, Phase, Row
from omegitops.render.component import DesiredComponent
from omegitops.render.desired import build_desired
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.revisions import revision_data, revision_object
from omegitops.render.templates import (
    LABEL_COMPONENT,
    LABEL_ISVC,
    MAIN_CONTAINER,
    OPERATION_ANNOTATION,
    SERVING_GATE,
    workers_of,
)
from omegitops.util.times import format_time, parse_time

# Long enough for the simulated kubelets to pull, start and probe the seeded pods.
SETTLE_SECONDS = 900.0
IMAGE_FAILURES = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName"}
CRASH_FAILURES = {"CrashLoopBackOff", "Error", "OOMKilled"}
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")

# Renders a component as the commit that made ``revision`` had it; None when no commit
# within reach did.
Finder = Callable[[ServiceComponent, str], DesiredComponent | None]


@dataclass
class Seeded:
    """What ``seed`` put back, counted for the plan's note, and what it could not."""

    components: int = 0
    staged: int = 0  # Instances on a revision other than their component's newest
    failed: int = 0
    held: int = 0  # revisions held after failed attempts
    pinned: int = 0  # components whose InferenceReplica names an older revision
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.components:
            return "no component had Instance state to start from"
        parts = [_count_of(self.components, "component") + " put back as the job last saw "
                 "it (the others stand as replayed)"]
        if self.staged:
            parts.append(_count_of(self.staged, "Instance") + " on an older revision")
        if self.failed:
            parts.append(_count_of(self.failed, "Instance") + " Failed")
        if self.held:
            parts.append(_count_of(self.held, "revision") + " held")
        if self.pinned:
            parts.append(_count_of(self.pinned, "component") + " on an older revision of "
                         "its own (a pinned runtime)")
        return "; ".join(parts)


def _count_of(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def reported_components(report: dict[str, Any]) -> dict[ComponentKey, dict[str, Any]]:
    """The report's managed components that carry Instance state, by (namespace,
    service, component)."""
    found = {}
    for service in report.get("services") or []:
        for component in service.get("components") or []:
            if component.get("managed") and isinstance(component.get("state"), dict):
                found[ComponentKey(service.get("namespace"), service.get("name"),
                       component.get("component"))] = component
    return found


def seed(sim: SimCluster, items: list[ServiceComponent], report: dict[str, Any], find: Finder) -> Seeded:
    """Put the report's Instances on ``sim`` (the base replayed on it); see the module."""
    seeded = Seeded()
    reported = reported_components(report)
    shift = _shift_of(report, sim)
    plans = []
    for item in items:
        if not item.lifecycle.managed:
            continue
        meta = item.service.data["metadata"]
        key = ComponentKey(meta.get("namespace") or "default", meta["name"],
                           item.lifecycle.component)
        component = reported.get(key)
        if component is None:
            continue
        plan = _plan_component(sim, item, component, find, shift, seeded)
        if plan is not None:
            plans.append(plan)
    if not plans:
        return seeded
    for plan in plans:
        plan.create_pods(sim)
    sim.advance(SETTLE_SECONDS)
    for plan in plans:
        plan.finish(sim)
    _settle_bookkeeping(sim, items)
    return seeded


def _settle_bookkeeping(sim: SimCluster, items: list[ServiceComponent]) -> None:
    """The base planned once on the seeded state, and only what rewrites an
    InferenceReplica alone applied: its conditions and counts as the job's last pass
    left them, which the report does not keep whole. A plan that would move anything is
    left for the head's plan to show."""
    result = plan_all(sim, items)
    for _, plan in result.plans:
        if plan.replica_changed and not plan.actions and not plan.events:
            apply_plan(sim, plan, result.now)


@dataclass
class _Component:
    """One component's seed: its rows, the InferenceReplica, the pods to make."""

    namespace: str
    replica: dict[str, Any]
    revision: str
    rows: list[dict[str, Any]]
    retries: dict[str, Any]
    pods: list[tuple[dict[str, Any], bool]]  # (pod, served)
    faults: list[tuple[str, dict[str, Any]]]  # (fault kind, arguments)
    # The autoscaler's count the report saw (None: Git owns it, as replayed).
    count: int | None = None

    def create_pods(self, sim: SimCluster) -> None:
        for kind, where in self.faults:
            if kind == "imagepull":
                sim.inject_fault("imagepull", image=where["image"])
        for pod, _ in self.pods:
            sim.create_pod(pod)
        for kind, where in self.faults:
            if kind == "crash":
                sim.inject_fault("crash", pod=where["pod"], namespace=self.namespace)

    def finish(self, sim: SimCluster) -> None:
        for pod, served in self.pods:
            if served:
                sim.set_pod_condition(self.namespace, pod["metadata"]["name"], SERVING_GATE,
                                      True)
        replica = cast(dict[str, Any], sim.get_object(INFERENCE_REPLICA, self.namespace,
                                                      self.replica["metadata"]["name"]))
        replica["spec"]["revision"] = self.revision
        if self.count is not None:
            replica["spec"]["replicas"] = self.count
        replica = sim.replace_object(replica)
        status = dict(replica.get("status") or {})
        status["instances"] = self.rows
        status["revisionRetries"] = self.retries
        replica["status"] = status
        sim.replace_status(replica)


def _plan_component(sim: SimCluster, item: ServiceComponent, component: dict[str, Any], find: Finder,
                    shift: float, seeded: Seeded) -> _Component | None:
    state = component["state"]
    # The report's rows, as stored (JSON), read as typed rows once their times are moved.
    rows = [Row.from_storage(_shifted(row, shift)) for row in decode_rows(state.get("instances"))]
    revision = component.get("revision")
    meta = item.service.data["metadata"]
    namespace, isvc, name = (meta.get("namespace") or "default", meta["name"],
                             item.lifecycle.component)
    replica = sim.get_object(INFERENCE_REPLICA, namespace, replica_name(isvc, name))
    if replica is None or not rows or not isinstance(revision, str):
        return None
    count = reported_count(item, component)
    if _as_replayed(replica, rows, state.get("revisionRetries") or {}, revision) and \
            count in (None, (replica.get("spec") or {}).get("replicas")):
        return None  # the replay already stands as the report says: nothing to put back
    base = build_desired(item.service.data, item.runtime.data if item.runtime else None,
                         item.lifecycle, [], None, item.operator)
    labels = {LABEL_ISVC: isvc, LABEL_COMPONENT: name}
    stored = {r["metadata"]["name"]: r for r in sim.list_objects(CONTROLLER_REVISION, labels)
              if r["metadata"].get("namespace") == namespace}
    targets = {row.operation.target_revision for row in rows if row.operation is not None}
    wanted: set[str] = {revision} | {row.revision for row in rows} | {
        target for target in targets if target is not None}
    number = max((int(r.get("revision") or 0) for r in stored.values()), default=0)
    for missing in sorted(wanted - set(stored)):
        desired = find(item, missing)
        if desired is None:
            seeded.notes.append(
                f"{namespace}/{isvc} {name}: revision {missing} was not made by any commit "
                "within reach of the report's: its Instances are started from the newest "
                "templates under its name, and the plan cannot tell what changed since it")
            continue
        number += 1
        stored[missing] = sim.create_object(revision_object(desired, number))

    def templates(of: str) -> dict[str, dict[str, Any]]:
        data = revision_data(stored[of]) if of in stored else {}
        return data.get("templates") or base.templates

    for pod in sim.list_pods(labels):
        if pod["metadata"]["namespace"] == namespace:
            sim.delete_pod(namespace, pod["metadata"]["name"], grace_seconds=0)
    pods, faults = [], []
    for row in rows:
        for entry in row.pods:
            made = _pod(base, row, entry, templates)
            if made is None:
                continue
            pods.append((made, bool(entry.get("serving"))))
            faults.extend(_faults(row, made))
    _count(seeded, rows, state.get("revisionRetries") or {}, revision, replica)
    return _Component(namespace, replica, revision, _shifted(state.get("instances"), shift),
                      _shifted(state.get("revisionRetries") or {}, shift), pods, faults, count)


def reported_count(item: ServiceComponent, component: dict[str, Any]) -> int | None:
    """The count the report saw, for a component an autoscaler scales in the base (None
    when Git owns it: the replay made Git's count)."""
    desired = component.get("desired")
    if item.lifecycle.bounds is None or isinstance(desired, bool) \
            or not isinstance(desired, int) or desired < 0:
        return None
    return desired


def _as_replayed(replica: dict[str, Any], rows: list[Row], retries: dict[str, Any],
                 revision: str) -> bool:
    """Whether the replayed component already is what the report says: every Instance
    Ready at rest on the revision the replay made, at the same indices, nothing held.
    Most of a fleet is, and is left as replayed (its pods are not made again)."""
    if revision != (replica.get("spec") or {}).get("revision") or retries:
        return False
    replayed = {row.index for row in stored_rows(replica)}
    return replayed == {row.index for row in rows} and all(
        row.phase == Phase.READY and row.operation is None and row.revision == revision
        and not row.last_failure and not row.avoid_nodes for row in rows)


def _pod(base: DesiredComponent, row: Row, entry: dict[str, Any],
         templates: Callable[[str], dict[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The pod ``entry`` of ``row`` names, built from the revision it runs."""
    operation = row.operation
    ordinal = entry.get("ordinal") if isinstance(entry.get("ordinal"), int) else 0
    surging = operation is not None and operation.mode == Mode.SURGE \
        and operation.ordinal == ordinal and not base.gang
    revision = cast(str, operation.target_revision) if operation is not None and surging \
        else row.revision
    runs = templates(revision)
    spec = PodSpecInput(base.namespace, base.isvc, base.component, revision, runs,
                        workers_of(runs, base.lifecycle.worker_size), base.gang,
                        base.pod_metadata)
    built = instance_pods(spec, row.index, row.incarnation,
                          0 if base.gang else cast(int, ordinal))
    pod = next((p for p in built if p["metadata"]["name"] == entry.get("name")), None)
    if pod is not None and operation is not None and (
            surging or operation.type != OperationType.UPDATE):
        pod["metadata"].setdefault("annotations", {})[OPERATION_ANNOTATION] = \
            operation.started_at
    return pod


def _faults(row: Row, pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The fault a Failed Instance's last failure names, again on its pod: an image that
    cannot be pulled (every pod of that image, as a registry refuses it to all), a
    crash loop (that pod)."""
    failure = row.last_failure or {}
    if row.phase != Phase.FAILED or failure.get("pod") != pod["metadata"]["name"]:
        return []
    reason = failure.get("reason")
    if reason in IMAGE_FAILURES:
        containers = pod["spec"]["containers"]
        main = next((c for c in containers if c.get("name") == MAIN_CONTAINER), containers[0])
        wanted = failure.get("container")
        chosen = next((c for c in containers if c.get("name") == wanted), main)
        return [("imagepull", {"image": chosen["image"]})]
    if reason in CRASH_FAILURES:
        return [("crash", {"pod": pod["metadata"]["name"]})]
    return []


def _count(seeded: Seeded, rows: list[Row], retries: dict[str, Any], revision: str,
           replica: dict[str, Any]) -> None:
    seeded.components += 1
    seeded.staged += sum(1 for row in rows if row.revision != revision)
    seeded.failed += sum(1 for row in rows if row.phase == Phase.FAILED)
    seeded.held += sum(1 for entry in retries.values()
                       if isinstance(entry, dict) and entry.get("held"))
    seeded.pinned += revision != (replica.get("spec") or {}).get("revision")


def _shift_of(report: dict[str, Any], sim: SimCluster) -> float:
    """Seconds from the report's cluster time to the simulated cluster's now: every time
    in the rows (a deadline, a backoff) keeps its distance from now."""
    try:
        return sim.now().timestamp() - parse_time(report.get("generatedAt") or "")
    except ValueError:
        return 0.0


def _shifted(value: Any, shift: float) -> Any:
    """``value`` with every RFC3339 time in it moved by ``shift`` seconds."""
    if isinstance(value, dict):
        return {k: _shifted(v, shift) for k, v in value.items()}
    if isinstance(value, list):
        return [_shifted(v, shift) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        return format_time(parse_time(value) + shift)
    return value
