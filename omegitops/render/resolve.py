"""Effective lifecycle of each component: every field with its value and source.

Precedence, field by field (update-strategies.txt "Where the defaults come
from", min-ready-seconds.txt "Set a default for many services",
restart-policy.txt "Set the policy"):

1. the component in the InferenceService (``spec.engine.lifecycle``), which
   wins even when it is 0;
2. the runtime's component config (``spec.engineConfig.lifecycle``), merged
   field by field, so a service that sets only the type keeps the runtime's
   budgets;
3. the operator settings (no operator level for restartPolicy, partition,
   migrationPolicy);
4. the built-in default.

Only the budgets that the strategy reads are filled: SurgeThenDrain reads
maxSurge and maxUnavailable, the other strategies maxUnavailable alone.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass, field
from typing import Any, cast

from omegitops.model.durations import DurationError, parse_duration
from omegitops.model.settings import ComponentSettings
from omegitops.model.state import Json, Strategy
from omegitops.render.operator import COMPONENTS, OperatorSettings
from omegitops.util.goint import atoi

OMENATIVE = "OMENative"
DEFAULT_MODE = "RawDeployment"
MODE_ANNOTATION = "ome.io/deploymentMode"
HISTORY_ANNOTATION = "ome.io/revision-history-limit"

ISVC, RUNTIME, OPERATOR, DEFAULT = "isvc", "runtime", "operator", "default"
# Plain strings: resolved values are copied with marshal, which refuses an enum member.
SURGE_THEN_DRAIN = Strategy.SURGE_THEN_DRAIN.value
IN_PLACE_STRATEGIES = (Strategy.IN_PLACE_IF_POSSIBLE.value, Strategy.IN_PLACE_ONLY.value)
SINGLE, GANG = "single", "gang"


@dataclass(frozen=True)
class Resolved:
    """One effective value, where it came from, and the field that set it."""

    value: Any
    source: str
    path: tuple[str | int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        shown = {"value": self.value, "source": self.source}
        if self.path[:2] == ("spec", "rollout"):
            # Set for the whole service rather than in the component's lifecycle.
            shown["field"] = ".".join(str(part) for part in self.path)
        return shown


@dataclass(frozen=True)
class ComponentLifecycle:
    """The resolved lifecycle of one component of one InferenceService."""

    component: str
    mode: Resolved
    shape: str
    worker_size: int
    replicas: int
    # Each setting with where it came from, by its name in the documents (what
    # ``resolve`` and the plan show); the planner reads ``settings``.
    fields: dict[str, Resolved] = field(default_factory=dict)
    settings: ComponentSettings = field(default_factory=ComponentSettings)
    # (minReplicas, maxReplicas) when they differ: an autoscaler owns the count between
    # them (lifecycle/scaling.py); None when Git owns it (``replicas``, minReplicas).
    bounds: tuple[int, int] | None = None

    @property
    def managed(self) -> bool:
        return bool(self.mode.value == OMENATIVE)

    @property
    def strategy(self) -> str:
        return self.settings.strategy

    @property
    def min_ready_seconds(self) -> int:
        return self.settings.min_ready_seconds

    def lifecycle_spec(self) -> dict[str, Any]:
        """The lifecycle as the InferenceReplica's spec shows it: only what is set
        somewhere (service, runtime or operator), never a built-in default."""
        spec: dict[str, Any] = {}
        for name, resolved in sorted(self.fields.items()):
            if resolved.source == DEFAULT or name not in SPEC_FIELDS:
                continue
            target = spec
            *parents, leaf = SPEC_FIELDS[name]
            for parent in parents:
                target = target.setdefault(parent, {})
            target[leaf] = resolved.value
        return spec


# Dotted result name -> its path inside a ``lifecycle`` block.
LIFECYCLE_FIELDS: dict[str, tuple[str, ...]] = {
    "updateStrategy.type": ("updateStrategy", "type"),
    "updateStrategy.rollingUpdate.partition": ("updateStrategy", "rollingUpdate", "partition"),
    "updateStrategy.rollingUpdate.maxSurge": ("updateStrategy", "rollingUpdate", "maxSurge"),
    "updateStrategy.rollingUpdate.maxUnavailable": (
        "updateStrategy",
        "rollingUpdate",
        "maxUnavailable",
    ),
    "updateStrategy.inPlaceUpdateStrategy.markNotReadyDuringLifecycle": (
        "updateStrategy",
        "inPlaceUpdateStrategy",
        "markNotReadyDuringLifecycle",
    ),
    "minReadySeconds": ("minReadySeconds",),
    "restartPolicy": ("restartPolicy",),
    "instanceReadyTimeout": ("instanceReadyTimeout",),
    "migrationPolicy.mode": ("migrationPolicy", "mode"),
    "paused": ("paused",),
}
# Fields that belong in the InferenceReplica's spec.lifecycle (minReadySeconds
# has a field of its own there; a pause reaches the planner with the desired
# component and shows in the rollout hold, so toggling it rewrites no spec).
SPEC_FIELDS = {k: v for k, v in LIFECYCLE_FIELDS.items()
               if k not in ("minReadySeconds", "paused")}
RUNTIME_CONFIG = {"engine": "engineConfig", "decoder": "decoderConfig", "router": "routerConfig"}


def dig(data: Any, path: tuple[str | int, ...]) -> Any:
    """``data[p0][p1]...``, or None as soon as a step is missing."""
    for part in path:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data


def _first(*candidates: tuple[str, Any, tuple[str | int, ...]]) -> Resolved | None:
    """The first candidate whose value is set (None means unset; 0 is set)."""
    for source, value, path in candidates:
        if value is not None:
            return Resolved(value, source, path)
    return None


def components_of(isvc: dict[str, Any], runtime: dict[str, Any] | None) -> list[str]:
    """The components a service runs: those it names, and always the engine
    when its runtime has one (the model has to be served)."""
    spec = isvc.get("spec") or {}
    present = [c for c in COMPONENTS if isinstance(spec.get(c), dict)]
    if "engine" not in present and (
        isinstance(dig(runtime, ("spec", "engineConfig")), dict) or not present
    ):
        present.insert(0, "engine")
    return present


def shape_of(component_spec: Json, runtime_config: Json) -> tuple[str, int]:
    """(``gang``, workers) when the component has a leader and workers, else (``single``, 0).

    The service's own leader/worker override the runtime's, as OME merges them.
    """
    has_leader = "leader" in component_spec or "leader" in runtime_config
    has_worker = "worker" in component_spec or "worker" in runtime_config
    if not (has_leader or has_worker):
        return SINGLE, 0
    size = _first(
        (ISVC, dig(component_spec, ("worker", "size")), ()),
        (RUNTIME, dig(runtime_config, ("worker", "size")), ()),
    )
    workers = size.value if size and isinstance(size.value, int) else 1
    return GANG, max(workers, 0)


def resolve_mode(
    isvc: Json, runtime: Json | None, component: str, operator: OperatorSettings
) -> Resolved:
    """The deployment mode of one component.

    An ``ome.io/deploymentMode`` annotation on the component, or in the
    runtime, overrides ``spec.deploymentMode`` (min-ready-seconds.txt tells
    users to remove such annotations to get OMENative).
    """
    config = RUNTIME_CONFIG[component]
    found = _first(
        (ISVC, dig(isvc, ("spec", component, "annotations", MODE_ANNOTATION)),
         ("spec", component, "annotations", MODE_ANNOTATION)),
        (RUNTIME, dig(runtime, ("spec", config, "annotations", MODE_ANNOTATION)),
         ("spec", config, "annotations", MODE_ANNOTATION)),
        (RUNTIME, dig(runtime, ("metadata", "annotations", MODE_ANNOTATION)),
         ("metadata", "annotations", MODE_ANNOTATION)),
        (ISVC, dig(isvc, ("spec", "deploymentMode")), ("spec", "deploymentMode")),
        (ISVC, dig(isvc, ("metadata", "annotations", MODE_ANNOTATION)),
         ("metadata", "annotations", MODE_ANNOTATION)),
        (OPERATOR, operator.deployment_mode, ()),
    )
    return found or Resolved(DEFAULT_MODE, DEFAULT)


def _lifecycle_field(
    name: str, component: str, lifecycles: tuple[Any, Any], operator_value: Any
) -> Resolved | None:
    """``name`` from the service's lifecycle block of ``component``, else its runtime's,
    else the operator's (``lifecycles``: the two blocks, dug once per component)."""
    sub = LIFECYCLE_FIELDS[name]
    own, runtimes = lifecycles
    value = dig(own, sub)
    if value is not None:
        return Resolved(value, ISVC, ("spec", component, "lifecycle", *sub))
    value = dig(runtimes, sub)
    if value is not None:
        return Resolved(value, RUNTIME, ("spec", RUNTIME_CONFIG[component], "lifecycle", *sub))
    return Resolved(operator_value, OPERATOR) if operator_value is not None else None


# A run's resolutions, by what each read (``_read_key``): see ``resolve_component``.
ReadKey = tuple[int, str, bytes]
Resolutions = dict[ReadKey, ComponentLifecycle]
# What ``resolve_component`` reads of a service besides its component's own block: these
# parts of its spec, and its annotations (a test holds it to that).
READ_SPEC_PARTS = ("deploymentMode", "rollout")


def resolve_component(
    isvc: dict[str, Any],
    runtime: dict[str, Any] | None,
    component: str,
    operator: OperatorSettings,
    memo: Resolutions | None = None,
) -> ComponentLifecycle:
    """Resolve every lifecycle field of ``component``; pure. ``memo``, one run's (the
    same operator settings throughout), shares one resolution among the services that
    are equal in all it reads: services of one team, one runtime and one lifecycle
    differ in their names and models, which no lifecycle field reads (a fleet's 17,500
    components resolve to a few dozen lifecycles; resolving each was a tenth of a cold
    pass). A resolution is never changed once made, so one can serve them all."""
    key = _read_key(isvc, runtime, component) if memo is not None else None
    if memo is not None and key is not None:
        known = memo.get(key)
        if known is not None:
            return known
    lifecycle = _resolved(isvc, runtime, component, operator)
    if memo is not None and key is not None:
        memo[key] = lifecycle
    return lifecycle


def _read_key(isvc: dict[str, Any], runtime: dict[str, Any] | None,
              component: str) -> ReadKey | None:
    """All ``resolve_component`` reads: the runtime (one object a run), the component,
    and the service's parts it reads as marshal writes them (its format 2, which has no
    references: equal values, equal bytes, their types included, so that 1, 1.0 and true
    stay apart). None when a part is not plain data (resolved apart, then)."""
    spec, meta = isvc.get("spec"), isvc.get("metadata")
    if not isinstance(spec, dict) or not isinstance(meta, dict):
        return None
    try:
        read = marshal.dumps((spec.get(component), *(spec.get(part) for part in READ_SPEC_PARTS),
                              meta.get("annotations")), 2)
    except ValueError:
        return None
    return (id(runtime), component, read)


def _resolved(
    isvc: dict[str, Any],
    runtime: dict[str, Any] | None,
    component: str,
    operator: OperatorSettings,
) -> ComponentLifecycle:
    component_spec = dig(isvc, ("spec", component)) or {}
    runtime_config = dig(runtime, ("spec", RUNTIME_CONFIG[component])) or {}
    shape, workers = shape_of(component_spec, runtime_config)
    replicas = _replicas(component_spec, runtime_config)
    highest = _max_replicas(component_spec, runtime_config)
    bounds = (replicas, highest) if highest is not None and highest > replicas else None
    mode = resolve_mode(isvc, runtime, component, operator)
    # The fields every ComponentLifecycle has, of mixed types: Any lets them be spread.
    base: dict[str, Any] = {"component": component, "mode": mode, "shape": shape,
                            "worker_size": workers, "replicas": replicas, "bounds": bounds}
    if mode.value != OMENATIVE:
        return ComponentLifecycle(**base)
    fields = _fields(isvc, runtime, component, shape, operator)
    return ComponentLifecycle(**base, fields=fields, settings=_settings(fields, operator))


def _replicas(component_spec: Json, runtime_config: Json) -> int:
    """Desired Instances: minReplicas (the autoscaler counts Instances), 1 when unset."""
    found = _first(
        (ISVC, component_spec.get("minReplicas"), ()),
        (RUNTIME, runtime_config.get("minReplicas"), ()),
    )
    value = found.value if found else 1
    return value if isinstance(value, int) and value >= 0 else 1


def _max_replicas(component_spec: Json, runtime_config: Json) -> int | None:
    """maxReplicas, the service's before its runtime's; None when unset (Git owns the
    count). One below minReplicas is refused before planning (manifests/plannable.py)."""
    found = _first(
        (ISVC, component_spec.get("maxReplicas"), ()),
        (RUNTIME, runtime_config.get("maxReplicas"), ()),
    )
    value = found.value if found else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fields(
    isvc: Json, runtime: Json | None, component: str, shape: str, operator: OperatorSettings
) -> dict[str, Resolved]:
    chart = operator.strategy_for(component)
    lifecycles = (dig(isvc, ("spec", component, "lifecycle")),
                  dig(runtime, ("spec", RUNTIME_CONFIG[component], "lifecycle")))

    def pick(name: str, operator_value: Any = None, default: Any = None) -> Resolved:
        found = _lifecycle_field(name, component, lifecycles, operator_value)
        return found or Resolved(default, DEFAULT)

    fields: dict[str, Resolved] = {}
    fields["updateStrategy.type"] = pick("updateStrategy.type", chart.type, SURGE_THEN_DRAIN)
    strategy = fields["updateStrategy.type"].value
    fields["updateStrategy.rollingUpdate.partition"] = pick(
        "updateStrategy.rollingUpdate.partition", default=0
    )
    if strategy == SURGE_THEN_DRAIN:
        fields["updateStrategy.rollingUpdate.maxSurge"] = pick(
            "updateStrategy.rollingUpdate.maxSurge", chart.max_surge
        )
    fields["updateStrategy.rollingUpdate.maxUnavailable"] = pick(
        "updateStrategy.rollingUpdate.maxUnavailable", chart.max_unavailable
    )
    if strategy in IN_PLACE_STRATEGIES:
        fields["updateStrategy.inPlaceUpdateStrategy.markNotReadyDuringLifecycle"] = pick(
            "updateStrategy.inPlaceUpdateStrategy.markNotReadyDuringLifecycle", default=True
        )
    fields["minReadySeconds"] = pick("minReadySeconds", operator.min_ready_seconds, 0)
    # No operator level: the default follows the Instance's shape.
    fields["restartPolicy"] = pick(
        "restartPolicy", default="None" if shape == SINGLE else "RecreateInstanceOnPodRestart"
    )
    timeout = pick("instanceReadyTimeout", operator.raw.get("lifecycle", {}).get(
        "instanceReadyTimeout"))
    fields["instanceReadyTimeout"] = timeout
    fields["migrationPolicy.mode"] = pick("migrationPolicy.mode", default="Auto")
    fields["paused"] = _paused(isvc, pick("paused", default=False))
    fields["canary.steps"] = _canary_steps(isvc, component)
    fields["group"] = _group(isvc, component)
    fields.update(_operator_fields(isvc, operator))
    return fields


ROLLOUT_PAUSED = ("spec", "rollout", "paused")
CANARY = ("spec", "rollout", "canary")


def _paused(isvc: Json, component_pause: Resolved) -> Resolved:
    """No operator level: a pause is a person's. ``spec.rollout.paused: true`` pauses
    every component of the service whatever their own ``lifecycle.paused`` says (a
    pause is never undone by a finer field); else the component's own, or its
    runtime's, holds."""
    if dig(isvc, ROLLOUT_PAUSED) is True:
        return Resolved(True, ISVC, ROLLOUT_PAUSED)
    return component_pause


def _canary_steps(isvc: Json, component: str) -> Resolved:
    """The canary steps that move ``component``: ``spec.rollout.canary.steps`` when the
    canary names it, or names no component (then it moves every OMENative one); None
    when no canary moves it (a plain rolling update)."""
    canary = dig(isvc, CANARY)
    if not isinstance(canary, dict) or not isinstance(canary.get("steps"), list):
        return Resolved(None, DEFAULT)
    named = canary.get("components")
    if isinstance(named, list) and component not in named:
        return Resolved(None, DEFAULT)
    return Resolved(canary["steps"], ISVC, (*CANARY, "steps"))


GROUPS = ("spec", "rollout", "groups")


def _group(isvc: Json, component: str) -> Resolved:
    """The rollout group ``component`` moves in (``spec.rollout.groups``): its name, its
    members and its own budgets; None when it moves alone. validate refuses a component
    in two groups; the first wins here."""
    groups = dig(isvc, GROUPS)
    for number, group in enumerate(groups if isinstance(groups, list) else []):
        if isinstance(group, dict) and component in (group.get("components") or []):
            return Resolved(group, ISVC, (*GROUPS, number))
    return Resolved(None, DEFAULT)


def _operator_fields(isvc: Json, operator: OperatorSettings) -> dict[str, Resolved]:
    """Settings with no per-component field; one has a per-service annotation."""
    raw = operator.raw.get("lifecycle", {})

    def from_operator(key: str) -> Resolved:
        value = raw.get(key)
        return Resolved(value, OPERATOR) if value is not None else Resolved(None, DEFAULT)

    history_path = ("metadata", "annotations", HISTORY_ANNOTATION)
    annotated = dig(isvc, history_path)
    if annotated is not None:
        history = Resolved(_as_int(annotated), ISVC, history_path)
    else:
        history = from_operator("revisionHistoryLimit")
    retry = operator.update_retry
    return {
        "revisionHistoryLimit": history,
        "stuckPodGracePeriod": from_operator("stuckPodGracePeriod"),
        "unschedulableGracePeriod": from_operator("unschedulableGracePeriod"),
        "repairBatchSize": from_operator("repairBatchSize"),
        "abandonedReplacementGracePeriod": from_operator("abandonedReplacementGracePeriod"),
        "updateRetry": Resolved(
            {"maxAttempts": retry.max_attempts, "initialBackoff": raw["updateRetry"].get(
                "initialBackoff")} if retry else None,
            OPERATOR if retry else DEFAULT,
        ),
        "autoMigrate.maxAttempts": Resolved(
            operator.auto_migrate_max_attempts,
            OPERATOR if operator.auto_migrate_max_attempts is not None else DEFAULT,
        ),
    }


def _as_int(value: Any) -> Any:
    """The annotation's number as Go's strconv.Atoi reads it; else the value as is."""
    number = atoi(value) if isinstance(value, str) else None
    return value if number is None else number


def _settings(fields: dict[str, Resolved], operator: OperatorSettings) -> ComponentSettings:
    """The resolved ``fields`` as the planner reads them, typed (the schema and
    manifests/plannable.py hold the manifests' values to these types); the operator's
    own settings as ``operator`` parsed them."""

    def resolved(name: str) -> Any:
        found = fields.get(name)
        return None if found is None else found.value

    timeout = resolved("instanceReadyTimeout")
    history = resolved("revisionHistoryLimit")
    defaults = ComponentSettings()
    return ComponentSettings(
        strategy=cast(str, resolved("updateStrategy.type") or defaults.strategy),
        partition=int(resolved("updateStrategy.rollingUpdate.partition") or 0),
        max_surge=resolved("updateStrategy.rollingUpdate.maxSurge"),
        max_unavailable=resolved("updateStrategy.rollingUpdate.maxUnavailable"),
        mark_not_ready_during_lifecycle=cast(bool, fields[_MARK].value if _MARK in fields
                                             else defaults.mark_not_ready_during_lifecycle),
        min_ready_seconds=cast(int, resolved("minReadySeconds") or 0),
        restart_policy=cast(str, resolved("restartPolicy") or defaults.restart_policy),
        instance_ready_timeout=_seconds(timeout),
        instance_ready_timeout_text=None if timeout is None else str(timeout),
        migration_mode=cast(str, resolved("migrationPolicy.mode") or defaults.migration_mode),
        # A history annotation that is no integer keeps every revision.
        revision_history_limit=history if isinstance(history, int) else None,
        stuck_pod_grace_period=operator.stuck_pod_grace_period,
        unschedulable_grace_period=operator.unschedulable_grace_period,
        repair_batch_size=operator.repair_batch_size,
        abandoned_replacement_grace_period=operator.abandoned_replacement_grace_period,
        update_retry=operator.update_retry,
        auto_migrate_max_attempts=operator.auto_migrate_max_attempts,
        paused=resolved("paused") is True,
    )


_MARK = "updateStrategy.inPlaceUpdateStrategy.markNotReadyDuringLifecycle"


def _seconds(value: Any) -> float | None:
    """A duration in seconds; None when unset (no deadline) or not a duration."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except DurationError:
        return None
