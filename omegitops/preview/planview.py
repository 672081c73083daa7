"""What ``omegitops plan`` shows: revision changes, next steps, warnings; pure.

Everything here takes values (resolved lifecycles, templates, plans) and
returns plain data, so that the command only opens clusters and prints.

The warnings are the ones the documents imply:

- ``InPlaceOnlyWillStall`` (update-strategies.txt "In-place updates"):
  InPlaceOnly refuses any change to a single-pod Instance but the images of
  regular containers; the Instance stays on its old revision and the rollout
  stalls. A gang is not refused: the in-place strategies recreate its pods.
- ``BudgetsCannotMove``: the budgets the strategy reads are all zero, so no
  Instance could ever move (validation refuses this; checked again here on
  the resolved values).
- ``RecreateTakesComponentOffline`` (update-strategies.txt "Pacing with
  rollingUpdate"): RecreatePod with no maxUnavailable lets every Instance
  move at once, which takes the whole component offline; so does a budget
  that covers every Instance.
- ``MinReadyShorterThanProbe`` (min-ready-seconds.txt Step 1): the window
  should be longer than the readiness probe takes to catch a failure, about
  failureThreshold x max(periodSeconds, timeoutSeconds). A window of 0 (no
  warm-up at all, the default) is not a window that is too short, and is
  not reported.
- ``NoInstanceReadyTimeout`` (instances.txt "Operations"): with
  instanceReadyTimeout unset everywhere, operations get no deadline and a
  stuck Instance waits for someone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from omegitops.lifecycle.canary import PROMOTION, allowed_at, steps_of
from omegitops.lifecycle.pause import described
from omegitops.lifecycle.planner import Plan
from omegitops.lifecycle.scaling import AUTOSCALER, GIT
from omegitops.lifecycle.updates import images_only
from omegitops.manifests.load import Loaded, ServiceComponent
from omegitops.model.budgets import BudgetError, scaled_value
from omegitops.model.partition import partition_held
from omegitops.model.replica import replica_name
from omegitops.model.state import Gate, Hold, Json, Operation, OperationType, Phase, Row, Strategy
from omegitops.render.component import DesiredComponent, ObservedComponent
from omegitops.render.resolve import (
    SINGLE,
    SURGE_THEN_DRAIN,
    ComponentLifecycle,
)
from omegitops.render.revisions import stored_templates
from omegitops.render.templates import DEFAULT, LEADER, MAIN_CONTAINER

TEMPLATE = "plan.md.j2"
RECREATE_POD = "RecreatePod"
# Kubernetes' probe defaults (the normalized templates leave them out).
PROBE_DEFAULTS = {"failureThreshold": 3, "periodSeconds": 10, "timeoutSeconds": 1}
SHOWN_CONDITIONS = ("Ready", "RolloutStalled")

IN_PLACE_ONLY_WILL_STALL = "InPlaceOnlyWillStall"
BUDGETS_CANNOT_MOVE = "BudgetsCannotMove"
RECREATE_TAKES_COMPONENT_OFFLINE = "RecreateTakesComponentOffline"
MIN_READY_SHORTER_THAN_PROBE = "MinReadyShorterThanProbe"
NO_INSTANCE_READY_TIMEOUT = "NoInstanceReadyTimeout"
MAX_SURGE = "updateStrategy.rollingUpdate.maxSurge"
MAX_UNAVAILABLE = "updateStrategy.rollingUpdate.maxUnavailable"


# -- template diff ---------------------------------------------------------------

_ABSENT = object()


@dataclass(frozen=True)
class FieldChange:
    """One changed leaf of the pod templates, at a dotted path."""

    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.path}: {show_value(self.old)} → {show_value(self.new)}"


def show_value(value: Any) -> str:
    """A value as one short line: strings bare, the rest as compact JSON."""
    if value is _ABSENT:
        return "(unset)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def template_diff(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    """Changed leaves between two template sets, as dotted paths; pure.

    Mappings are walked key by key; lists whose items all have a ``name``
    (containers, env, volumes, ports) item by name, ``containers[ome-container]``,
    also when the list is added or removed; any other list that differs is one
    change.

    >>> [str(c) for c in template_diff({"a": {"image": "v1"}}, {"a": {"image": "v2"}})]
    ['a.image: v1 → v2']
    """
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in sorted(set(old) | set(new), key=str):
            child = f"{path}.{key}" if path else str(key)
            changes.extend(template_diff(old.get(key, _ABSENT), new.get(key, _ABSENT), child))
        return changes
    if (_named(old) or _named(new)) and _named_or_none(old) and _named_or_none(new):
        before = {item["name"]: item for item in old or ()} if old is not _ABSENT else {}
        after = {item["name"]: item for item in new or ()} if new is not _ABSENT else {}
        changes = []
        for name in [*before, *(n for n in after if n not in before)]:
            changes.extend(template_diff(before.get(name, _ABSENT), after.get(name, _ABSENT),
                                         f"{path}[{name}]"))
        return changes
    if old == new and type(old) is type(new):
        return []
    return [FieldChange(path, old, new)]


def _named(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(item, dict) and isinstance(item.get("name"), str) for item in value)


def _named_or_none(value: Any) -> bool:
    """A list keyed by name, or nothing yet (absent or empty): compared item by item."""
    return value is _ABSENT or value == [] or _named(value)


# -- warnings --------------------------------------------------------------------


@dataclass(frozen=True)
class PlanWarning:
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def in_place_only_will_stall(lifecycle: ComponentLifecycle, old: dict[str, Any] | None,
                             new: dict[str, Any]) -> PlanWarning | None:
    """InPlaceOnly and a change to a single-pod component beyond regular containers' images."""
    if lifecycle.strategy != Strategy.IN_PLACE_ONLY or lifecycle.shape != SINGLE:
        return None
    if old is None or old == new or images_only(old, new):
        return None
    # Images and pod labels move in place: what is refused is the rest.
    others = [c.path for c in template_diff(old, new)
              if not _is_image(c.path) and ".metadata.labels" not in f".{c.path}"]
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return PlanWarning(IN_PLACE_ONLY_WILL_STALL, (
        f"InPlaceOnly will refuse this change: it is more than container images ({shown}). "
        "Every Instance stays on its old revision, the rollout stalls and OME records "
        "InPlaceUpdateNotPossible; change the strategy type (for example to "
        "InPlaceIfPossible) or undo the change."))


def _is_image(path: str) -> bool:
    head, _, leaf = path.rpartition(".")
    return leaf == "image" and ".spec.containers[" in f".{head}" and head.endswith("]")


def budgets_cannot_move(lifecycle: ComponentLifecycle) -> PlanWarning | None:
    """The budgets the strategy reads are all zero: no Instance could ever move."""
    strategy = lifecycle.strategy
    unavailable = _budget(lifecycle, lifecycle.settings.max_unavailable)
    if strategy == SURGE_THEN_DRAIN:
        surge = _budget(lifecycle, lifecycle.settings.max_surge)
        if surge == 0 and unavailable == 0:
            return PlanWarning(BUDGETS_CANNOT_MOVE, (
                f"maxSurge {_described(lifecycle, MAX_SURGE)} and maxUnavailable "
                f"{_described(lifecycle, MAX_UNAVAILABLE)} under SurgeThenDrain: no Instance "
                "can ever move, so no change will roll out; allow at least one of them."))
        return None
    if unavailable == 0:
        return PlanWarning(BUDGETS_CANNOT_MOVE, (
            f"maxUnavailable {_described(lifecycle, MAX_UNAVAILABLE)} under {strategy}, which "
            "reads only maxUnavailable: no serving Instance can ever move, so no change will "
            "roll out."))
    return None


def recreate_takes_component_offline(lifecycle: ComponentLifecycle) -> PlanWarning | None:
    """RecreatePod with no budget (or one covering every Instance) recreates them all at once."""
    if lifecycle.strategy != RECREATE_POD:
        return None
    unavailable = _budget(lifecycle, lifecycle.settings.max_unavailable)
    want = lifecycle.replicas
    if unavailable is None:
        return PlanWarning(RECREATE_TAKES_COMPONENT_OFFLINE, (
            "RecreatePod with no maxUnavailable: an update deletes the pods of every Instance "
            "at once and takes the whole component offline until the new pods are Ready; set "
            "lifecycle.updateStrategy.rollingUpdate.maxUnavailable (for example 1)."))
    if want and unavailable >= want:
        return PlanWarning(RECREATE_TAKES_COMPONENT_OFFLINE, (
            f"RecreatePod with maxUnavailable {_described(lifecycle, MAX_UNAVAILABLE)} lets all "
            f"{want} Instance{'s' if want != 1 else ''} be recreated at once: an update takes "
            "the whole component offline until the new pods are Ready."))
    return None


def probe_catch_seconds(probe: dict[str, Any]) -> int:
    """How long a readiness probe takes to catch a failure: failureThreshold x
    max(periodSeconds, timeoutSeconds), with Kubernetes' defaults (3, 10, 1).

    >>> probe_catch_seconds({"periodSeconds": 60, "timeoutSeconds": 200, "failureThreshold": 3})
    600
    >>> probe_catch_seconds({})
    30
    """
    value = {**PROBE_DEFAULTS, **{k: v for k, v in probe.items() if k in PROBE_DEFAULTS}}
    return cast(int, value["failureThreshold"] * max(value["periodSeconds"],
                                                     value["timeoutSeconds"]))


def main_container(templates: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The serving container: ``ome-container`` (else the first) of the leader or single pod."""
    template = templates.get(LEADER) or templates.get(DEFAULT)
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == MAIN_CONTAINER]
    return cast(dict[str, Any] | None, (named or containers or [None])[0])


def min_ready_shorter_than_probe(lifecycle: ComponentLifecycle,
                                 templates: dict[str, dict[str, Any]]) -> PlanWarning | None:
    """A warm-up window shorter than the readiness probe takes to catch a failure."""
    window = lifecycle.min_ready_seconds
    container = main_container(templates)
    probe = (container or {}).get("readinessProbe")
    if not window or not isinstance(probe, dict):
        return None
    catch = probe_catch_seconds(probe)
    if window >= catch:
        return None
    value = {**PROBE_DEFAULTS, **probe}
    source = lifecycle.fields["minReadySeconds"].source
    return PlanWarning(MIN_READY_SHORTER_THAN_PROBE, (
        f"minReadySeconds {window} (from {source}) is shorter than the readiness probe of "
        f"container {(container or {}).get('name')} takes to catch a failure: "
        f"{value['failureThreshold']} failures × max(periodSeconds {value['periodSeconds']}, "
        f"timeoutSeconds {value['timeoutSeconds']}) = {catch} s. A pod can become Available "
        f"before a failing probe marks it not Ready; use at least {catch}."))


def no_instance_ready_timeout(lifecycle: ComponentLifecycle) -> PlanWarning | None:
    if lifecycle.settings.instance_ready_timeout is not None:
        return None
    return PlanWarning(NO_INSTANCE_READY_TIMEOUT, (
        "instanceReadyTimeout is unset in the service, the runtime and the operator settings: "
        "operations get no deadline, so a stuck Instance waits for you "
        "(InstanceReadyTimeoutUnconfigured is True)."))


def component_warnings(lifecycle: ComponentLifecycle, old: dict[str, Any] | None,
                       new: dict[str, Any]) -> list[PlanWarning]:
    """Every warning for one component, in a fixed order."""
    found = [
        in_place_only_will_stall(lifecycle, old, new),
        budgets_cannot_move(lifecycle),
        recreate_takes_component_offline(lifecycle),
        min_ready_shorter_than_probe(lifecycle, new),
        no_instance_ready_timeout(lifecycle),
    ]
    return [warning for warning in found if warning is not None]


def _budget(lifecycle: ComponentLifecycle, budget: int | str | None) -> int | None:
    """The budget as the planner scales it; at zero replicas, as it would be for one
    Instance: a component scaled to zero has nothing to move, and its budgets matter
    only once it is scaled up (a percentage of 0 is no reason to warn)."""
    try:
        return scaled_value(budget, max(lifecycle.replicas, 1))
    except BudgetError:
        return None


def _described(lifecycle: ComponentLifecycle, name: str) -> str:
    resolved = lifecycle.fields.get(name)
    if resolved is None or resolved.value is None:
        return "unset"
    return f"{resolved.value} (from {resolved.source})"


# -- one component -----------------------------------------------------------------


@dataclass(frozen=True)
class Removal:
    """A component the cluster runs that the repository no longer has: its service
    was deleted, or the component dropped from it."""

    namespace: str
    replica: str
    service: str
    component: str
    instances: int
    serving: int

    @classmethod
    def of(cls, replica: dict[str, Any]) -> Removal:
        meta, spec = replica["metadata"], replica.get("spec") or {}
        status = replica.get("status") or {}
        return cls(namespace=meta.get("namespace") or "default", replica=meta["name"],
                   service=spec.get("inferenceService", ""),
                   component=spec.get("component", ""),
                   instances=int(status.get("replicas") or 0),
                   serving=int(status.get("servingReplicas") or 0))

    def to_dict(self) -> dict[str, Any]:
        return {"service": f"{self.namespace}/{self.service}", "component": self.component,
                "replica": f"{self.namespace}/{self.replica}", "instances": self.instances,
                "serving": self.serving,
                # The job in pipelines/ runs without --prune.
                "withoutPrune": "orphaned: its Instances keep serving, unmanaged",
                "withPrune": f"torn down: {self.instances} Instance"
                             f"{'' if self.instances == 1 else 's'} deleted"}


@dataclass(frozen=True)
class PlannedComponent:
    """A resolved component with what was observed and planned for it (None: not managed)."""

    item: ServiceComponent
    desired: DesiredComponent | None = None
    observed: ObservedComponent | None = None
    plan: Plan | None = None
    error: str | None = None  # why the component could not be planned

    @property
    def namespace(self) -> str:
        return self.item.service.data["metadata"].get("namespace") or "default"

    @property
    def service(self) -> str:
        return f"{self.namespace}/{self.item.service.data['metadata']['name']}"


def revision_change(desired: DesiredComponent, observed: ObservedComponent) -> dict[str, Any]:
    """``{old, new, changed}``: the InferenceReplica's revision before and after, and the
    template fields that differ (None when the old revision's templates are not stored)."""
    old = ((observed.replica or {}).get("spec") or {}).get("revision")
    new = desired.revision
    if old is None or old == new:
        return {"old": old, "new": new, "changed": []}
    before = stored_templates(observed.revisions, old)
    changed = None if before is None else [str(c) for c in template_diff(before,
                                                                        desired.templates)]
    return {"old": old, "new": new, "changed": changed}


def lifecycle_changes(desired: DesiredComponent, observed: ObservedComponent,
                      planned: Json | None = None) -> list[dict[str, Any]]:
    """Lifecycle fields whose value differs from what the InferenceReplica recorded when
    it was last reconciled, ``old → new`` (nothing for a component new to the cluster).
    ``replicas`` is the count the plan keeps (``planned``: the InferenceReplica it
    writes), an autoscaler's where one owns it; the bounds show when either side has
    them."""
    spec = (observed.replica or {}).get("spec")
    if not spec:
        return []
    before = {"replicas": spec.get("replicas"), "minReadySeconds": spec.get("minReadySeconds"),
              **_flatten(spec.get("lifecycle") or {})}
    lifecycle = desired.lifecycle
    kept = ((planned or {}).get("spec") or {}).get("replicas", lifecycle.replicas)
    after = {"replicas": kept, "minReadySeconds": lifecycle.min_ready_seconds,
             **_flatten(lifecycle.lifecycle_spec())}
    if "minReplicas" in spec or lifecycle.bounds is not None:
        before.update(_bounds_of(spec))
        low, high = lifecycle.bounds or (lifecycle.replicas, lifecycle.replicas)
        after.update(minReplicas=low, maxReplicas=high)
    return [{"field": name, "old": before.get(name), "new": after.get(name)}
            for name in sorted(set(before) | set(after))
            if before.get(name) != after.get(name)]


def _bounds_of(spec: Json) -> dict[str, Any]:
    """The bounds an InferenceReplica recorded; a count Git owned is both."""
    count = spec.get("replicas")
    return {"minReplicas": spec.get("minReplicas", count),
            "maxReplicas": spec.get("maxReplicas", count)}


def count_view(desired: DesiredComponent, observed: ObservedComponent,
               planned: Json) -> dict[str, Any] | None:
    """Where the count comes from, the range, the live count and what this change does
    to it (lifecycle/scaling.py); None for a count Git owns before and after."""
    before = (observed.replica or {}).get("spec") or {}
    bounds = desired.lifecycle.bounds
    if bounds is None and "minReplicas" not in before:
        return None
    current = before.get("replicas")
    kept = (planned.get("spec") or {}).get("replicas", desired.lifecycle.replicas)
    owner = GIT if bounds is None else AUTOSCALER
    if bounds is None:
        text = f"Git owns the count again (minReplicas = maxReplicas): {kept} Instances"
    else:
        text = (f"An autoscaler owns the count between minReplicas {bounds[0]} and "
                f"maxReplicas {bounds[1]}")
        text += "; the job starts it at minReplicas" if current is None \
            else f"; the live count is {current}"
    moved = "minReplicas" in before and bounds is not None and \
        _bounds_of(before) != {"minReplicas": bounds[0], "maxReplicas": bounds[1]}
    if current is not None and current != kept:
        text += f"; this change brings it from {current} to {kept}"
    elif moved:
        text += "; the new bounds leave it as it is"
    return {"source": owner, "minReplicas": None if bounds is None else bounds[0],
            "maxReplicas": None if bounds is None else bounds[1], "current": current,
            "replicas": kept, "text": text + "."}


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def template_unified_diff(old: dict[str, dict[str, Any]] | None, new: dict[str, dict[str, Any]],
                          old_name: str, new_name: str) -> str | None:
    """The pod templates as a unified diff of their YAML, runner by runner (None when
    the old revision's templates are not stored)."""
    if old is None:
        return None
    import difflib

    import yaml

    def text(templates: dict[str, dict[str, Any]]) -> list[str]:
        dumped: str = yaml.safe_dump(templates, sort_keys=True, default_flow_style=False,
                                     width=1000)
        return dumped.splitlines(keepends=True)

    lines = difflib.unified_diff(text(old), text(new), fromfile=old_name, tofile=new_name,
                                 n=2)
    return "".join(lines) or None


def next_step(planned: PlannedComponent) -> list[str]:
    """The writes this pass would make, in the order ``reconcile`` applies them."""
    plan, observed = planned.plan, planned.observed
    if plan is None or observed is None:
        return []
    steps = []
    if plan.replica_changed and not plan.bookkeeping:
        verb = "create" if observed.replica is None else "update"
        steps.append(f"{verb} InferenceReplica {plan.replica['metadata']['name']}")
    steps.extend(action.describe() for action in plan.actions)
    steps.extend(event.describe() for event in plan.events)
    return steps


def instance_lines(plan: Plan) -> list[dict[str, Any]]:
    """Each Instance as this pass leaves it: phase, revision and operation step."""
    return [{"index": row.index, "phase": row.phase.value, "revision": row.revision,
             "operation": None if row.operation is None else operation_label(row.operation)}
            for row in plan.rows]


def operation_label(operation: Operation) -> str:
    """``Update/Surge SurgeCreate``; a migration says which node it leaves and why:
    ``Migrate/Surge SurgeCreate off node-3 (cordoned)``."""
    kind = operation.type.value
    if operation.mode is not None:
        kind += f"/{operation.mode.value}"
    label = f"{kind} {operation.step.value}"
    if operation.leaving:
        label += f" off {operation.leaving} ({operation.leaving_why})"
    return label


def component_view(planned: PlannedComponent) -> dict[str, Any]:
    """The JSON shape of one component of the plan."""
    item = planned.item
    lifecycle = item.lifecycle
    view: dict[str, Any] = {
        "service": planned.service,
        "component": lifecycle.component,
        "managed": lifecycle.managed,
        "deploymentMode": lifecycle.mode.to_dict(),
        "inferenceReplica": replica_name(item.service.data["metadata"]["name"],
                                         lifecycle.component),
        "lifecycle": {name: r.to_dict() for name, r in lifecycle.fields.items()},
        "revision": None,
        "nextStep": [],
        "instances": [],
        "hold": None,
        "conditions": [],
        "warnings": [],
        "changes": False,
        "changed": False,
        "lifecycleChanges": [],
        # Who owns the count of Instances, the range and the live count (None: Git).
        "count": None,
        "templateDiff": None,
        "toMove": 0,
        "heldByPartition": 0,
        # Who or what pauses the rollout (Git's lifecycle.paused, the cluster's
        # annotation), and the Instances the pause keeps from moving.
        "pausedBy": None,
        "heldByPause": 0,
        # The canary's steps, each with the Instances it lets onto the new revision and
        # its pause, and the step the first pass leaves it at (lifecycle/canary.py).
        "canary": None,
        # The rollout group it moves in (spec.rollout.groups): name, members, strategy.
        "group": None,
        "pacing": None,
    }
    desired, observed, plan = planned.desired, planned.observed, planned.plan
    if desired is None or observed is None or plan is None:
        return view
    status = plan.replica.get("status") or {}
    revision = revision_change(desired, observed)
    old_templates = None
    if revision["old"] is not None:
        old_templates = stored_templates(observed.revisions, revision["old"])
    diff = None
    if revision["old"] is not None and revision["old"] != revision["new"]:
        diff = template_unified_diff(old_templates, desired.templates, revision["old"],
                                     revision["new"])
    rows = plan.rows
    hold = plan.hold
    view.update(
        lifecycleChanges=lifecycle_changes(desired, observed, plan.replica),
        count=count_view(desired, observed, plan.replica),
        templateDiff=diff,
        **instances_to_move(rows, desired.revision, lifecycle.settings.partition),
        revision=revision,
        nextStep=next_step(planned),
        instances=instance_lines(plan),
        hold=None if hold is None else hold.for_storage(),
        conditions=[{key: c.get(key) for key in ("type", "status", "reason", "message")}
                    for c in status.get("conditions") or [] if c.get("type") in SHOWN_CONDITIONS],
        warnings=[w.to_dict() for w in component_warnings(lifecycle, old_templates,
                                                          desired.templates)],
        changes=not plan.is_noop,
    )
    if plan.decision is not None and plan.decision.paused:
        # A paused rollout moves nothing: what would move waits for the resume.
        view.update(pausedBy=described(plan.decision.paused), toMove=0,
                    heldByPause=view["toMove"])
    view["canary"] = canary_view(lifecycle, status, revision["old"] != revision["new"])
    view["group"] = group_view(lifecycle)
    view["pacing"] = pacing(lifecycle, hold, rows)
    # What the reviewer asks first: does this component change at all?
    view["changed"] = bool(revision["old"] != revision["new"] or view["lifecycleChanges"]
                           or view["changes"])
    return view


def group_view(lifecycle: ComponentLifecycle) -> dict[str, Any] | None:
    """The rollout group the component moves in, as the plan names it."""
    found = lifecycle.fields.get("group")
    group = found.value if found is not None else None
    if not isinstance(group, dict):
        return None
    return {"name": group.get("name"), "members": list(group.get("components") or []),
            "strategy": group.get("strategy") or "rolling"}


def canary_view(lifecycle: ComponentLifecycle, status: dict[str, Any],
                moves: bool) -> dict[str, Any] | None:
    """The canary that moves this change: its steps, the step the first pass leaves it
    at, and the first step that waits for a promotion (the forecast, which runs the
    passes, stops there: nothing promotes it)."""
    steps = steps_of(lifecycle)
    current = status.get("canary")
    if not steps or not (moves or isinstance(current, dict)):
        return None
    shown = [{"step": number, "replicas": allowed_at(step, lifecycle.replicas),
              "pause": step.pause} for number, step in enumerate(steps, 1)]
    promotion = next((step["step"] for step in shown if step["pause"] == PROMOTION), None)
    return {"steps": shown, "current": current if isinstance(current, dict) else None,
            "waitsForPromotionAt": promotion}


def instances_to_move(rows: tuple[Row, ...], target: str, partition: int) -> dict[str, int]:
    """``toMove``: the Instances off ``target`` that the partition lets move;
    ``heldByPartition``: those it keeps on their revision until it is lowered."""
    own = [row for row in rows if row.surge_of is None and row.phase != Phase.DELETING]
    held = set(partition_held(own, target, partition))
    outdated = [row for row in own if row.revision != target]
    return {"toMove": sum(1 for row in outdated if row.index not in held),
            "heldByPartition": sum(1 for row in outdated if row.index in held)}


def pacing(lifecycle: ComponentLifecycle, hold: Hold | None,
           rows: tuple[Row, ...]) -> dict[str, Any] | None:
    """A Budget hold while updates of the rollout are in flight is the budgets pacing it,
    not a hold: the others wait their turn. None for any other hold (a budget that lets
    nothing move, a held revision, InPlaceOnly refusing)."""
    if hold is None or hold.gate != Gate.BUDGET:
        return None
    moving = sum(1 for row in rows
                 if row.operation is not None and row.operation.type == OperationType.UPDATE)
    if not moving:
        return None
    budgets = ", ".join(f"{name.rsplit('.', 1)[-1]} {_described(lifecycle, name)}"
                        for name in (MAX_SURGE, MAX_UNAVAILABLE)
                        if name in lifecycle.fields and (
                            name != MAX_SURGE or lifecycle.strategy == SURGE_THEN_DRAIN))
    waiting = sum(1 for row in rows if row.operation is None and row.revision != hold.target)
    return {"moving": moving, "waiting": waiting,
            "short": f"{moving} at a time",
            "text": f"{moving} Instance{'' if moving == 1 else 's'} moving at a time within "
                    f"the budgets ({budgets}); {waiting} wait{'s its' if waiting == 1 else ' their'} "
                    "turn"}


# -- the whole plan ----------------------------------------------------------------


def plan_document(loaded: Loaded, planned: list[PlannedComponent], cluster: dict[str, Any],
                  forecast: dict[str, Any] | None, forecast_skipped: str | None,
                  removed: Sequence[Removal] = ()) -> dict[str, Any]:
    """The plan as one JSON document; pure."""
    components = [component_view(p) for p in planned if p.error is None]
    failed = [p.error for p in planned if p.error is not None]
    managed = [c for c in components if c["managed"]]
    changing = [c for c in managed if c["changes"]]
    added = [c for c in changing if (c["revision"] or {}).get("old") is None]
    # Every warning the plan lists: the components' and validation's.
    warnings = sum(len(c["warnings"]) for c in components) + len(loaded.result.warnings)
    errors = [e.to_dict() for e in loaded.result.errors]
    summary = {
        "components": len(components),
        "managed": len(managed),
        "changing": len(changing),
        "unchanged": len(managed) - len(changing),
        "adding": len(added),
        "updating": len(changing) - len(added),
        "removing": len(removed),
        "warnings": warnings,
        "validationErrors": len(errors),
        "planningErrors": len(failed),
    }
    return {
        "repository": loaded.root.as_posix(),
        "cluster": cluster,
        "summary": {**summary, "text": summary_line(summary)},
        "validation": {"errors": errors,
                       "warnings": [w.to_dict() for w in loaded.result.warnings]},
        "components": components,
        "removed": [r.to_dict() for r in removed],
        "planningErrors": failed,
        "forecast": forecast,
        "forecastSkipped": forecast_skipped,
        "changes": bool(changing or removed),
    }


def summary_line(summary: dict[str, int]) -> str:
    """``3 of 7 components change, 1 unchanged...; 2 warnings; 0 validation errors``."""
    def count(n: int, noun: str) -> str:
        return f"{n} {noun}{'' if n == 1 else 's'}"

    text = (f"{summary['changing']} of {count(summary['managed'], 'managed component')} "
            f"to change")
    if summary.get("changing") or summary.get("removing"):
        text += (f" ({summary.get('adding', 0)} to add, {summary.get('updating', 0)} to "
                 f"update, {summary.get('removing', 0)} to remove)")
    skipped = summary["components"] - summary["managed"]
    if skipped:
        text += f" ({skipped} not managed)"
    text = (f"{text}; {count(summary['warnings'], 'warning')}; "
            f"{count(summary['validationErrors'], 'validation error')}")
    if summary.get("planningErrors"):
        text += f"; {count(summary['planningErrors'], 'component')} not planned"
    return text


# Errors and warnings listed in full up to this many each; the JSON has them all.
LIMITS = {"errors": 50, "warnings": 50}
# Room kept for the closing lines when a size limit applies.
TAIL_RESERVE = 3000
FULL_PLAN = "the full plan is in the run's summary and its artifact"


def render_markdown(document: dict[str, Any], max_chars: int | None = None,
                    limit_note: str = FULL_PLAN) -> str:
    """The plan as Markdown, top down: summary, errors and warnings, forecast, then the
    changed components; unchanged ones are counted. With ``max_chars``, components are
    left out whole (and named) once the next would not fit, never cut inside markup."""
    from omegitops.report.status import environment

    env = environment()
    env.filters["value"] = show_value
    env.filters["fence_safe"] = _fence_safe
    # A template's macros are read by name: Any.
    module: Any = env.get_template(TEMPLATE).make_module({"limits": LIMITS})
    components = document["components"]
    changed = [c for c in components if c["managed"] and c["changed"]]
    unchanged = sum(1 for c in components if c["managed"] and not c["changed"])
    unmanaged = sum(1 for c in components if not c["managed"])
    per_component = (document.get("forecast") or {}).get("components") or {}
    parts = [str(module.head(document)).strip()]
    if changed:
        parts.append(str(module.changed_header(document, len(changed))).strip())
    size = sum(len(p) + 2 for p in parts)
    omitted: list[str] = []
    for c in changed:
        name = f"{c['service']} {c['component']}"
        part = str(module.component(c, per_component.get(name))).strip()
        if omitted or (max_chars is not None and size + len(part) + TAIL_RESERVE > max_chars):
            omitted.append(name)
            continue
        parts.append(part)
        size += len(part) + 2
    parts.append(str(module.tail(document, unchanged, unmanaged, omitted, limit_note)).strip())
    out = "\n\n".join(p for p in parts if p) + "\n"
    if max_chars is not None and len(out) > max_chars:
        out = _cut_lines(out, max_chars, limit_note)
    return out


def _cut_lines(text: str, max_chars: int, limit_note: str) -> str:
    """A last resort when even the head is too long: whole lines, outside any fence."""
    note = f"\n\n**The plan is cut here** ({limit_note}).\n"
    kept, size, fenced = [], 0, False
    for line in text.splitlines(keepends=True):
        if size + len(line) + len(note) + 4 > max_chars:
            break
        kept.append(line)
        size += len(line)
        if line.startswith("```"):
            fenced = not fenced
    return "".join(kept) + ("```\n" if fenced else "") + note


def _fence_safe(text: str) -> str:
    """Text for inside a fenced block: no line that would close it, a final newline."""
    lines = [("\u200b" + line) if line.lstrip().startswith("```") else line
             for line in text.splitlines()]
    return "\n".join(lines) + "\n"


