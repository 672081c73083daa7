"""Counts and conditions of a component, from its Instance rows and pods.

An Instance counts toward a state when at least its desired number of pods
are in it (instances.txt "Readiness and availability"), so it still counts
during a surge:

- ready: its pods are Ready (containers ready and the ``ome.io/serving``
  gate True);
- available: its pods' containers have been ready for minReadySeconds. The
  headless Service lists pods before they enter rotation, so with
  minReadySeconds 0 an Instance can be available before it is ready;
- serving: its entry pod (the leader, or the single pod) serves; a gang
  whose leader does not serve serves nothing, however many workers do.
"""

from __future__ import annotations

from collections.abc import Iterable

from omegitops.lifecycle.missing import REVISION_MISSING, missing_revisions
from omegitops.lifecycle.pause import described
from omegitops.lifecycle.rollout import RolloutOutcome
from omegitops.lifecycle.work import Work
from omegitops.model.budgets import scaled_value
from omegitops.model.partition import partition_held
from omegitops.model.state import Json, OperationType, Phase, Row
from omegitops.render.component import DesiredComponent
from omegitops.render.instance import InstancePods
from omegitops.render.resolve import ISVC, RUNTIME
from omegitops.util.times import format_time

TRUE, FALSE = "True", "False"


def component_status(work: Work, rows: list[Row], previous: Json,
                     rollout: RolloutOutcome) -> Json:
    desired, now = work.desired, work.now
    min_ready = desired.lifecycle.min_ready_seconds
    ready = available = serving = updated = 0
    for row in rows:
        # Every pod of the Instance counts, so it still counts during a surge.
        need = work.needed_for(row)
        pods = InstancePods(need, work.pods_of(row.index))
        if pods.ready_count() >= need:
            ready += 1
        since = pods.containers_ready_since()
        if since is not None and now >= since + min_ready:
            available += 1
        elif since is not None:
            # Counted once its window ends, whatever else moves then: an Instance with
            # no operation (a Failed one whose pod came up late) has no step to wake it.
            work.wake(since + min_ready)
        if pods.serving_pod_count() >= need:
            serving += 1
        if row.revision == desired.revision and row.phase != Phase.DELETING:
            updated += 1
    want = desired.lifecycle.replicas
    counts = {
        "replicas": len(rows),
        "readyReplicas": ready,
        "availableReplicas": available,
        "servingReplicas": serving,
        "updatedReplicas": updated,
    }
    conditions = _conditions(work, rows, counts, want, previous.get("conditions") or [],
                             rollout)
    status: Json = {
        **counts,
        "desiredReplicas": want,
        "currentRevision": current_revision(rows, desired.revision, want),
        "updateRevision": desired.revision,
        "conditions": conditions,
        "rolloutHold": None if rollout.hold is None else rollout.hold.for_storage(),
    }
    canary = rollout.decision.canary
    if canary is not None:
        # The current step, since when, what it waits for (lifecycle/canary.py).
        status["canary"] = canary.for_storage()
    group = rollout.decision.group
    if group is not None:
        # The group it moves in, what it lets onto the new revision, whom it waits for.
        status["group"] = group.for_storage()
    return status


def current_revision(rows: list[Row], update: str, want: int) -> str | None:
    """The revision most Instances run, Ready ones first. A tie never goes to the
    update revision: as a StatefulSet's, the current revision stays until the rollout
    has moved more Instances than it holds back (a canary staged at one of two
    Instances is still on its current revision); other ties go to the name, so the
    answer never depends on hash order. A component scaled to zero with no Instance
    left runs nothing older than its update revision, which is then its current one,
    as a StatefulSet at zero replicas reports."""
    if not rows and want == 0:
        return update
    counts: dict[str, tuple[int, int]] = {}
    for row in rows:
        revision = row.revision
        if revision:
            ready, total = counts.get(revision, (0, 0))
            counts[revision] = (ready + (row.phase == Phase.READY), total + 1)
    if not counts:
        return None
    return min(counts, key=lambda r: (-counts[r][0], -counts[r][1], r == update, r))


def _conditions(work: Work, rows: list[Row], counts: dict[str, int], want: int,
                previous: list[Json], rollout: RolloutOutcome) -> list[Json]:
    desired, now = work.desired, work.now
    wanted = {
        "Ready": _ready(desired, rows, counts, want, rollout),
        "Progressing": _progressing(rows, want, rollout),
        "RolloutStalled": _stalled(work, rows, rollout),
        "InstanceReadyTimeoutUnconfigured": _timeout(desired),
        "DrainOverdue": _drain_overdue(rows),
        f"{desired.component.capitalize()}Ready": _component_ready(desired, counts, want),
    }
    missing = missing_revisions(work, rows)
    if missing:
        # Only while it holds: once no Instance runs a revision that is gone, it goes.
        wanted[REVISION_MISSING] = (TRUE, "ControllerRevisionGone", "; ".join(
            f"revision {revision} of Instances {_list(indices)} has no ControllerRevision"
            for revision, indices in missing.items()) + (
            f": their running pods keep it, and what must be rebuilt is built at "
            f"{desired.revision}"))
    if desired.pinned:
        wanted["RuntimeDrifted"] = (
            (TRUE, "RuntimeChanged", ("the runtime changed since this service pinned it "
             "(spec.runtime.autoSync: false); the pinned template keeps serving"))
            if desired.drifted
            else (FALSE, "RuntimeInSync", "the pinned runtime matches the runtime")
        )
    return [_condition(kind, *value, previous, now) for kind, value in wanted.items()]


def _ready(desired: DesiredComponent, rows: list[Row], counts: dict[str, int], want: int,
           rollout: RolloutOutcome) -> tuple[str, str, str]:
    failed = [row.index for row in rows if row.phase == Phase.FAILED]
    serving = counts["servingReplicas"]
    if failed:
        return (FALSE, "InstanceFailed", (f"Instances {_list(failed)} failed; "
                f"{serving}/{want} Instances serving"))
    if serving < want:
        return FALSE, "InsufficientServing", f"{serving}/{want} Instances serving"
    staged = _staged(desired, rows, want, rollout.partition)
    canary = rollout.decision.canary
    group = rollout.decision.group
    if staged and group is not None and rollout.decision.group_held:
        # The rollout group, not a partition of the user's, holds the rest.
        text = staged.replace(f"Staged at partition {rollout.partition}",
                              f"Rollout group {group.name}")
        return TRUE, "RolloutGroup", f"{text}; waits for {group.waits_for}: {group.why}"
    if staged and canary is not None and not canary.done:
        # The canary's step, not a partition of the user's, holds the rest.
        text = staged.replace(f"Staged at partition {rollout.partition}",
                              f"Canary step {canary.step}/{canary.steps}")
        return TRUE, "CanaryStep", f"{text}; waits for {canary.waiting_for}"
    if staged:
        return TRUE, "Staged", staged
    behind = [row.index for row in rows if row.revision != desired.revision]
    if rollout.decision.paused and behind:
        return TRUE, "RolloutPaused", (
            f"{serving}/{want} Instances serving; rollout paused by "
            f"{described(rollout.decision.paused)} with Instances {_list(behind)} "
            f"not on {desired.revision}")
    return TRUE, "AllInstancesServing", f"{serving}/{want} Instances serving"


def _staged(desired: DesiredComponent, rows: list[Row], want: int,
            partition: int) -> str | None:
    """update-strategies.txt: ``Staged at partition 1: 1/2 Instances on <rev>, 1 held on
    the prior revision`` once every Instance the partition does not hold has moved.
    The held ones are those the rollout held (model/partition.py)."""
    holds = set(partition_held(rows, desired.revision, partition))
    held = [r for r in rows if r.index in holds]
    moved = [r for r in rows if r.revision == desired.revision]
    others = [r for r in rows if r.index not in holds]
    if not held or any(r.revision != desired.revision or r.operation is not None
                       for r in others):
        return None
    return (f"Staged at partition {partition}: {len(moved)}/{want} Instances on "
            f"{desired.revision}, {len(held)} held on the prior revision")


def _progressing(rows: list[Row], want: int,
                 rollout: RolloutOutcome) -> tuple[str, str, str]:
    in_flight = [row for row in rows if row.operation is not None
                 and row.phase != Phase.FAILED]
    paused = rollout.decision.paused
    # As a paused Deployment's: the condition says the rollout is paused, and by whom.
    pause = f"rollout paused by {described(paused)}" if paused else ""
    if in_flight or len(rows) != want:
        text = _plural(len(in_flight), "Instance operation") + " in flight"
        return TRUE, "InstancesChanging", f"{text}; {pause}" if pause else text
    if pause:
        return FALSE, "RolloutPaused", f"{pause}: no update starts"
    return FALSE, "Settled", "no Instance operation in flight"


def _stalled(work: Work, rows: list[Row], rollout: RolloutOutcome) -> tuple[str, str, str]:
    target = work.desired.revision
    if rollout.refused:
        return (TRUE, "InPlaceUpdateNotPossible",
                (f"InPlaceOnly refused to move Instances {_list(rollout.refused)}: the change "
                "is more than container images"))
    if (work.retries.get(target) or {}).get("held"):
        return TRUE, "RevisionHeld", f"revision {target} is held after failed attempts"
    failed = [r.index for r in rows if r.phase == Phase.FAILED
              and r.operation is not None and r.operation.type == OperationType.UPDATE]
    if failed:
        return TRUE, "InstanceFailed", f"Instances {_list(failed)} failed during the rollout"
    return FALSE, "RolloutMoving", "nothing stops the rollout"


def _drain_overdue(rows: list[Row]) -> tuple[str, str, str]:
    overdue = [r.index for r in rows if r.operation is not None and r.operation.overdue]
    if overdue:
        return (TRUE, "DrainOverdue", (f"Instances {_list(overdue)} are still draining past "
                "their deadline; they do not fail (see Recover stuck deletions)"))
    return FALSE, "NoDrainOverdue", "no drain is past its deadline"


def _component_ready(desired: DesiredComponent, counts: dict[str, int], want: int) -> tuple[str, str, str]:
    """restart-policy.txt: False with InsufficientAvailable while an Instance is out by
    default; with maxUnavailable set, True with MinimumAvailable while no more than that
    many Instances are out of service.

    "Set" means set for the component, in the InferenceService or its runtime. The
    operator's default (the chart's 25%) paces rollouts but does not count here: the
    documents' own chart-based example says that "by default" EngineReady is False
    while an engine Instance restarts, which a 25% default would never let happen for
    an engine of up to 4 Instances."""
    field = desired.lifecycle.fields.get("updateStrategy.rollingUpdate.maxUnavailable")
    own = field.value if field is not None and field.source in (ISVC, RUNTIME) else None
    budget = scaled_value(own, want) or 0
    out = max(0, want - counts["servingReplicas"])
    message = f"{counts['servingReplicas']}/{want} Instances serving, {out} out of service"
    if out <= budget:
        return TRUE, "MinimumAvailable", message + f" (maxUnavailable {budget})"
    return FALSE, "InsufficientAvailable", message + f" (maxUnavailable {budget})"


def _timeout(desired: DesiredComponent) -> tuple[str, str, str]:
    if desired.lifecycle.settings.instance_ready_timeout is None:
        return (TRUE, "NoDeadline", ("lifecycle.instanceReadyTimeout is unset everywhere: "
                "operations get no deadline and a stuck Instance waits for you"))
    return (FALSE, "DeadlineConfigured",
            f"operations time out after {desired.lifecycle.settings.instance_ready_timeout_text}")


def _condition(kind: str, status: str, reason: str, message: str, previous: list[Json],
               now: float) -> Json:
    """A condition whose lastTransitionTime moves only when its status does."""
    since = format_time(now)
    for old in previous:
        if old.get("type") == kind and old.get("status") == status:
            since = old.get("lastTransitionTime") or since
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _list(indices: Iterable[int]) -> str:
    return ", ".join(str(i) for i in indices)
