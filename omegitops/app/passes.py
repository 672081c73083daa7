"""The imperative shell of a run: observe the cluster, plan, apply, repeat.

Observation is a constant number of list calls per pass, whatever the number
of components. Each component's plan is applied in order: its
InferenceReplica first (so every operation is recorded before its pods are
touched), then the pod and object actions, then the events. A failure stops
that component's pass where it is; the recorded operation lets the next
pass carry on from there, so nothing is lost or done twice. Different
InferenceServices' plans go side by side where the backend waits on a server
(``Cluster.apply_workers``, app/batches.py); one service's in their order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from omegitops.app.batches import in_batches
from omegitops.cluster.base import (
    CONTROLLER_REVISION,
    INFERENCE_REPLICA,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    POD_GROUP,
    SERVICE,
    SERVING_GATE,
    Cluster,
    side_by_side,
    trim_pod,
)
from omegitops.cluster.errors import (
    AlreadyExists,
    Conflict,
    CreateRefused,
    Forbidden,
    LeaseLost,
    NameTaken,
    NotFound,
    Transient,
)
from omegitops.cluster.sequences import SEQUENCE_ANNOTATION, sequence_value
from omegitops.lifecycle.canary import steps_of
from omegitops.lifecycle.converged import is_converged
from omegitops.lifecycle.groups import Member, batch_of, group_views
from omegitops.lifecycle.planner import Plan, converged_plan, plan_component
from omegitops.lifecycle.scaling import count_of
from omegitops.manifests.load import ServiceComponent
from omegitops.model.actions import (
    Action,
    ApplyObject,
    CreatePod,
    DeleteObject,
    DeletePod,
    Event,
    PatchImages,
    SetServing,
)
from omegitops.model.groups import GroupView
from omegitops.model.ids import ComponentKey
from omegitops.model.outbox import OUTBOX
from omegitops.model.replica import decode_rows, encode_rows, replica_name, stored_rows
from omegitops.model.state import Row
from omegitops.render.component import DesiredComponent, ObservedComponent
from omegitops.render.desired import build_desired
from omegitops.render.resolve import OMENATIVE, RUNTIME, ComponentLifecycle, Resolved
from omegitops.render.revisions import pack_revision, stored_templates
from omegitops.render.templates import (
    LABEL_COMPONENT,
    LABEL_INDEX,
    LABEL_ISVC,
    MANAGED,
    MANAGED_BY,
)
from omegitops.util.errors import ClusterError
from omegitops.util.gcpause import without_gc_pauses
from omegitops.util.times import format_time

log = logging.getLogger(__name__)


@dataclass
class Observation:
    """Everything omegitops manages, listed once per pass."""

    pods: dict[ComponentKey, list[dict[str, Any]]] = field(default_factory=dict)
    replicas: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    revisions: dict[ComponentKey, list[dict[str, Any]]] = field(default_factory=dict)
    services: dict[ComponentKey, dict[str, dict[str, Any]]] = field(default_factory=dict)
    podgroups: dict[ComponentKey, dict[str, dict[str, Any]]] | None = None
    # Every node by name, for the migrations off those going away (None: not listed).
    nodes: dict[str, dict[str, Any]] | None = None
    # The names of the nodes that take pods (not cordoned): with ``nodes``.
    open_nodes: frozenset[str] = frozenset()
    # The components' PodDisruptionBudgets, kept where the nodes are listed (None: not).
    budgets: dict[ComponentKey, dict[str, dict[str, Any]]] | None = None

    def component(self, namespace: str, isvc: str, component: str) -> ObservedComponent:
        key = ComponentKey(namespace, isvc, component)
        groups = None
        if self.podgroups is not None:
            groups = self.podgroups.get(key, {})
        pods = self.pods.get(key, [])
        return ObservedComponent(
            replica=self.replicas.get((namespace, f"{isvc}-{component}")),
            pods=pods,
            revisions=self.revisions.get(key, []),
            services=self.services.get(key, {}),
            podgroups=groups,
            nodes=_nodes_of(self.nodes, self.open_nodes, pods),
            budgets=None if self.budgets is None else self.budgets.get(key, {}),
        )


def _nodes_of(nodes: dict[str, dict[str, Any]] | None, open_nodes: frozenset[str],
              pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    """The nodes ``pods`` run on, and what a migration reads of the others (a cluster
    cordoned whole has nowhere to migrate to), under the key ``""``: which of these
    nodes take pods (``open``) and whether any other node does (``elsewhere``).

    Never the whole list of nodes that take pods: it went into every component's
    converged fingerprint, 17,500 fingerprints of 6,800 names each at 10,000 services
    (a third of a pass encoding them), and a node added or cordoned anywhere moved
    every fingerprint, so that each component was planned and written again."""
    if nodes is None:
        return None
    names = {(p.get("spec") or {}).get("nodeName") for p in pods}
    chosen = {name: nodes[name] for name in sorted(n for n in names if n and n in nodes)}
    own = [name for name in chosen if name in open_nodes]
    chosen[""] = {"open": own, "elsewhere": len(open_nodes) > len(own)}
    return chosen


def _take_nodes(seen: Observation, nodes: dict[str, dict[str, Any]] | None) -> None:
    """File the nodes, and which take pods, once a pass rather than once a component.
    Without nodes there are no budgets: none would be kept right without migrations."""
    seen.nodes = nodes
    if nodes is None:
        seen.budgets = None
    seen.open_nodes = frozenset(name for name, node in (nodes or {}).items()
                                if not (node.get("spec") or {}).get("unschedulable"))


def list_nodes(cluster: Cluster) -> dict[str, dict[str, Any]] | None:
    """Every node by name; None when the cluster lists none (``Cluster.lists_nodes``)
    or RBAC does not let the job list them: then a warning, once, and the run goes on
    with no migrations and no PodDisruptionBudgets (``Cluster.stop_listing_nodes``).
    Any other failure fails the observation, as a failed LIST of a managed kind does
    (nothing is written after a failed read)."""
    if not cluster.lists_nodes:
        return None
    try:
        return {n["metadata"]["name"]: n for n in cluster.list_objects(NODE)}
    except Forbidden as err:
        nodes_refused(cluster, err)
        return None


def nodes_refused(cluster: Cluster, err: Exception) -> None:
    """The account may not list (or watch) nodes: say so once, and stop asking."""
    log.warning("cannot list nodes (%s): Instances will not migrate off cordoned or "
                "tainted nodes, and no PodDisruptionBudgets are kept; pipelines/common/rbac.yaml "
                "grants list and watch on nodes", err)
    cluster.stop_listing_nodes()


class NodeKey(NamedTuple):
    """What a watched node's changes are filed under: the node's name. A pass plans the
    components with pods on it (``components_on``)."""

    node: str


def node_key(node: dict[str, Any]) -> NodeKey:
    return NodeKey((node.get("metadata") or {}).get("name", ""))


def components_on(seen: Observation, nodes: set[str]) -> set[ComponentKey]:
    """The components with a pod on one of ``nodes``."""
    return {key for key, pods in seen.pods.items()
            if any((p.get("spec") or {}).get("nodeName") in nodes for p in pods)}


def owner_key(obj: dict[str, Any]) -> ComponentKey:
    """(namespace, service, component) of a managed object, from its labels."""
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    return ComponentKey(meta.get("namespace", ""), labels.get(LABEL_ISVC, ""),
                        labels.get(LABEL_COMPONENT, ""))


def observed_kinds(cluster: Cluster) -> list[str]:
    """The kinds a pass observes on this cluster."""
    kinds = [POD, INFERENCE_REPLICA, CONTROLLER_REVISION, SERVICE]
    if cluster.lists_nodes:
        # A budget that holds a drain back only makes sense where migrations run.
        kinds.append(POD_DISRUPTION_BUDGET)
    return kinds + [POD_GROUP] if cluster.has_kind(POD_GROUP) else kinds


# What a pass keeps of each object of a kind (the others whole), cut as each LIST page
# is read (or as a watched list is read): a pod only the spec fields it reads, so the
# fleet's pods held for the pass are half the size; a revision its templates and runtime
# config as bytes until read (render/revisions.py).
KEPT = {POD: trim_pod, CONTROLLER_REVISION: pack_revision}


def observe(cluster: Cluster) -> Observation:
    """List every managed object: a fixed number of calls, never one per component."""
    seen = Observation()
    # The nodes first: a run whose account may not list them keeps no budgets either.
    nodes = list_nodes(cluster)
    kinds = observed_kinds(cluster)
    if POD_GROUP in kinds:
        seen.podgroups = {}
    if POD_DISRUPTION_BUDGET in kinds:
        seen.budgets = {}
    # Each page is cut down to what a pass keeps as it is read (KEPT), so the whole of a
    # large LIST is never held at once.
    listed = side_by_side({kind: partial(cluster.list_objects, kind, MANAGED,
                                         transform=KEPT.get(kind)) for kind in kinds},
                          threads=cluster.lists_side_by_side)
    for kind, objects in listed.items():
        _file(seen, kind, objects)
    _take_nodes(seen, nodes)
    return seen


def observe_keys(cluster: Cluster, seen: Observation, keys: set[ComponentKey]) -> None:
    """Bring ``seen`` up to date for the components ``keys`` only, from a cluster that
    watches what ``observe`` lists (``Cluster.list_keyed``)."""
    for key in keys:
        seen.pods.pop(key, None)
        seen.revisions.pop(key, None)
        seen.services.pop(key, None)
        if seen.podgroups is not None:
            seen.podgroups.pop(key, None)
        if seen.budgets is not None:
            seen.budgets.pop(key, None)
    for namespace, isvc, component in keys:
        # Where Observation.component looks the replica up, and the planner names it.
        seen.replicas.pop((namespace, replica_name(isvc, component)), None)
    for kind in observed_kinds(cluster):
        _file(seen, kind, cluster.list_keyed(kind, MANAGED, keys, KEPT.get(kind)))
    _take_nodes(seen, list_nodes(cluster))


def _file(seen: Observation, kind: str, objects: list[dict[str, Any]]) -> None:
    """Put listed objects of one kind, as KEPT cut them, where ``Observation.component``
    looks for them."""
    if kind == POD:
        for pod in objects:
            seen.pods.setdefault(owner_key(pod), []).append(pod)
    elif kind == INFERENCE_REPLICA:
        for replica in objects:
            meta = replica["metadata"]
            seen.replicas[(meta.get("namespace", ""), meta["name"])] = replica
    elif kind == CONTROLLER_REVISION:
        for revision in objects:
            seen.revisions.setdefault(owner_key(revision), []).append(revision)
    elif kind == SERVICE:
        for service in objects:
            seen.services.setdefault(owner_key(service), {})[service["metadata"]["name"]] = service
    elif kind == POD_DISRUPTION_BUDGET and seen.budgets is not None:
        for budget in objects:
            seen.budgets.setdefault(owner_key(budget), {})[budget["metadata"]["name"]] = budget
    elif kind == POD_GROUP and seen.podgroups is not None:
        for group in objects:
            seen.podgroups.setdefault(owner_key(group), {})[group["metadata"]["name"]] = group


@dataclass
class PassResult:
    now: datetime
    # (None, its plan) for a component torn down: the repository no longer has it.
    plans: list[tuple[ServiceComponent | None, Plan]] = field(default_factory=list)
    applied: int = 0
    errors: list[str] = field(default_factory=list)
    # InferenceReplicas no component of the repository accounts for, left alone (no
    # --prune, or kept by it): (namespace/name, its (namespace, service, component)).
    orphans: list[tuple[str, ComponentKey]] = field(default_factory=list)
    # False when a LIST failed: nothing was planned or written, and the work is unknown.
    observed: bool = True
    # True when RBAC does not grant what the run needs: nothing was written, and the
    # run stops (errors holds one line per missing permission).
    forbidden: bool = False
    # A pass that planned only what changed (omegitops.app.incremental): the last plan of
    # every other component, already applied, which still counts for busy and wake_at.
    carried: list[tuple[ServiceComponent | None, Plan]] = field(default_factory=list)
    # Components whose plan or writes failed this pass: planned again on the next.
    failed: set[ComponentKey] = field(default_factory=set)
    # How many of ``errors`` were the cluster's passing faults (Transient: a timeout, a
    # 5xx, an API server restarting), which the next pass carries on from.
    transient: int = 0
    # Every managed InferenceReplica as the pass leaves it (observed, then as each write
    # stored it), by (namespace, name): the run's table and report read them instead of
    # a LIST of their own. None when the pass did not observe everything itself.
    replicas: dict[tuple[str, str], dict[str, Any]] | None = None

    @property
    def passing_faults_only(self) -> bool:
        """Errors, all of them transient: a run whose later pass goes clean succeeded."""
        return bool(self.errors) and self.transient == len(self.errors)

    @property
    def all_plans(self) -> list[tuple[ServiceComponent | None, Plan]]:
        return self.plans + self.carried

    @property
    def busy(self) -> bool:
        # A pass that could not observe knows nothing: treat it as busy so that
        # --until-idle tries again rather than stopping as if all were done.
        return not self.observed or any(plan.busy for _, plan in self.all_plans)

    @property
    def moved(self) -> bool:
        """Whether the pass changed the cluster (a fingerprint recorded alone does not:
        nothing will react to it)."""
        return self.applied > 0 and any(not plan.is_noop for _, plan in self.plans)

    @property
    def wake_at(self) -> datetime | None:
        wakes = [plan.wake_at for _, plan in self.all_plans if plan.wake_at]
        return min(wakes) if wakes else None


@dataclass(frozen=True)
class Pruning:
    """``--prune``: tear down the components the repository no longer has.

    ``keep`` names the services (namespace, name) that must be left alone even
    so: those whose manifest is in the repository but invalid this run, since an
    invalid manifest is never a reason to delete anything.
    """

    keep: frozenset[tuple[str, str]] = frozenset()


@without_gc_pauses  # see omegitops/util/gcpause.py: a third of a big pass was full collections
def plan_all(cluster: Cluster, items: list[ServiceComponent],
             prune: Pruning | None = None, seen: Observation | None = None,
             only: set[ComponentKey] | None = None) -> PassResult:
    """Observe once (unless ``seen`` is given) and plan every managed component, or
    those whose key is in ``only``; no writes."""
    now = cluster.now()
    result = PassResult(now=now)
    if seen is None:
        seen = observe(cluster)
        result.replicas = dict(seen.replicas)
    # Wanted even when its plan fails: a component that cannot be planned is never
    # torn down by --prune as if it had left the repository.
    wanted = {component_key(item) for item in items if item.lifecycle.managed}
    for item, planned, error in plan_each(seen, items, now, only):
        if error is not None:
            result.errors.append(error)
            result.failed.add(component_key(item))
        elif planned is not None:
            result.plans.append((item, planned[2]))
    result.plans = held_by_moving_groups(result.plans)
    for key, replica, owner in unaccounted_replicas(seen, wanted):
        if only is not None and owner not in only:
            continue
        if prune is None or owner[:2] in prune.keep:
            result.orphans.append((f"{key[0]}/{key[1]}", owner))
            continue
        observed = seen.component(*owner)
        try:
            plan = plan_component(teardown_desired(replica, observed), observed, now)
        except Exception as err:  # noqa: BLE001 - one component's failure stays its own
            result.errors.append(f"{key[0]}/{key[1]}: teardown not planned, "
                                 f"{type(err).__name__}: {err}")
            result.failed.add(owner)
            continue
        result.plans.append((None, plan))
    return result


def held_by_moving_groups(plans: list[tuple[ServiceComponent | None, Plan]]
                          ) -> list[tuple[ServiceComponent | None, Plan]]:
    """A member its group holds stays under way while another member's record changes
    this pass: its view of the group was computed before, and the next pass may let it
    move (a pass that rests on a stale view would wait for the next run)."""
    changed = {plan_key(plan) for _, plan in plans
               if plan.replica_changed and not plan.bookkeeping}
    kept = []
    for item, plan in plans:
        decision = plan.decision
        if decision is not None and decision.group is not None and decision.group_held \
                and not plan.busy:
            key = plan_key(plan)
            if any(ComponentKey(key.namespace, key.service, member) in changed
                   for member in decision.group.members if member != key.component):
                plan = replace(plan, busy=True)
        kept.append((item, plan))
    return kept


def plan_key(plan: Plan) -> ComponentKey:
    """(namespace, service, component) of the component a plan is for."""
    return replica_key(plan.replica)


def replica_key(replica: dict[str, Any]) -> ComponentKey:
    """(namespace, service, component) an InferenceReplica belongs to, from its spec."""
    spec = replica.get("spec") or {}
    return ComponentKey(replica["metadata"].get("namespace", ""),
                        spec.get("inferenceService", ""), spec.get("component", ""))


def unaccounted_replicas(seen: Observation, wanted: set[ComponentKey]
                         ) -> Iterator[tuple[tuple[str, str], dict[str, Any], ComponentKey]]:
    """(key, InferenceReplica, its component) for each replica the cluster has that no
    component in ``wanted`` accounts for: its service gone from the repository, the
    component dropped from it, or the service in another mode. The reconciler keeps or
    prunes them; the plan shows them as removals."""
    for key, replica in sorted(seen.replicas.items()):
        owner = replica_key(replica)
        if owner not in wanted:
            yield key, replica, owner


def component_key(item: ServiceComponent) -> ComponentKey:
    """(namespace, service, component) of a resolved component."""
    meta = item.service.data["metadata"]
    return ComponentKey(meta.get("namespace") or "default", meta["name"],
                        item.lifecycle.component)


def planning_error(item: ServiceComponent, err: Exception) -> str:
    """The one line that names a component whose plan raised, and why.

    Each component is planned inside its own boundary: input that validation let
    through and the planner trips on is that component's error, never the pass's.
    """
    log.debug("planning %s failed", item.service.id, exc_info=err)
    namespace, name, component = component_key(item)
    reason = " ".join(str(err).split()) or "no message"
    if len(reason) > 200:
        reason = reason[:197] + "..."
    return (f"{item.service.path}: {namespace}/{name} {component}: not planned, "
            f"{type(err).__name__}: {reason}")


def plan_item(seen: Observation, item: ServiceComponent, now: datetime,
              grouped: Grouped | None = None,
              ) -> tuple[DesiredComponent, ObservedComponent, Plan]:
    """Render one managed component and plan it against what ``seen`` holds for it (and,
    in a rollout group, against what ``grouped`` says of the group)."""
    key = component_key(item)
    observed = seen.component(*key)
    desired = (grouped.desired.get(key) if grouped else None) or desired_of(item, observed)
    if grouped is not None:
        observed.group = grouped.views.get(key)
    if is_converged(desired, observed):
        return desired, observed, converged_plan(desired, observed)
    return desired, observed, plan_component(desired, observed, now)


def desired_of(item: ServiceComponent, observed: ObservedComponent) -> DesiredComponent:
    """What the repository asks of one managed component, rendered."""
    desired = build_desired(item.service.data, item.runtime.data if item.runtime else None,
                            item.lifecycle, observed.revisions, observed.replica,
                            item.operator, item.templates, item.revision_hash)
    if item.lifecycle.settings.paused:
        desired = replace(desired, paused_at=paused_at(item))
    return desired


@dataclass
class Grouped:
    """The rollout groups of a pass: each member's view of its group, and the members'
    desired components rendered to compute it (planning them uses these)."""

    views: dict[ComponentKey, GroupView] = field(default_factory=dict)
    desired: dict[ComponentKey, DesiredComponent] = field(default_factory=dict)
    # The members of each member's group, by key.
    siblings: dict[ComponentKey, set[ComponentKey]] = field(default_factory=dict)


def rollout_groups(seen: Observation, items: list[ServiceComponent]) -> Grouped:
    """The pure pre-pass of rollout groups (lifecycle/groups.py) over what ``seen`` holds
    of every member: a member's count and target revision from Git, its Instances and
    canary step as observed."""
    grouped = Grouped()
    found: dict[tuple[str, str, str], list[tuple[ComponentKey, ServiceComponent]]] = {}
    for item in items:
        group = item.lifecycle.fields.get("group")
        if not item.lifecycle.managed or group is None or not isinstance(group.value, dict):
            continue
        key = component_key(item)
        found.setdefault((key.namespace, key.service, str(group.value.get("name"))),
                         []).append((key, item))
    for entries in found.values():
        members = []
        for key, item in entries:
            observed = seen.component(*key)
            try:
                desired = desired_of(item, observed)
            except Exception as err:  # noqa: BLE001 - its own plan names the error
                log.debug("rollout group member %s not rendered: %s", key, err)
                continue
            grouped.desired[key] = desired
            replica = observed.replica
            count = count_of(desired, replica).replicas
            members.append(Member(key.component, count, desired.revision,
                                  stored_rows(replica),
                                  ((replica or {}).get("status") or {}).get("canary"),
                                  batch_of(desired.lifecycle.settings, count)))
        group = entries[0][1].lifecycle.fields["group"].value
        steps = steps_of(entries[0][1].lifecycle)
        views = group_views(group, members, steps)
        keys = {key for key, _ in entries}
        for key, _ in entries:
            grouped.siblings[key] = keys
            if key.component in views:
                grouped.views[key] = views[key.component]
    return grouped


PlannedItem = tuple[DesiredComponent, ObservedComponent, Plan]


def plan_each(seen: Observation, items: list[ServiceComponent], now: datetime,
              only: set[ComponentKey] | None = None,
              ) -> Iterator[tuple[ServiceComponent, PlannedItem | None, str | None]]:
    """Each component of ``items`` (those whose key is in ``only``) with its plan, or the
    error that stopped it: ``(item, (desired, observed, plan), None)``, ``(item, None,
    error)``, and ``(item, None, None)`` for a component omegitops does not manage.
    Each is planned inside its own boundary: one component's failure stays its own.
    A member of a rollout group is planned with every other member (what one does
    changes what the others may do)."""
    grouped = rollout_groups(seen, items)
    if only is not None:
        only = only | {sibling for key in only for sibling in grouped.siblings.get(key, ())}
    for item in items:
        if only is not None and component_key(item) not in only:
            continue
        if not item.lifecycle.managed:
            yield item, None, None
            continue
        try:
            planned = plan_item(seen, item, now, grouped)
        except Exception as err:  # noqa: BLE001 - one component's failure stays its own
            yield item, None, planning_error(item, err)
            continue
        yield item, planned, None


def paused_at(item: ServiceComponent) -> str | None:
    """The file whose field pauses the component's rollout in Git (a pass has released
    the files' node trees, so no line)."""
    found = item.lifecycle.fields.get("paused")
    manifest = item.runtime if found is not None and found.source == RUNTIME else item.service
    return None if manifest is None else manifest.path


def teardown_desired(replica: dict[str, Any], observed: ObservedComponent) -> DesiredComponent:
    """What a removed component is reconciled toward: no Instances, then nothing."""
    spec = replica.get("spec") or {}
    meta = replica["metadata"]
    component = spec.get("component", "engine")
    lifecycle = ComponentLifecycle(
        component=component, mode=Resolved(OMENATIVE, "default"),
        shape=spec.get("shape") or "single", worker_size=int(spec.get("workerSize") or 0),
        replicas=0)
    revision = spec.get("revision") or ""
    templates = stored_templates(observed.revisions, revision) or {}
    return DesiredComponent(namespace=meta.get("namespace", ""),
                            isvc=spec.get("inferenceService", ""), component=component,
                            lifecycle=lifecycle, templates=templates, revision=revision,
                            teardown=True)


@without_gc_pauses
def run_pass(cluster: Cluster, items: list[ServiceComponent],
             prune: Pruning | None = None, seen: Observation | None = None,
             only: set[ComponentKey] | None = None) -> PassResult:
    """Observe, plan and apply one pass (of the components in ``only``, on ``seen``,
    when given: see ``plan_all``)."""
    try:
        result = plan_all(cluster, items, prune, seen, only)
    except ClusterError as err:
        return unobserved(cluster, err)
    if not _may_write(cluster, result, prune):
        return result
    writes = Writes()
    # Another run may hold the cluster once the Lease is lost: this one writes nothing more.
    workers = cluster.apply_workers
    for (plan, done), outcome in in_batches(_batches(result.plans, workers > 1),
                                            partial(_apply_one, cluster, result.now),
                                            workers, fatal=(LeaseLost,)):
        writes.count += done.count
        writes.replicas.update(done.replicas)
        if isinstance(outcome, Conflict):
            # Someone else wrote the InferenceReplica: plan it again next pass.
            log.info("%s: %s; planning it again next pass",
                     plan.replica["metadata"]["name"], outcome)
            result.failed.add(plan_key(plan))
            result.replicas = None  # not known as stored: the run lists them again
        elif isinstance(outcome, ClusterError):
            result.replicas = None
            result.errors.append(f"{plan.replica['metadata']['name']}: {outcome}")
            result.transient += isinstance(outcome, Transient)
            result.failed.add(plan_key(plan))
        elif isinstance(outcome, Exception):
            raise outcome
    result.applied = writes.count
    if result.replicas is not None:
        for key, stored in writes.replicas.items():
            if stored is None:
                result.replicas.pop(key, None)
            else:
                result.replicas[key] = stored
    return result


def _batches(plans: list[tuple[ServiceComponent | None, Plan]], by_service: bool,
             ) -> list[list[tuple[Plan, Writes]]]:
    """The plans to apply, each with the record of its writes. ``by_service``: in
    batches of one InferenceService's components in their order, so that what one of
    them writes (its events, its rollout group's moves) is written in the order it was
    planned while different services' plans go side by side (``in_batches``); else a
    batch per plan, in the plans' order."""
    if not by_service:
        return [[(plan, Writes())] for _, plan in plans]
    batches: dict[tuple[str, str], list[tuple[Plan, Writes]]] = {}
    for _, plan in plans:
        meta, spec = plan.replica["metadata"], plan.replica.get("spec") or {}
        key = (meta.get("namespace") or "", spec.get("inferenceService") or meta["name"])
        batches.setdefault(key, []).append((plan, Writes()))
    return list(batches.values())


def _apply_one(cluster: Cluster, now: datetime, planned: tuple[Plan, Writes]) -> int:
    plan, writes = planned
    return apply_plan(cluster, plan, now, writes)


def unobserved(cluster: Cluster, err: ClusterError) -> PassResult:
    """The pass whose observation failed. A failed LIST leaves the observation
    incomplete: acting on part of it could recreate pods that exist or drop rows whose
    pods were not listed. The pass is abandoned before any write and reported as
    failed; the next one observes again."""
    result = PassResult(now=cluster.now(), observed=False)
    result.errors.append(f"observing the cluster: {err}")
    result.transient = int(isinstance(err, Transient))
    return result


def _may_write(cluster: Cluster, result: PassResult, prune: Pruning | None) -> bool:
    """Before the run's first write, whether RBAC grants all the run will use.

    Asked once per run (the cluster keeps the answer): a missing permission found
    halfway through would leave components half-moved, each stopped at a different
    step, while the job goes on failing on every pass.
    """
    writing = {plan.replica["metadata"].get("namespace") or "default"
               for _, plan in result.plans
               if plan.replica_changed or plan.actions or plan.events}
    if not writing:
        return True
    try:
        missing = cluster.missing_permissions(prune is not None, writing)
    except ClusterError as err:
        result.errors.append(f"checking the job's permissions: {err}")
        return False
    if missing:
        result.errors.extend(missing)
        result.forbidden = True
        return False
    return True


@dataclass
class Writes:
    """The writes of a pass so far, kept when one fails halfway through a plan."""

    count: int = 0
    # Each InferenceReplica as written (None: deleted), by (namespace, name).
    replicas: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)


def apply_plan(cluster: Cluster, plan: Plan, now: datetime, writes: Writes | None = None) -> int:
    """Apply one component's plan in order; returns the number of writes.

    Its events were recorded in the InferenceReplica's outbox by the plan: they are
    sent after the pod actions, then the outbox is cleared. A pass that stops
    before that leaves them in the outbox, and the next pass sends them.
    """
    writes = writes if writes is not None else Writes()
    start = writes.count
    # Read before any write, so that a refusal stops the component before it moves.
    uid = _service_uid(cluster, plan.replica) if plan.events else None
    # A new revision is stored before the InferenceReplica that may name it: a row is
    # never on a revision whose templates a later pass cannot read (an in-place update
    # recorded and then cut short would otherwise be finished blind). Storing it first
    # touches no pod, and a pass cut after it finds it stored.
    new_revisions = [a for a in plan.actions if _stores_revision(a)]
    for action in new_revisions:
        _apply(cluster, action)
        writes.count += 1
    stored = plan.replica
    name = (plan.replica["metadata"].get("namespace") or "", plan.replica["metadata"]["name"])
    if plan.replica_changed:
        stored = _write_replica(cluster, plan, writes)
        writes.replicas[name] = stored
        if not plan.bookkeeping:
            _write_service_status(cluster, plan.replica, writes)
    for action in plan.actions:
        if _stores_revision(action):
            continue  # stored above
        try:
            _apply(cluster, action)
        except CreateRefused as err:
            # As a StatefulSet reports a pod it cannot create: a FailedCreate warning on
            # the InferenceService with the API server's words, the refusal recorded on
            # the Instance's operation (its waiting, its deadline), and the component's
            # error for this pass.
            uid = uid or _service_uid(cluster, plan.replica)
            source = stored["metadata"].get("uid") or stored["metadata"]["name"]
            # Neither write counts as the pass moving anything: nothing reacts to them,
            # and the run waits for the operation's deadline rather than asking again.
            cluster.record_event(_event(plan.replica, Event("Warning", "FailedCreate",
                                                            str(err)), now, uid, source))
            if isinstance(action, CreatePod) and stored.get("metadata", {}).get(
                    "resourceVersion"):
                _record_refusal(cluster, stored, action.pod, str(err), now)
            raise
        writes.count += 1
        if isinstance(action, DeleteObject) and action.kind == INFERENCE_REPLICA:
            writes.replicas[(action.namespace, action.name)] = None
    source = stored["metadata"].get("uid") or stored["metadata"]["name"]
    for event in plan.events:
        if cluster.record_event(_event(plan.replica, event, now, uid, source)) is not None:
            writes.count += 1
    if plan.clear_outbox:
        writes.replicas[name] = _clear_outbox(cluster, stored)
        writes.count += 1
    return writes.count - start


def _stores_revision(action: object) -> bool:
    return isinstance(action, ApplyObject) and not action.exists and \
        action.obj.get("kind") == CONTROLLER_REVISION


def _service_uid(cluster: Cluster, replica: dict[str, Any]) -> str | None:
    return cluster.inference_service_uid(replica["metadata"]["namespace"],
                                         replica["spec"]["inferenceService"])


def _write_replica(cluster: Cluster, plan: Plan, writes: Writes) -> dict[str, Any]:
    """Write the InferenceReplica: its status, its object, or both (a new one is both);
    returns it as stored."""
    replica = plan.replica
    meta = replica["metadata"]
    if not meta.get("resourceVersion"):
        try:
            created = cluster.create_object(
                {k: v for k, v in replica.items() if k != "status"})
        except AlreadyExists as err:
            # A create that timed out may have landed: re-read and plan again next pass.
            raise Conflict(str(err)) from err
        writes.count += 1
        replica = {**replica, "metadata": created["metadata"]}
        stored = cluster.replace_status(replica)
        writes.count += 1
        return stored
    # Status first: it records what this pass does (a reset, a release), while the
    # object write drops the annotations that asked for it. The other way round, a
    # failed status write after the object write lost the operator's request for good;
    # this way a failed object write leaves the annotation, and the next pass finds the
    # request already done (a reset or a release only acts on what is still Failed or held).
    stored = replica
    if plan.status_changed:
        stored = cluster.replace_status(replica)
        writes.count += 1
    if plan.object_changed:
        stored = cluster.replace_object({**replica, "metadata": {
            **replica["metadata"], "resourceVersion": stored["metadata"]["resourceVersion"]}})
        writes.count += 1
    return stored


def _clear_outbox(cluster: Cluster, stored: dict[str, Any]) -> dict[str, Any]:
    """Empty the outbox once its events are sent: one status write on what is stored."""
    status = {k: v for k, v in (stored.get("status") or {}).items() if k != OUTBOX}
    return cluster.replace_status({**stored, "status": status})


def _write_service_status(cluster: Cluster, replica: dict[str, Any], writes: Writes) -> None:
    """Where the InferenceService itself lives in the cluster (OME's CRDs installed),
    its status.components.{component}.lifecycle gets the component's totals and
    rolloutHold, as the documents show them. Backends without it skip this."""
    update = getattr(cluster, "update_service_status", None)
    if update is None:
        return
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
    if update(replica["metadata"]["namespace"], spec["inferenceService"], spec["component"],
              totals):
        writes.count += 1


def _apply(cluster: Cluster, action: Action) -> None:
    if isinstance(action, CreatePod):
        try:
            cluster.create_pod(action.pod)
        except AlreadyExists as err:
            # Created by a pass that stopped before recording the next step, if the pod
            # there is ours; a stranger's is named, never taken for ours.
            stranger = _stranger(cluster, action.pod)
            if stranger is not None:
                raise NameTaken(stranger) from err
    elif isinstance(action, DeletePod):
        try:
            cluster.delete_pod(action.namespace, action.name, action.grace_seconds)
        except NotFound:
            pass
    elif isinstance(action, SetServing):
        seen = None if action.seen is None else {"metadata": {"name": action.name}, "status": {
            "conditions": [dict(condition) for condition in action.seen]}}
        cluster.set_pod_condition(action.namespace, action.name, SERVING_GATE, action.serving,
                                  reason="OMENative",
                                  message="in rotation" if action.serving else "out of rotation",
                                  seen=seen)
    elif isinstance(action, PatchImages):
        cluster.patch_pod_images(action.namespace, action.name, dict(action.images),
                                 dict(action.labels))
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


def _record_refusal(cluster: Cluster, stored: dict[str, Any], pod: dict[str, Any], message: str,
                    now: datetime) -> None:
    """Put the API server's refusal of ``pod`` on its Instance's operation
    (``operation.refused``), where the next plan names it and judges its deadline."""
    try:
        index = int(pod["metadata"]["labels"][LABEL_INDEX])
    except (KeyError, ValueError):
        return
    status = dict(stored.get("status") or {})
    rows = [Row.from_storage(row) for row in decode_rows(status.get("instances"))]
    for number, row in enumerate(rows):
        if row.index == index and row.operation is not None:
            known = row.operation.refused or {}
            if (known.get("pod"), known.get("message")) == (pod["metadata"]["name"], message):
                return  # recorded by an earlier pass
            rows[number] = row.with_op(refused={"pod": pod["metadata"]["name"],
                                                "message": message,
                                                "time": format_time(now.timestamp())})
            status["instances"] = encode_rows([row.for_storage() for row in rows])
            cluster.replace_status({**stored, "status": status})
            return


def _stranger(cluster: Cluster, pod: dict[str, Any]) -> str | None:
    """Why the pod holding ``pod``'s name is not the one omegitops made, or None."""
    meta = pod["metadata"]
    found = cluster.get_object("Pod", meta["namespace"], meta["name"])
    if found is None:
        return None  # gone meanwhile: the next pass creates it
    labels = (found.get("metadata") or {}).get("labels") or {}
    mine = {key: meta["labels"].get(key) for key in (MANAGED_BY, LABEL_ISVC, LABEL_COMPONENT,
                                                       LABEL_INDEX)}
    differ = [key for key, value in mine.items() if labels.get(key) != value]
    if not differ:
        return None
    shown = ", ".join(f"{key}={labels[key]!r}" if key in labels else f"no {key}"
                      for key in differ)
    return (f"create Pod {meta['name']} failed: pods \"{meta['name']}\" already exists and is "
            f"not omegitops' ({shown}): delete or rename that pod, and the Instance is built")


def _event(replica: dict[str, Any], event: Event, now: datetime, uid: str | None,
           source: str) -> dict[str, Any]:
    """The core/v1 Event on the InferenceService (its uid when the API holds it, so that
    ``kubectl describe inferenceservice`` lists it), marked with its outbox entry."""
    namespace = replica["metadata"]["namespace"]
    name = replica["spec"]["inferenceService"]
    stamp = format_time(now.timestamp())
    involved = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                "namespace": namespace, "name": name}
    if uid:
        involved["uid"] = uid
    metadata: dict[str, Any] = {"namespace": namespace, "labels": dict(MANAGED)}
    if event.sequence is not None:
        metadata["annotations"] = {SEQUENCE_ANNOTATION: sequence_value(source, event.sequence)}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": involved,
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "source": {"component": "omegitops"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
