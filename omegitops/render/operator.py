"""Operator settings: the ``ome.controller`` part of the chart's values file.

Each absent setting is None, and None means the documents' "without the
setting" behaviour (no budgets, no deadline, no repair, keep every revision).
An invalid setting stops the run with the message OME's manager gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegitops.model import budgets
from omegitops.model.durations import DurationError, parse_duration
from omegitops.model.settings import UpdateRetry
from omegitops.model.state import Json
from omegitops.util.errors import OperatorConfigError

COMPONENTS = ("engine", "decoder", "router")
STRATEGIES = ("SurgeThenDrain", "RecreatePod", "InPlaceIfPossible", "InPlaceOnly")
MAX_INT32 = 2**31 - 1
DEPLOYMENT_MODES = ("RawDeployment", "Serverless", "MultiNode", "PDDisaggregated", "OMENative")


@dataclass(frozen=True)
class StrategyDefault:
    """The chart's ``ome.controller.updateStrategy.<component>``."""

    type: str | None = None
    max_surge: int | str | None = None
    max_unavailable: int | str | None = None


@dataclass(frozen=True)
class OperatorSettings:
    deployment_mode: str | None = None
    min_ready_seconds: int | None = None
    update_strategy: dict[str, StrategyDefault] = field(default_factory=dict)
    revision_history_limit: int | None = None
    stuck_pod_grace_period: float | None = None
    unschedulable_grace_period: float | None = None
    instance_ready_timeout: float | None = None
    repair_batch_size: int | None = None
    abandoned_replacement_grace_period: float | None = None
    update_retry: UpdateRetry | None = None
    auto_migrate_max_attempts: int | None = None
    # Raw strings as written, so reports can show "15m" rather than 900.0.
    raw: dict[str, Any] = field(default_factory=dict)

    def strategy_for(self, component: str) -> StrategyDefault:
        return self.update_strategy.get(component, StrategyDefault())


def _fail(message: str) -> OperatorConfigError:
    return OperatorConfigError(f"invalid deploy config, {message}")


def _int(section: Json, key: str, name: str, minimum: int) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        relation = {0: ">= 0", 1: "> 0"}.get(minimum, f">= {minimum}")
        raise _fail(f"{name} must be {relation}, got {value}")
    if value > MAX_INT32:
        # OME's settings are int32: the manager refuses more, and a window that long
        # would carry the planner's clock past any date it can write.
        raise _fail(f"{name} must be <= {MAX_INT32}, got {value}")
    return value


def _duration(section: Json, key: str, name: str, positive: bool = False) -> float | None:
    value = section.get(key)
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except DurationError as err:
        raise _fail(f"{name}: {err}") from None
    if seconds < 0 or (positive and seconds == 0):
        relation = "> 0" if positive else ">= 0"
        raise _fail(f"{name} must be {relation}, got {value}")
    return seconds


def _mapping(parent: Json, key: str, name: str) -> Json:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(f"{name} must be a mapping, got {type(value).__name__}")
    return value


def _strategy(component: str, section: Json) -> StrategyDefault:
    name = f"updateStrategy.{component}"
    kind = section.get("type")
    if kind is not None and kind not in STRATEGIES:
        raise _fail(f"{name}.type must be one of {', '.join(STRATEGIES)}, got {kind!r}")
    values = {}
    for key in ("maxSurge", "maxUnavailable"):
        value = section.get(key)
        if value is None:
            continue
        try:
            budgets.parse_int_or_percent(value)
        except budgets.BudgetError as err:
            raise _fail(f"{name}.{key} {err}") from None
        if budgets.is_over_100_percent(value):
            raise _fail(f"{name}.{key} must be at most 100%, got {value}")
        values[key] = value
    surge, unavailable = values.get("maxSurge"), values.get("maxUnavailable")
    # A zero budget where the strategy needs one would stop every rollout.
    if (kind or "SurgeThenDrain") == "SurgeThenDrain":
        if budgets.is_zero(surge) and budgets.is_zero(unavailable):
            raise _fail(f"{name}: maxSurge and maxUnavailable cannot both be 0")
    elif budgets.is_zero(unavailable):
        raise _fail(f"{name}.maxUnavailable must be > 0 under {kind}, got {unavailable}")
    return StrategyDefault(type=kind, max_surge=surge, max_unavailable=unavailable)


def parse_operator_values(values: Any) -> OperatorSettings:
    """Read ``ome.controller`` from a Helm values document; raise OperatorConfigError."""
    if values is None:
        return OperatorSettings()
    if not isinstance(values, dict):
        raise _fail(f"the values file must be a mapping, got a {type(values).__name__}")
    ome = _mapping(values, "ome", "ome")
    controller = _mapping(ome, "controller", "ome.controller")
    mode = controller.get("deploymentMode")
    if mode is not None and mode not in DEPLOYMENT_MODES:
        raise _fail(f"deploymentMode must be one of {', '.join(DEPLOYMENT_MODES)}, got {mode!r}")
    strategies = _mapping(controller, "updateStrategy", "updateStrategy")
    update_strategy = {}
    for component in COMPONENTS:
        section = _mapping(strategies, component, f"updateStrategy.{component}")
        if section:
            update_strategy[component] = _strategy(component, section)
    lifecycle = _mapping(controller, "lifecycle", "lifecycle")
    retry = _mapping(lifecycle, "updateRetry", "lifecycle.updateRetry")
    update_retry = None
    if retry:
        attempts = _int(retry, "maxAttempts", "lifecycle.updateRetry.maxAttempts", 1)
        backoff = _duration(retry, "initialBackoff", "lifecycle.updateRetry.initialBackoff")
        update_retry = UpdateRetry(max_attempts=attempts or 1, initial_backoff=backoff or 0.0)
    migrate = _mapping(controller, "autoMigrate", "autoMigrate")
    return OperatorSettings(
        deployment_mode=mode,
        min_ready_seconds=_int(controller, "minReadySeconds", "minReadySeconds", 0),
        update_strategy=update_strategy,
        revision_history_limit=_int(
            lifecycle, "revisionHistoryLimit", "lifecycle.revisionHistoryLimit", 0
        ),
        stuck_pod_grace_period=_duration(
            lifecycle, "stuckPodGracePeriod", "lifecycle.stuckPodGracePeriod"
        ),
        unschedulable_grace_period=_duration(
            lifecycle, "unschedulableGracePeriod", "lifecycle.unschedulableGracePeriod"
        ),
        instance_ready_timeout=_duration(
            lifecycle, "instanceReadyTimeout", "lifecycle.instanceReadyTimeout", positive=True
        ),
        repair_batch_size=_int(lifecycle, "repairBatchSize", "lifecycle.repairBatchSize", 1),
        abandoned_replacement_grace_period=_duration(
            lifecycle,
            "abandonedReplacementGracePeriod",
            "lifecycle.abandonedReplacementGracePeriod",
        ),
        update_retry=update_retry,
        auto_migrate_max_attempts=_int(migrate, "maxAttempts", "autoMigrate.maxAttempts", 0),
        raw={
            "lifecycle": dict(lifecycle),
            "minReadySeconds": controller.get("minReadySeconds"),
            "deploymentMode": mode,
        },
    )
