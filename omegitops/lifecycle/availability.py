"""What the budgets count: the places Instances fill, the surge slots their extra pods
hold, and the places not served now (update-strategies.txt "maxSurge and
maxUnavailable"). Reads only: rollouts and repairs decide from these counts."""

from __future__ import annotations

import math

from omegitops.lifecycle.work import Work
from omegitops.model.state import Json, Mode, Operation, OperationType, Phase, Row
from omegitops.render import pods as P
from omegitops.render.instance import InstancePods


def replaced_whole(work: Work, operation: Operation) -> bool:
    """Whether ``operation`` hands its Instance over to a replacement Instance at a new
    index: a gang's surge, and any migration."""
    return operation.mode == Mode.SURGE and (
        work.desired.gang or operation.type == OperationType.MIGRATE)


def counts_toward_desired(work: Work, row: Row) -> bool:
    """An Instance that fills one of the desired places.

    A gang surge pair fills one place: the source until it hands over, the
    replacement after.
    """
    if row.phase == Phase.DELETING:
        return False
    operation = row.operation
    if operation is not None and replaced_whole(work, operation) and operation.handed_over:
        return False
    if row.surge_of is not None and row.surge_of in work.rows:
        source = work.rows[row.surge_of].operation
        return source is not None and source.handed_over
    return True


def is_ready(work: Work, row: Row) -> bool:
    """A Ready Instance in the sense of instances.txt's scale-down rule: at rest in
    phase Ready, and counted in READY now (at least its desired number of pods Ready).
    A row still in phase Ready whose pod stopped being ready (a failing readiness
    probe, a lost pod the restart policy leaves alone) is not: kept over a ready one,
    it would leave READY short after a scale-down. An Instance mid-update is not Ready
    either, whatever its pods show."""
    if row.phase != Phase.READY or row.operation is not None:
        return False
    need = work.needed_for(row)
    return InstancePods(need, work.pods_of(row.index)).ready_count() >= need


def counted_pods(work: Work, pods: list[Json]) -> list[Json]:
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
    for row in sorted(work.rows.values(), key=lambda r: r.index):
        need = work.needed_for(row)
        pods = counted_pods(work, work.pods_of(row.index))
        own = need if counts_toward_desired(work, row) else 0
        extra = max(0, len(pods) - own)
        operation = row.operation
        surging = operation is not None and operation.mode == Mode.SURGE
        updating = operation is not None and operation.type == OperationType.UPDATE
        # An in-flight surge holds its slot from its start, before its pods are listed:
        # a single pod's from its Update, a gang's through its replacement Instance, and
        # before that exists (its source waits for an abandoned one to go) through the
        # source, or other starts would take the slot meanwhile.
        gang_waiting = (work.desired.gang and surging and updating
                        and not any(r.surge_of == row.index for r in work.rows.values()))
        reserved = (surging and updating and not work.desired.gang) or (
            row.surge_of is not None and not own) or gang_waiting
        if not extra and not reserved:
            continue
        slots += max(math.ceil(extra / need), 1 if reserved else 0)
        owned = operation is not None and operation.mode == Mode.SURGE \
            or updating or row.surge_of is not None
        for pod in extras(work, row, pods, own):
            deadline = P.deletion_deadline(pod)
            if deadline is not None:
                frees.append(deadline)
                if not owned:
                    notes.append(f"Terminating pod {pod['metadata']['name']} still counts "
                                 "against the surge budget until its deletion grace elapses")
            elif not owned:
                notes.append(_extra_pod_note(row, pod, own))
    return slots, notes, frees


def _extra_pod_note(row: Row, pod: Json, own: int) -> str:
    """Why a live pod beyond its Instance holds a surge slot, in the hold's reason: the
    pod of an Instance being removed (scaled away or torn down) until it is gone, or a
    failed attempt's leftover until a start on its Instance replaces it."""
    name = pod["metadata"]["name"]
    if not own:
        return (f"pod {name} of Instance {row.index}, which is being removed, holds a "
                "surge slot until it is gone")
    return f"extra pod {name} holds a surge slot until a start on its Instance replaces it"


def extras(work: Work, row: Row, pods: list[Json], own: int) -> list[Json]:
    """The pods of ``row`` beyond the Instance itself (all of them when it fills no
    place)."""
    if not own:
        return pods
    if work.desired.gang:
        return []
    return [p for p in pods if P.ordinal_of(p) != row.own_ordinal]


def unavailable(work: Work) -> tuple[int, set[int]]:
    """Desired places not served now, and the rows already counted as not serving."""
    out: set[int] = set()
    filled = 0
    for row in work.rows.values():
        if not counts_toward_desired(work, row):
            continue
        filled += 1
        operation = row.operation
        disruptive = operation is not None and operation.mode != Mode.SURGE
        # In service while its entry pod serves: a gang that lost a worker still serves
        # through its leader; one whose pods serve nothing is out already.
        pods = InstancePods(work.needed_for(row), work.pods_of(row.index))
        if disruptive or pods.serving_pod_count() == 0:
            out.add(row.index)
    missing = max(0, work.lifecycle.replicas - filled)
    return len(out) + missing, out
