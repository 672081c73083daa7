"""The working state of one planning pass over one component.

``Work`` carries what every step function needs: the desired and observed
state, the clock reading, the Instance rows being rewritten, and the actions,
events and wake-ups collected so far. It touches nothing outside itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegitops.model.actions import Action, CreatePod, DeletePod, Event, SetServing
from omegitops.model.settings import ComponentSettings
from omegitops.model.state import Json, Mode, Operation, OperationType, Row, Step
from omegitops.render import pods as P
from omegitops.render.component import DesiredComponent, ObservedComponent
from omegitops.render.instance import InstancePods, PodSpecInput, instance_pods
from omegitops.render.resolve import ComponentLifecycle
from omegitops.render.revisions import stored_templates
from omegitops.render.services import PODGROUP_LABEL, plan_podgroup, podgroup_name
from omegitops.render.templates import OPERATION_ANNOTATION, workers_of
from omegitops.util.times import format_time


@dataclass
class Work:
    desired: DesiredComponent
    observed: ObservedComponent
    now: float
    rows: dict[int, Row] = field(default_factory=dict)
    groups: dict[int, list[Json]] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wakes: list[float] = field(default_factory=list)
    retries: dict[str, Json] = field(default_factory=dict)
    hold: Json | None = None
    # Instances that already took their one step this pass.
    moved: set[int] = field(default_factory=set)
    # Pods per Instance at a stored revision (needed_at).
    sizes: dict[str, int] = field(default_factory=dict)
    # The InferenceReplica's status as the last pass left it, read once (readable_status).
    previous: dict[str, Any] = field(default_factory=dict)

    # -- reading --------------------------------------------------------------

    @property
    def lifecycle(self) -> ComponentLifecycle:
        return self.desired.lifecycle

    @property
    def needed(self) -> int:
        """Pods per Instance at the desired revision."""
        return self.desired.pods_per_instance

    def needed_at(self, revision: str | None) -> int:
        """Pods per Instance at ``revision``: a gang resized by a later revision keeps
        its own size until it moves."""
        if not self.desired.gang or revision is None or revision == self.desired.revision \
                or not self.has_templates(revision):
            return self.needed
        if revision not in self.sizes:  # a stored revision's templates are unpacked to read
            self.sizes[revision] = 1 + workers_of(self.templates(revision),
                                                  self.lifecycle.worker_size)
        return self.sizes[revision]

    def needed_for(self, row: Row) -> int:
        """Pods the Instance of ``row`` needs: at the revision its live pods run (the
        target's once an update has built them), else at the row's."""
        if not self.desired.gang:
            return 1
        return self.needed_of(self.own_pods(row), row.revision)

    def needed_of(self, pods: list[Json], otherwise: str | None = None) -> int:
        """Pods a gang of ``pods`` needs, at the one revision its live pods run (at
        ``otherwise``, or the desired revision, when they run none or several)."""
        if not self.desired.gang:
            return 1
        running = {P.revision_of(p) for p in pods
                   if not P.is_terminating(p) and not P.has_ended(p)}
        return self.needed_at(running.pop() if len(running) == 1 else
                              otherwise or self.desired.revision)

    def pods_of(self, index: int) -> list[Json]:
        """Every pod listed for the Instance at ``index``: its own, a surge's, extras."""
        return self.groups.get(index, [])

    def own_pods(self, row: Row) -> list[Json]:
        """The pods that are the Instance itself (not a surge replacement or an extra)."""
        pods = self.pods_of(row.index)
        if self.desired.gang:
            return list(pods)
        return [p for p in pods if P.ordinal_of(p) == row.own_ordinal]

    def instance(self, row: Row) -> InstancePods:
        return InstancePods(self.needed_for(row), self.own_pods(row))

    def has_templates(self, revision: str | None) -> bool:
        """Whether pods can be built at ``revision``: the desired one, or one whose
        ControllerRevision still stores its templates (one deleted by hand does not)."""
        return revision == self.desired.revision or (
            revision is not None
            and stored_templates(self.observed.revisions, revision) is not None)

    def templates(self, revision: str) -> dict[str, Json]:
        """The pod templates of a revision: the desired ones, or those stored with it
        (the desired ones when it has none: ask ``has_templates`` first)."""
        if revision == self.desired.revision:
            return self.desired.templates
        stored = stored_templates(self.observed.revisions, revision)
        return stored if stored is not None else self.desired.templates

    def pod_input(self, revision: str) -> PodSpecInput:
        desired = self.desired
        # A pod is labelled with the revision whose templates it is built from, never
        # with one whose templates are gone (lifecycle/missing.py rebases the row first).
        if not self.has_templates(revision):
            revision = desired.revision
        templates = self.templates(revision)
        return PodSpecInput(desired.namespace, desired.isvc, desired.component, revision,
                            templates, workers_of(templates, desired.lifecycle.worker_size),
                            desired.gang, desired.pod_metadata)

    @property
    def settings(self) -> ComponentSettings:
        return self.desired.lifecycle.settings

    # -- writing --------------------------------------------------------------

    def put(self, row: Row) -> Row:
        """Record ``row`` as its Instance's row from now on in this pass."""
        self.rows[row.index] = row
        return row

    def event(self, kind: str, reason: str, index: int | None, text: str) -> None:
        where = f"OMENative component={self.desired.component}"
        if index is not None:
            where += f" instance={index}"
        self.events.append(Event(kind, reason, f"{where} {text}"))

    def wake(self, at: float | None) -> None:
        if at is not None and at > self.now:
            self.wakes.append(at)

    def serve(self, pod: Json, serving: bool) -> None:
        meta = pod["metadata"]
        seen = tuple(tuple(sorted(c.items())) for c in
                     (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict))
        self.actions.append(SetServing(meta["namespace"], meta["name"], serving, seen))

    def route(self, pods: list[Json], serving: bool) -> None:
        """Put ``pods`` into rotation (or take them out) through the ``ome.io/serving``
        gate, writing only where it differs; pods going away or ended are left alone."""
        for pod in pods:
            if P.is_terminating(pod) or P.has_ended(pod):
                continue
            if P.gate_set(pod) != serving:
                self.serve(pod, serving)

    def delete_unrouted(self, pods: list[Json], grace: int | None = None) -> None:
        """Delete ``pods`` once the Service no longer routes to them ("deletes them once
        the Service stops routing to them"). One still in rotation, which a pass cut
        short before its unroute leaves, is taken out now, and the pods are deleted
        together by a later pass: an Instance (a gang) goes whole."""
        gated = [p for p in pods
                 if P.gate_set(p) and not P.is_terminating(p) and not P.has_ended(p)]
        if gated:
            self.route(gated, False)
            return
        for pod in pods:
            self.delete(pod, grace)

    def delete(self, pod: Json, grace: int | None = None) -> None:
        if P.is_terminating(pod):
            return
        meta = pod["metadata"]
        self.actions.append(DeletePod(meta["namespace"], meta["name"], grace))

    def operation(self, kind: OperationType, step: Step, strategy: str | None = None,
                  target: str | None = None, mode: Mode | None = None) -> Operation:
        """A new operation, started now, with the deadline instanceReadyTimeout gives."""
        timeout = self.settings.instance_ready_timeout
        return Operation(kind, step, strategy=strategy, started_at=format_time(self.now),
                         deadline=format_time(self.now + timeout) if timeout else None,
                         mode=mode, target_revision=target or None)

    def create_pods(self, row: Row, revision: str, incarnation: int, ordinal: int,
                    existing: list[Json], operation: Operation | None = None) -> list[Json]:
        """Create the pods of ``row`` at ``revision`` that ``existing`` lacks; return them."""
        have = {p["metadata"]["name"] for p in existing}
        wanted = instance_pods(self.pod_input(revision), row.index, incarnation, ordinal)
        missing = [pod for pod in wanted if pod["metadata"]["name"] not in have]
        if not missing:
            return []
        group = plan_podgroup(self.desired, row.index, self.observed.podgroups,
                              len(wanted))
        if group is not None:
            self.actions.append(group)
        avoid = steering(row, revision)
        for pod in missing:
            if avoid:
                _steer_off(pod, avoid)
            if self.observed.podgroups is not None and self.desired.gang:
                pod["metadata"]["labels"][PODGROUP_LABEL] = podgroup_name(self.desired,
                                                                          row.index)
            if operation is not None:
                pod["metadata"]["annotations"][OPERATION_ANNOTATION] = operation.started_at
            self.actions.append(CreatePod(pod))
        return missing


def steering(row: Row, revision: str) -> tuple[str, ...]:
    """The nodes an attempt to build ``revision`` keeps off: the steering ends with the
    revision it was for."""
    if row.avoid_for not in (None, revision):
        return ()
    return row.avoid_nodes or ()


def _steer_off(pod: Json, nodes: tuple[str, ...]) -> None:
    """Keep the pod off nodes where earlier attempts failed for reasons of their own."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                  "values": sorted(nodes)}]}
    affinity = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution",
                                   {"nodeSelectorTerms": []})
    terms = required["nodeSelectorTerms"] or [{}]
    for existing in terms:
        existing.setdefault("matchExpressions", []).extend(term["matchExpressions"])
    required["nodeSelectorTerms"] = terms
