"""Canary steps: how many Instances a canary lets onto the new revision, and when its
current step ends.

update-strategies.txt: "a canary's current step replaces your partition". The steps
are ``spec.rollout.canary.steps`` (render/resolve.py resolves them for each component
the canary names). Each step sets how many Instances run the new revision (a number, or
a percentage of the desired Instances rounded up like a budget), then waits once that
many are Ready on it:

- ``pause: {duration: 10m}``: until the duration has passed since the step was reached;
- ``pause: {}``: until promoted (``omegitops rollout promote``, which records the step
  it promotes in the InferenceReplica's ``ome.io/rollout-promote`` annotation), or
  until Git moves the steps (the current step's definition changes, or the list ends
  before it);
- no ``pause``: not at all, the next step follows.

Past the last step the canary is done and the component's own partition applies
again. A revision held after failed attempts stops the canary where it is: no step
ends while the revision is held (docs/behaviour.md "Canary steps").

The current step is kept in the InferenceReplica's ``status.canary`` and each pass
computes the next one from it and the pass's clock reading alone: nothing here reads
the clock or the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from omegitops.model.budgets import scaled_value
from omegitops.model.durations import DurationError, parse_duration
from omegitops.model.state import Json, Phase, Row
from omegitops.render.resolve import ComponentLifecycle
from omegitops.util.times import format_time, parse_time

PROMOTE_ANNOTATION = "ome.io/rollout-promote"
# What a reached step waits for (status.canary.pause).
PROMOTION = "promotion"


@dataclass(frozen=True)
class CanaryStep:
    """One step as Git writes it: the Instances on the new revision (as written), and
    the pause that follows: ``duration`` seconds (``duration_text`` as written), or
    until promoted (``promote``), or none."""

    replicas: int | str
    duration: float | None = None
    duration_text: str | None = None
    promote: bool = False

    @property
    def pause(self) -> str | None:
        """The pause as the status shows it: the duration, ``promotion``, or None."""
        return self.duration_text if self.duration is not None else (
            PROMOTION if self.promote else None)

    def written(self) -> str:
        """The step as Git writes it, to tell whether Git changed it."""
        return json.dumps([self.replicas, self.pause])


@dataclass(frozen=True)
class Canary:
    """The canary's current step toward ``target`` (1-based ``step`` of ``steps``):
    ``allowed`` Instances may run the new revision; since when the step runs, since
    when its Instances are on the new revision (``reached_at``), when its pause ends
    (``ends_at``, a timed pause), what it waits for, who promoted it. ``done``: past
    the last step; ``stopped``: a held revision stops it."""

    target: str
    step: int
    steps: int
    allowed: int
    pause: str | None
    definition: str
    started_at: float
    reached_at: float | None = None
    ends_at: float | None = None
    waiting_for: str = ""
    promoted_by: str | None = None
    done: bool = False
    stopped: bool = False

    @property
    def waits_on_pause(self) -> bool:
        """The step's Instances are on the new revision and its pause holds the rest."""
        return self.reached_at is not None and not self.done

    def for_storage(self) -> Json:
        """``status.canary``."""
        return {"target": self.target, "step": self.step, "steps": self.steps,
                "replicas": self.allowed, "pause": self.pause,
                "definition": self.definition,
                "startedAt": format_time(self.started_at),
                "reachedAt": _time(self.reached_at), "endsAt": _time(self.ends_at),
                "waitingFor": self.waiting_for, "promotedBy": self.promoted_by,
                "done": self.done}


def steps_of(lifecycle: ComponentLifecycle) -> tuple[CanaryStep, ...]:
    """The canary steps that move the component; () when no canary does."""
    found = lifecycle.fields.get("canary.steps")
    written = found.value if found is not None else None
    if not isinstance(written, list):
        return ()
    return tuple(_step(entry) for entry in written if isinstance(entry, dict))


def _step(entry: dict[str, Any]) -> CanaryStep:
    replicas = entry.get("replicas")
    count = replicas if isinstance(replicas, int | str) else 0
    pause = entry.get("pause")
    if not isinstance(pause, dict):
        return CanaryStep(count)
    text = pause.get("duration")
    if isinstance(text, str):
        try:
            return CanaryStep(count, parse_duration(text), text)
        except DurationError:
            pass  # the schema refuses it; a pause nobody can time waits for a person
    return CanaryStep(count, promote=True)


def allowed_at(step: CanaryStep, replicas: int) -> int:
    """Instances the step lets onto the new revision: rounded up, as a budget is, and
    never more than the component has."""
    scaled = scaled_value(step.replicas, replicas)
    return min(replicas, scaled if scaled is not None else replicas)


def promotion(annotations: dict[str, Any] | None) -> Json | None:
    """The promotion ``omegitops rollout promote`` recorded: {by, at, target, step}."""
    value = (annotations or {}).get(PROMOTE_ANNOTATION)
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def promotion_value(by: str, at: str, target: str, step: int) -> str:
    """The annotation ``omegitops rollout promote`` writes."""
    return json.dumps({"by": by, "at": at, "target": target, "step": step}, sort_keys=True)


def current_step(steps: tuple[CanaryStep, ...], replicas: int, target: str,
                 rows: Iterable[Row], previous: Json | None,
                 annotations: dict[str, Any] | None, now: float,
                 held: bool) -> Canary | None:
    """The canary's step this pass, from the step the status records (``previous``), the
    Instances, the promotion recorded and ``now``; None when no canary moves the
    component, or no Instance is left to move toward ``target``."""
    live = [row for row in rows if row.surge_of is None and row.phase != Phase.DELETING]
    if not steps:
        return None
    canary = _resumed(steps, replicas, target, previous, now)
    if all(row.revision == target for row in live):
        return None  # nothing to move: a new component, or a rollout already done
    if canary is None:
        canary = _begin(steps, replicas, target, 1, now)
    on_target = sum(1 for row in live if row.revision == target
                    and row.phase == Phase.READY and row.operation is None)
    promoted = promotion(annotations)
    # Steps without a pause, and pauses already over, are passed in the same pass.
    for _ in range(len(steps) + 1):
        if canary.done:
            return canary
        following = _next(steps, replicas, canary, on_target, promoted, now, held)
        if following is canary:
            return canary
        canary = following
    return canary


def _resumed(steps: tuple[CanaryStep, ...], replicas: int, target: str,
             previous: Json | None, now: float) -> Canary | None:
    """The step the status records, as Git now writes it: a step whose definition Git
    changed starts again; a list that ends before it ends the canary."""
    if not isinstance(previous, dict) or previous.get("target") != target:
        return None
    try:
        number = int(previous["step"])
        started = parse_time(str(previous["startedAt"]))
        reached_text = previous.get("reachedAt")
        reached = parse_time(str(reached_text)) if reached_text else None
    except (KeyError, TypeError, ValueError):
        return None  # unreadable: the canary starts over at its first step
    if number > len(steps) or previous.get("done"):
        # Done stays done: the rest of the rollout moves under the component's partition.
        return _begin(steps, replicas, target, len(steps) + 1, started)
    step = steps[number - 1]
    if previous.get("definition") != step.written():
        return _begin(steps, replicas, target, number, now)  # Git moved the step
    return replace(_begin(steps, replicas, target, number, started), reached_at=reached,
                   promoted_by=previous.get("promotedBy"))


def _begin(steps: tuple[CanaryStep, ...], replicas: int, target: str, number: int,
           now: float) -> Canary:
    if number > len(steps):
        return Canary(target, len(steps), len(steps), replicas, None, "", now,
                      waiting_for="nothing: the canary is done", done=True)
    step = steps[number - 1]
    return Canary(target, number, len(steps), allowed_at(step, replicas), step.pause,
                  step.written(), now)


def _next(steps: tuple[CanaryStep, ...], replicas: int, canary: Canary, on_target: int,
          promoted: Json | None, now: float, held: bool) -> Canary:
    """The same step with what it waits for, or the step after it."""
    step = steps[canary.step - 1]
    if held:
        return replace(canary, stopped=True, waiting_for=(
            f"revision {canary.target} is held after failed attempts: the canary stops "
            "at this step"))
    if canary.reached_at is None:
        if on_target < canary.allowed:
            missing = canary.allowed - on_target
            return replace(canary, waiting_for=(
                f"{missing} more Instance{'' if missing == 1 else 's'} Ready on "
                f"{canary.target}"))
        canary = replace(canary, reached_at=now)
    reached = canary.reached_at if canary.reached_at is not None else now
    if promoted and promoted.get("target") == canary.target \
            and promoted.get("step") == canary.step:
        by = str(promoted.get("by") or "unknown")
        return replace(_begin(steps, replicas, canary.target, canary.step + 1, now),
                       promoted_by=by)
    if step.duration is not None:
        ends = reached + step.duration
        if now < ends:
            return replace(canary, ends_at=ends,
                           waiting_for=f"its pause of {step.duration_text} to end at "
                                       f"{format_time(ends)}")
    elif step.promote:
        return replace(canary, waiting_for="promotion (omegitops rollout promote)")
    return _begin(steps, replicas, canary.target, canary.step + 1, now)


def partition_of(canary: Canary | None, replicas: int, partition: int) -> int:
    """The partition the rollout keeps: the canary step's, while a step holds, else the
    component's own."""
    if canary is None or canary.done:
        return partition
    return max(0, replicas - canary.allowed)


def wake_of(canary: Canary | None) -> float | None:
    """When a timed pause ends, for the pass to look again then."""
    return None if canary is None or canary.done or canary.stopped else canary.ends_at


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else format_time(seconds)

