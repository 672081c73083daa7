"""Rollout pacing: which Instances start moving this pass, and what holds the rest.

partition keeps Instances below it on their revision (as a StatefulSet
does); maxSurge and maxUnavailable bound how many move at once, each a whole
number or a percentage of the desired Instances rounded up. When nothing sets
the budget a strategy reads, every Instance may move at once.
"""

from __future__ import annotations

import math

from omegitops.lifecycle import pods as P
from omegitops.lifecycle.budgets import scaled_value
from omegitops.lifecycle.instance import InstancePods
from omegitops.lifecycle.retries import held, may_start
from omegitops.lifecycle.updates import SURGE_THEN_DRAIN, open_update, update_mode
from omegitops.lifecycle.work import DELETING, FAILED, SURGE, UPDATE, Work
from omegitops.times import format_time

BUDGET_GATE = "Budget"


def counts_toward_desired(work: Work, row: dict) -> bool:
    """An Instance that fills one of the desired places.

    A gang surge pair fills one place: the source until it hands over, the
    replacement after.
    """
    if row.get("phase") == DELETING:
        return False
    operation = row.get("operation") or {}
    if operation.get("mode") == SURGE and work.desired.gang and operation.get("handedOver"):
        return False
    source = work.rows.get(row.get("surgeOf"))
    if source is not None:
        return bool((source.get("operation") or {}).get("handedOver"))
    return True


def _counted_pods(work: Work, pods: list[dict]) -> list[dict]:
    """Pods that still hold a place: a terminating pod counts until its deletion grace
    elapses (and the pass is woken then), even if it lingers on a finalizer."""
    counted = []
    for pod in pods:
        deadline = P.deletion_deadline(pod)
        if deadline is None or deadline > work.now:
            counted.append(pod)
    return counted


def surge_in_use(work: Work) -> tuple[int, list[str], list[float]]:
    """(surge slots held, what holds them for the hold's reason, when they free).

    Every pod the API still lists for an Instance beyond the Instance's own
    pod count holds a surge slot; for a gang, extra pods count in whole
    Instances, rounded up (the eight draining pods of a scaled-away eight-pod
    Instance hold one slot).
    """
    slots, notes, frees = 0, [], []
    for row in sorted(work.rows.values(), key=lambda r: r["index"]):
        need = work.needed_for(row)
        pods = _counted_pods(work, work.groups.get(row["index"], []))
        own = need if counts_toward_desired(work, row) else 0
        extra = max(0, len(pods) - own)
        operation = row.get("operation") or {}
        # An in-flight surge holds its slot from its start, before its pods are listed:
        # a single pod's from its Update, a gang's through its replacement Instance, and
        # before that exists (its source waits for an abandoned one to go) through the
        # source, or other starts would take the slot meanwhile.
        gang_waiting = (work.desired.gang and operation.get("mode") == SURGE
                        and operation.get("type") == UPDATE
                        and not any(r.get("surgeOf") == row["index"]
                                    for r in work.rows.values()))
        reserved = (operation.get("mode") == SURGE and not work.desired.gang) or (
            row.get("surgeOf") is not None and not own) or gang_waiting
        if not extra and not reserved:
            continue
        slots += max(math.ceil(extra / need), 1 if reserved else 0)
        owned = operation.get("type") == UPDATE or row.get("surgeOf") is not None
        for pod in _extras(work, row, pods, own):
            deadline = P.deletion_deadline(pod)
            if deadline is not None:
                frees.append(deadline)
                if not owned:
                    notes.append(f"Terminating pod {pod['metadata']['name']} still counts "
                                 "against the surge budget until its deletion grace elapses")
            elif not owned:
                notes.append(f"extra pod {pod['metadata']['name']} holds a surge slot until a "
                             "start on its Instance replaces it")
    return slots, notes, frees


def _extras(work: Work, row: dict, pods: list[dict], own: int) -> list[dict]:
    if not own:
        return pods
    if work.desired.gang:
        return []
    ordinal = row.get("ordinal", 0)
    return [p for p in pods if P.ordinal_of(p) != ordinal]


def unavailable(work: Work) -> tuple[int, set[int]]:
    """Desired places not served now, and the rows already counted as not serving."""
    out: set[int] = set()
    filled = 0
    for row in work.rows.values():
        if not counts_toward_desired(work, row):
            continue
        filled += 1
        operation = row.get("operation") or {}
        disruptive = operation and operation.get("mode") != SURGE
        # In service while its entry pod serves: a gang that lost a worker still serves
        # through its leader; one whose pods serve nothing is out already.
        pods = InstancePods(work.needed_for(row), work.groups.get(row["index"], []))
        if disruptive or pods.serving_pod_count() == 0:
            out.add(row["index"])
    missing = max(0, work.lifecycle.replicas - filled)
    return len(out) + missing, out


def plan_rollout(work: Work, previous_hold: dict | None) -> dict:
    """Start what the budgets allow; return what the status reports about the rollout."""
    lifecycle = work.lifecycle
    target = work.desired.revision
    desired = lifecycle.replicas
    partition = int(lifecycle.value("updateStrategy.rollingUpdate.partition", 0) or 0)
    strategy = lifecycle.strategy
    max_surge = scaled_value(lifecycle.value("updateStrategy.rollingUpdate.maxSurge"), desired)
    max_unavailable = scaled_value(
        lifecycle.value("updateStrategy.rollingUpdate.maxUnavailable"), desired)
    surge_slots, notes, frees = surge_in_use(work)
    down, down_rows = unavailable(work)
    reasons: list[str] = []
    refused: list[int] = []
    candidates = [row for row in work.rows.values() if _outdated(work, row, target)]
    # Instances that serve nothing cost no budget to move: take them first.
    candidates.sort(key=lambda r: (r["index"] not in down_rows and r["phase"] != FAILED,
                                   r["index"]))
    for row in candidates:
        if row["index"] < partition or not may_start(work, row, target):
            continue
        surge_ok = strategy != SURGE_THEN_DRAIN or max_surge != 0
        mode = update_mode(work, row, strategy, surge_ok)
        if mode is None:
            refused.append(row["index"])
            _refuse(work, row, target)
            continue
        if mode == SURGE:
            # A start evicts what an earlier attempt left on this Instance and takes
            # over the slot those pods held, so it is not charged twice.
            cost = 0 if _has_extras(work, row) else 1
            if max_surge is not None and surge_slots + cost > max_surge:
                reasons.append(f"per-Component surge budget {max_surge} exhausted "
                               f"(would become {surge_slots + 1})" + "".join(
                                   f"; {note}" for note in notes))
                continue
            surge_slots += cost
        else:
            costs = row["index"] not in down_rows and row["phase"] != FAILED
            if costs and max_unavailable is not None and down + 1 > max_unavailable:
                reasons.append(f"per-Component unavailability budget {max_unavailable} "
                               f"exhausted (would become {down + 1})")
                continue
            if costs:
                down += 1
                down_rows.add(row["index"])
        open_update(work, row, strategy, mode)
    hold = None
    if reasons:
        since = format_time(work.now)
        if previous_hold and previous_hold.get("gate") == BUDGET_GATE:
            since = previous_hold.get("since") or since
        hold = {"gate": BUDGET_GATE, "reason": reasons[0], "since": since, "target": target}
        for moment in frees:
            work.wake(moment)
    # Instances still to move (not refused, not held) keep the component busy.
    outstanding = [r for r in work.rows.values()
                   if r.get("revision") != target and r["index"] >= partition
                   and r.get("surgeOf") is None and r.get("phase") != DELETING
                   and r["index"] not in refused and r.get("refused") != target]
    pending = bool(outstanding) and not held(work, target)
    return {"hold": hold, "partition": partition, "refused": refused, "pending": pending}


def _has_extras(work: Work, row: dict) -> bool:
    pods = _counted_pods(work, work.groups.get(row["index"], []))
    return bool(_extras(work, row, pods, work.needed_for(row)))


def _outdated(work: Work, row: dict, target: str) -> bool:
    if row["index"] in work.moved:
        return False  # one step per pass: it moves again next pass
    if row.get("revision") == target or row.get("surgeOf") is not None:
        return False
    if row.get("operation") and row.get("phase") != FAILED:
        return False
    return row.get("phase") != DELETING


def _refuse(work: Work, row: dict, target: str) -> None:
    """InPlaceOnly refuses any change but images: the Instance stays, the rollout stalls."""
    if row.get("refused") == target:
        return
    row["refused"] = target
    work.event("Warning", "InPlaceUpdateNotPossible", row["index"],
               "rejected update: InPlaceOnly strategy but diff exceeds container images")
