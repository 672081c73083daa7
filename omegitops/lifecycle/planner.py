"""The planner: one bounded reconcile step for one component.

``plan_component(desired, observed, now)`` is a pure function. It reads the
Instance rows the InferenceReplica recorded on earlier passes and the pods
the cluster lists, then, like the Deployment controller's rolloutRolling, it

1. moves each Instance by at most one step of its operation;
2. opens Create and Delete operations to reach the desired count;
3. starts the updates that partition and budgets allow, or names the hold;
4. keeps Services and stored revisions in shape;

and returns the actions, the new InferenceReplica, the events and when it
wants to be woken. It never reads the clock or the network.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from omegitops.lifecycle.availability import counts_toward_desired, is_ready, replaced_whole
from omegitops.lifecycle.converged import CONVERGED_ANNOTATION, fingerprint, unmarked
from omegitops.lifecycle.migration import budget_pods, plan_migrations
from omegitops.lifecycle.operations import adopt_orphans, open_create, open_delete
from omegitops.lifecycle.repairs import (
    RELEASE_ANNOTATION,
    RESET_ANNOTATION,
    plan_repairs,
    reset_and_release,
)
from omegitops.lifecycle.rollout import RolloutDecision, RolloutOutcome, plan_rollout
from omegitops.lifecycle.rotation import converge_rotation
from omegitops.lifecycle.scaling import Count, count_of, counted
from omegitops.lifecycle.status import component_status
from omegitops.lifecycle.steps import advance
from omegitops.lifecycle.work import Work
from omegitops.model import outbox
from omegitops.model.actions import Action, ApplyObject, DeleteObject, Event
from omegitops.model.budgets import scaled_value
from omegitops.model.replica import (
    API_VERSION,
    KIND,
    encode_rows,
    readable_status,
    stored_rows,
)
from omegitops.model.state import Hold, Json, Mode, Outcome, Phase, Row, Step, Strategy
from omegitops.render import pods as P
from omegitops.render.component import DesiredComponent, ObservedComponent
from omegitops.render.revisions import plan_revisions
from omegitops.render.services import left_podgroups, plan_budget, plan_services, serving_selector
from omegitops.render.templates import LABEL_COMPONENT, LABEL_ISVC, MANAGED_BY, MANAGER

__all__ = ["DesiredComponent", "ObservedComponent", "Plan", "converged_plan",
           "plan_component"]


@dataclass(frozen=True)
class Plan:
    component: str
    replica: Json
    replica_changed: bool
    actions: list[Action]
    events: list[Event]
    wake_at: datetime | None
    busy: bool
    # Whether the InferenceReplica's outbox holds the events, to be cleared once sent.
    clear_outbox: bool = False
    # The InferenceReplica is written only to record the converged fingerprint.
    bookkeeping: bool = False
    # Which of its two parts changed: a write of the object (spec, labels, annotations)
    # and one of the status subresource are two requests; a step that moves only the
    # status (most of them) makes one.
    object_changed: bool = True
    status_changed: bool = True
    # The Instances' rows as this pass leaves them, by index (None: as ``replica``
    # stores them, read when asked), and this pass's rollout decision (None when the
    # component was not planned: converged_plan).
    instances: tuple[Row, ...] | None = None
    decision: RolloutDecision | None = None

    @property
    def rows(self) -> tuple[Row, ...]:
        """The Instances' rows, by index, as typed values."""
        return self.instances if self.instances is not None else stored_rows(self.replica)

    @property
    def hold(self) -> Hold | None:
        """What holds the rollout, as the InferenceReplica records it."""
        return Hold.from_storage((self.replica.get("status") or {}).get("rolloutHold"))

    @property
    def is_noop(self) -> bool:
        """Nothing changes that anyone reads (a fingerprint alone is not a change)."""
        return not self.actions and not self.events and (
            not self.replica_changed or self.bookkeeping)


def plan_component(desired: DesiredComponent, observed: ObservedComponent, now: datetime) -> Plan:
    """One bounded step for one component; pure."""
    # Git's count, or the autoscaler's from the live InferenceReplica (lifecycle/scaling.py);
    # the converged fingerprint stays Git's, which is what a later pass compares.
    git = desired
    count = count_of(desired, observed.replica)
    desired = counted(desired, count)
    work = Work(desired, observed, now.timestamp())
    previous, unreadable = readable_status((observed.replica or {}).get("status"))
    work.previous = previous
    work.rows = {row["index"]: Row.from_storage(row) for row in previous.get("instances") or []}
    if unreadable:
        # Rebuilt from the pods below (adopt_orphans), as after a deleted InferenceReplica.
        work.event("Warning", "StatusUnreadable", None, (
            f"InferenceReplica {desired.namespace}/{desired.name}: {unreadable[0]}"
            + (f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else "")
            + "; what it cannot read is rebuilt from the pods"))
    # A newer revision replaces a held one: only the target's retries matter.
    retries = copy.deepcopy(previous.get("revisionRetries") or {})
    work.retries = {rev: entry for rev, entry in retries.items() if rev == desired.revision}
    work.groups = _group_pods(observed.pods)
    adopt_orphans(work)
    annotations = ((observed.replica or {}).get("metadata") or {}).get("annotations") or {}
    reset_and_release(work, annotations)
    for index in sorted(work.rows):
        row = work.rows.get(index)
        if row is None:
            continue
        if row.operation is not None or row.rebuild:
            work.moved.add(index)
        if desired.teardown and row.phase != Phase.DELETING:
            # A removed component goes whole, whatever its Instances were doing: nothing
            # is built for it any more, and its templates may be gone with its revisions.
            work.put(open_delete(work, row,
                                 "the repository no longer has its component (--prune)"))
            continue
        row, outcome = advance(work, row)
        if outcome == Outcome.GONE:
            del work.rows[index]
        else:
            work.put(row)
    _release_orphaned_replacements(work)
    if not desired.teardown:
        # An Instance on its way out is not repaired: the teardown removes it whole, and a
        # torn-down component may have lost the templates a rebuild would need.
        plan_repairs(work)
        plan_migrations(work)
    if count.clamped_from is not None and not desired.teardown:
        _report_clamp(work, count)
    _scale(work)
    rollout = plan_rollout(work, previous.get("rolloutHold"))
    converge_rotation(work)
    replica, rows = _replica(work, rollout, count)
    removed = False
    if desired.teardown:
        if not work.rows and not observed.pods:
            # Every Instance is gone: the component's own objects go last, the record last of all.
            work.actions.extend(teardown_objects(desired, observed))
            work.event("Normal", "ComponentRemoved", None,
                       "removed: the repository no longer has it (--prune)")
            removed = True
    else:
        work.actions.extend(plan_services(desired, observed.services))
        work.actions.extend(plan_budget(desired, observed.budgets, budget_pods(work),
                                        work.lifecycle.replicas * work.needed))
        work.actions.extend(DeleteObject("PodGroup", desired.namespace, name) for name in
                            left_podgroups(desired, observed.podgroups, work.rows, work.groups))
        revisions = plan_revisions(desired, observed.revisions, work.rows.values())
        # A revision is stored before any pod is built from it, as a StatefulSet does: a
        # pass cut short never leaves pods whose templates are nowhere (which a gang
        # could only leave by a restart).
        stores = [a for a in revisions if isinstance(a, ApplyObject)]
        work.actions[:0] = stores
        work.actions.extend(a for a in revisions if a not in stores)
    # A Failed Instance marked for a fresh start is rebuilt by the next pass.
    busy = bool(work.actions) or rollout.pending or any(
        (row.operation is not None and row.phase != Phase.FAILED) or row.rebuild
        for row in work.rows.values())
    busy = busy or sum(counts_toward_desired(work, r) for r in work.rows.values()) != (
        desired.lifecycle.replicas)
    wake = datetime.fromtimestamp(min(work.wakes), UTC) if work.wakes else None
    # The events go into the outbox with the first write; a removed component's record
    # is deleted instead, so its last events are only sent.
    events, recorded = outbox.post(previous, work.events)
    replica["status"].update(recorded)
    at_rest = not (work.actions or events or busy or wake or removed or desired.teardown)
    _mark_converged(replica, git, observed, at_rest)
    changed = not removed and _replica_changed(observed.replica, replica)
    bookkeeping = changed and not _replica_changed(_unmarked(observed.replica),
                                                   _unmarked(replica) or replica)
    previous_object = observed.replica or {}
    return Plan(desired.component, replica, changed, work.actions, events, wake, busy,
                clear_outbox=not removed and bool(recorded.get(outbox.OUTBOX)),
                bookkeeping=bookkeeping,
                object_changed=observed.replica is None or _object_part(previous_object)
                != _object_part(replica),
                status_changed=previous_object.get("status") != replica["status"],
                instances=rows, decision=rollout.decision)


def converged_plan(desired: DesiredComponent, observed: ObservedComponent) -> Plan:
    """The plan of a component ``converged.is_converged`` recognised: nothing to do."""
    return Plan(desired.component, observed.replica or {}, False, [], [], None, False)


def _mark_converged(replica: Json, desired: DesiredComponent, observed: ObservedComponent,
                    at_rest: bool) -> None:
    """Fingerprint a plan that does nothing, so that a later pass that reads the same
    can skip planning (lifecycle/converged.py); any other plan drops the fingerprint."""
    metadata = replica["metadata"]
    annotations = unmarked(metadata.get("annotations"))
    if at_rest:
        annotations[CONVERGED_ANNOTATION] = fingerprint(desired, observed, replica)
    if annotations or "annotations" in metadata:
        metadata["annotations"] = annotations


def _unmarked(replica: Json | None) -> Json | None:
    """The InferenceReplica without its converged fingerprint."""
    if replica is None:
        return None
    metadata = {**(replica.get("metadata") or {})}
    metadata["annotations"] = unmarked(metadata.get("annotations"))
    return {**replica, "metadata": metadata}


def teardown_objects(desired: DesiredComponent, observed: ObservedComponent) -> list[Action]:
    """Delete what a removed component leaves once its pods are gone."""
    namespace = desired.namespace
    actions: list[Action] = [DeleteObject("Service", namespace, name)
                             for name in sorted(observed.services)]
    actions += [DeleteObject("PodGroup", namespace, name)
                for name in sorted(observed.podgroups or {})]
    actions += [DeleteObject("PodDisruptionBudget", namespace, name)
                for name in sorted(observed.budgets or {})]
    actions += [DeleteObject("ControllerRevision", namespace, r["metadata"]["name"])
                for r in observed.revisions]
    if observed.replica is not None:
        actions.append(DeleteObject("InferenceReplica", namespace, desired.name))
    return actions


def _group_pods(pods: list[Json]) -> dict[int, list[Json]]:
    groups: dict[int, list[Json]] = {}
    for pod in pods:
        index = P.index_of(pod)
        if index is not None:
            groups.setdefault(index, []).append(pod)
    for members in groups.values():
        members.sort(key=lambda p: p["metadata"]["name"])
    return groups


def _release_orphaned_replacements(work: Work) -> None:
    """A gang replacement whose source no longer surges toward it (the source was scaled
    away or deleted, or its update ended otherwise) is an Instance like any other: it
    fills a place, and later rollouts move it. Kept marked, it would stay on its
    revision for good, since a replacement is never a rollout candidate. One being
    deleted keeps the mark: a new surge of its source waits for it to go."""
    for row in list(work.rows.values()):
        if row.surge_of is None or row.phase == Phase.DELETING:
            continue
        source = work.rows.get(row.surge_of)
        operation = source.operation if source is not None else None
        if operation is None or operation.mode != Mode.SURGE \
                or operation.replacement != row.index:
            work.put(row.but(surge_of=None))


def _report_clamp(work: Work, count: Count) -> None:
    """An autoscaler's count outside Git's bounds (or bounds Git moved past it) is
    brought into them: the one write the job makes to a count it does not own."""
    bounds = work.lifecycle.bounds
    assert bounds is not None and count.clamped_from is not None
    low, high = bounds
    side = f"below minReplicas {low}" if count.clamped_from < low \
        else f"above maxReplicas {high}"
    work.event("Normal", "ReplicasClamped", None, (
        f"spec.replicas {count.clamped_from} is {side}: set to {count.replicas}"))


def _scale(work: Work) -> None:
    """Open Create or Delete operations to reach the desired number of Instances."""
    filling = [row for row in work.rows.values() if counts_toward_desired(work, row)]
    want = work.lifecycle.replicas
    if len(filling) < want:
        used = set(work.rows) | set(work.groups)
        index = 0
        for _ in range(min(want - len(filling), _room(work, want, len(filling)))):
            while index in used:
                index += 1
            used.add(index)
            work.put(open_create(work, index))
        return
    if len(filling) > want:
        # instances.txt: keep first the Instances a multi-pod surge is handing over,
        # with their replacements; then Ready Instances (``is_ready``: serving now, not
        # just in phase Ready), lowest indices first. A single-pod surge is an Instance
        # like the others here.
        def handing_over(row: Row) -> bool:
            operation = row.operation
            if operation is not None and replaced_whole(work, operation) \
                    and operation.step != Step.SURGE_CREATE:
                return True  # a source, which fills the place until it hands over
            # a replacement, which fills it after
            return row.surge_of is not None and row.surge_of in work.rows

        def rank(row: Row) -> tuple[bool, bool, int]:
            return (not handing_over(row), not is_ready(work, row), row.index)

        keep = {row.index for row in sorted(filling, key=rank)[:want]}
        for row in filling:
            if row.index not in keep:
                work.put(open_delete(work, row, "scaled down"))


def _room(work: Work, want: int, filling: int) -> int:
    """How many Instances may be created now without more live pods than the strategy
    allows: the desired count (plus maxSurge under SurgeThenDrain). An Instance being
    deleted holds its place until its pods are terminating: scaled down and straight
    back up, a component does not run its old gangs and new ones side by side."""
    leaving = sum(1 for row in work.rows.values() if row.phase == Phase.DELETING and any(
        not P.is_terminating(p) and not P.has_ended(p) for p in work.pods_of(row.index)))
    if not leaving:
        return want - filling
    ceiling = want
    if work.lifecycle.strategy == Strategy.SURGE_THEN_DRAIN:
        surge = scaled_value(work.settings.max_surge, want)
        ceiling += want if surge is None else surge
    return max(0, ceiling - filling - leaving)


def _replica(work: Work, rollout: RolloutOutcome,
             count: Count) -> tuple[Json, tuple[Row, ...]]:
    """The InferenceReplica as this pass leaves it (spec from the repository and, when
    an autoscaler owns it, the count; status from the rows and the pods), and the rows
    it stores."""
    desired, observed = work.desired, work.observed
    previous = observed.replica or {}
    ordered = [work.rows[index] for index in sorted(work.rows)]
    status = component_status(work, ordered, work.previous, rollout)
    # The scale subresource reads both: who set the count, and the pods that serve.
    status["replicasFrom"] = count.source
    status["selector"] = ",".join(f"{k}={v}" for k, v in serving_selector(desired).items())
    rows = tuple(_seen(work, row) for row in ordered)
    status["instances"] = encode_rows([row.for_storage() for row in rows])
    if work.retries:
        status["revisionRetries"] = work.retries
    metadata = copy.deepcopy(previous.get("metadata") or {})
    metadata.update({"name": desired.name, "namespace": desired.namespace})
    # A reset or a release is done once: the annotation that asked for it goes.
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items()
                   if k not in (RESET_ANNOTATION, RELEASE_ANNOTATION)}
    if annotations or "annotations" in metadata:
        metadata["annotations"] = annotations
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
    if lifecycle.bounds is not None:
        spec["minReplicas"], spec["maxReplicas"] = lifecycle.bounds
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec,
            "status": status}, rows


def _seen(work: Work, row: Row) -> Row:
    """The row as the status keeps it, with its pods as this pass saw them (the next
    pass's repairs compare restarts with them)."""
    return row.but(pods=tuple(P.pod_row(p) for p in work.pods_of(row.index)
                              if not P.is_terminating(p)))


def _object_part(replica: Json) -> tuple[Any, ...]:
    """What a write of the InferenceReplica's object (not its status) sets."""
    metadata = replica.get("metadata") or {}
    return (replica.get("spec"), metadata.get("labels") or {}, metadata.get("annotations") or {})


def _replica_changed(previous: Json | None, replica: Json) -> bool:
    if previous is None:
        return True
    return (previous.get("spec") != replica["spec"]
            or previous.get("status") != replica["status"]
            or ((previous.get("metadata") or {}).get("annotations") or {})
            != (replica["metadata"].get("annotations") or {}))

