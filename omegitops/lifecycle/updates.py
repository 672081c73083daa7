"""Update operations: moving one Instance onto a new revision.

- Surge (SurgeThenDrain): SurgeCreate, SurgeWaitReady, SurgeWaitAvailable,
  HandOver, DrainOld, WaitDrained. A single-pod Instance gets its new pod at
  the other ordinal; a gang gets a whole replacement Instance at a new index.
- Drain (RecreatePod, or a change InPlaceIfPossible can't make in place):
  Unroute, DeletePods, WaitGone, CreatePods, WaitReady, WaitAvailable
  (lifecycle/bringup.py).
- InPlace (only regular containers' images, or pod labels, changed): Unroute,
  PatchImages, WaitReady, WaitAvailable. A new pod label alone restarts nothing:
  the pod stays in rotation, only its ``ome.io/revision`` label moves.

update-strategies.txt "Changing the pod template mid-surge" decides what a
surge does when its target revision is withdrawn.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace

from omegitops.lifecycle.bringup import (
    finish_when_available,
    new_row,
    out_of_rotation,
    previews,
    reached,
    recreate,
)
from omegitops.lifecycle.failures import (
    check_instance,
    check_pods,
    ended_failure,
    going_text,
    lost_record,
    revision_caused,
    stuck_terminating,
    wait_gone,
)
from omegitops.lifecycle.missing import REVISION_MISSING
from omegitops.lifecycle.operations import open_delete, step_create
from omegitops.lifecycle.repairs import find_trigger
from omegitops.lifecycle.retries import record_failure
from omegitops.lifecycle.work import Work, steering
from omegitops.model.actions import PatchImages
from omegitops.model.state import (
    Json,
    Mode,
    Operation,
    OperationType,
    Outcome,
    Phase,
    Row,
    Step,
    Strategy,
)
from omegitops.model.steps import SEQUENCES
from omegitops.render import pods as P
from omegitops.render.instance import InstancePods
from omegitops.render.templates import DEFAULT, LABEL_REVISION, OPERATION_ANNOTATION

FIRST_STEP = {mode: SEQUENCES[OperationType.UPDATE, mode].first()
              for mode in (Mode.SURGE, Mode.DRAIN, Mode.IN_PLACE)}
SURGE_ABANDONED, GANG_SURGE_ABANDONED = "SurgeAbandoned", "GangSurgeAbandoned"


# -- choosing how an Instance moves ------------------------------------------------


def images_only(old: dict[str, Json], new: dict[str, Json]) -> bool:
    """Whether two single-pod template sets differ in regular containers' images and
    pod labels alone: what an in-place update can make.

    update-strategies.txt: "A label that you add to the pod template reaches the pod
    only when OME recreates it", so a label is no reason to recreate; the pod keeps the
    labels it has. Annotations are "any other change"."""
    if set(old) != {DEFAULT} or set(new) != {DEFAULT}:
        return False
    return _without_images(old[DEFAULT]) == _without_images(new[DEFAULT])


def labels_only(old: dict[str, Json], new: dict[str, Json]) -> bool:
    """Whether two single-pod template sets differ in pod labels alone: an in-place
    update that changes no container (nothing restarts)."""
    if set(old) != {DEFAULT} or set(new) != {DEFAULT}:
        return False
    return _without_labels(old[DEFAULT]) == _without_labels(new[DEFAULT])


def _without_labels(template: Json) -> Json:
    blank = copy.deepcopy(template)
    blank.get("metadata", {}).pop("labels", None)
    return blank


def _without_images(template: Json) -> Json:
    blank = _without_labels(template)
    for container in blank["spec"].get("containers") or []:
        container.pop("image", None)
    return blank


def changes_no_container(work: Work, row: Row) -> bool:
    """Whether moving ``row`` to the desired revision changes no container of its pod
    (a new pod label alone): an in-place move that takes nothing out of service."""
    return (not work.desired.gang and work.has_templates(row.revision)
            and labels_only(work.templates(row.revision), work.desired.templates))


def update_mode(work: Work, row: Row, strategy: str, surge_allowed: bool) -> Mode | None:
    """How ``row`` moves under ``strategy``; None when InPlaceOnly must refuse."""
    if pod_less_failure(work, row):
        # Nothing runs to surge beside, patch or refuse: the revision rebuilds it.
        return Mode.DRAIN
    if strategy == Strategy.SURGE_THEN_DRAIN:
        return Mode.SURGE if surge_allowed else Mode.DRAIN
    if strategy == Strategy.RECREATE_POD or work.desired.gang:
        # A gang moves whole: the in-place strategies recreate its pods.
        return Mode.DRAIN
    # With its revision's templates gone, nothing shows the change is images only.
    possible = work.has_templates(row.revision) and images_only(
        work.templates(row.revision), work.desired.templates)
    if possible:
        return Mode.IN_PLACE
    return None if strategy == Strategy.IN_PLACE_ONLY else Mode.DRAIN


def pod_less_failure(work: Work, row: Row) -> bool:
    """A Failed Instance with no live pod: a new revision that reaches it rebuilds it
    ("OME keeps a Failed Instance ... until you reset it or a new revision reaches
    it"), under any strategy, rather than update pods that do not exist."""
    return row.phase == Phase.FAILED and not work.instance(row).live


def open_update(work: Work, row: Row, strategy: str, mode: Mode) -> Row:
    target = work.desired.revision
    operation = work.operation(OperationType.UPDATE, FIRST_STEP[mode], strategy,
                               target=target, mode=mode)
    if row.phase == Phase.FAILED:
        # A new revision that reaches a Failed Instance rebuilds it, as a failed
        # update's retry does, with or without pods left: the incarnation stays through
        # "the rebuild of a failed or Pending Instance" (instances.txt).
        operation = replace(operation, retry=True)
    if row.avoid_for not in (None, target):
        row = row.but(avoid_nodes=None, avoid_for=None)  # steering for a revision replaced
    if mode == Mode.SURGE and not work.desired.gang:
        operation = replace(operation, ordinal=1 - row.own_ordinal)
    work.event("Normal", "InstanceUpdating", row.index,
               f"updating to {target} ({strategy}: {mode})")
    return step_update(work, row.but(operation=operation, phase=Phase.UPDATING,
                                     refused=None))[0]


def step_update(work: Work, row: Row) -> tuple[Row, Outcome]:
    mode = row.op.mode
    if mode == Mode.SURGE:
        if work.desired.gang:
            return _surge_gang(work, row)
        return _surge_single(work, row), Outcome.KEPT
    if mode == Mode.IN_PLACE:
        return _in_place(work, row), Outcome.KEPT
    return _drain(work, row), Outcome.KEPT


def _finish(work: Work, row: Row, revision: str) -> Row:
    work.event("Normal", "InstanceUpdated", row.index,
               f"updated to {revision} (incarnation={row.incarnation})")
    return reached(row.but(revision=revision, phase=Phase.READY, operation=None,
                           attempts=None, retry_at=None))


def _target(operation: Operation) -> str:
    """The revision an update moves to (every Update records one)."""
    if operation.target_revision is None:
        raise ValueError("an Update without a target revision")
    return operation.target_revision


# -- SurgeThenDrain, one pod ------------------------------------------------------


def _surge_pods(work: Work, row: Row) -> tuple[list[Json], list[Json]]:
    """(this attempt's new pods, pods an earlier attempt left at the surge ordinal)."""
    operation = row.op
    at_ordinal = [p for p in work.pods_of(row.index)
                  if P.ordinal_of(p) == operation.ordinal]
    mine = [p for p in at_ordinal
            if p["metadata"].get("annotations", {}).get(OPERATION_ANNOTATION)
            == operation.started_at]
    return mine, [p for p in at_ordinal if p not in mine]


@dataclass(frozen=True, slots=True)
class _SurgePods:
    """What a single pod's surge step reads: its target, the new pods this attempt made
    (and those of them still live), the pods an earlier attempt left at the surge
    ordinal, and the Instance's own (old) pods."""

    target: str
    mine: list[Json]
    new_live: list[Json]
    stale: list[Json]
    old: InstancePods


def _surge_single(work: Work, row: Row) -> Row:
    operation = row.op
    target = _target(operation)
    mine, stale = _surge_pods(work, row)
    old = work.instance(row)
    new_live = [p for p in mine if not P.is_terminating(p) and not P.has_ended(p)]
    superseded = target != work.desired.revision
    handed_over = operation.handed_over
    if handed_over and not new_live:
        return _replacement_lost(work, row, old.live, SURGE_ABANDONED, mine)
    # A withdrawn target is abandoned at once, unless the old pod is gone and a ready
    # new pod is all the Instance has: then it promotes on the revision it was built for.
    promote_anyway = not old.live and any(P.containers_ready(p) for p in new_live)
    if operation.step == Step.ABANDON or (superseded and not handed_over
                                          and not promote_anyway):
        return _abandon_single(work, row, mine)
    pods = _SurgePods(target, mine, new_live, stale, old)
    if operation.step != Step.SURGE_CREATE and not handed_over:
        checked, failure = check_pods(work, operation, mine)
        row = row.but(operation=checked)
        if failure is not None:
            return surge_failed(work, row, failure, new_live, mine)
    return SINGLE_SURGE_STEPS[operation.step](work, row, pods)


def _single_surge_create(work: Work, row: Row, pods: _SurgePods) -> Row:
    operation = row.op
    if pods.stale:
        # The start evicts what an earlier attempt left before it creates anything.
        for pod in pods.stale:
            work.delete(pod)
        work.wake(min(P.deletion_deadline(p) or work.now for p in pods.stale))
        # A pod whose node stopped reporting holds the name past its grace: named,
        # and the attempt fails at its deadline (the old pod keeps serving).
        row, failure = wait_gone(work, row, pods.stale)
        return row if failure is None else surge_failed(work, row, failure, pods.new_live,
                                                        pods.mine)
    if work.create_pods(row, pods.target, row.incarnation, operation.ordinal or 0, pods.mine,
                        operation):
        return row
    return row.step_to(Step.SURGE_WAIT_READY)


def _single_surge_wait_ready(work: Work, row: Row, pods: _SurgePods) -> Row:
    new_live = pods.new_live
    if new_live and all(P.containers_ready(p) for p in new_live):
        if _preview(work, row):
            # Blue-green: the new pod stays out of rotation until the group switches.
            return row.step_to(Step.SURGE_WAIT_AVAILABLE)
        work.route(new_live, True)
        return row.step_to(Step.SURGE_WAIT_AVAILABLE, served=True)
    return row


def _single_surge_wait_available(work: Work, row: Row, pods: _SurgePods) -> Row:
    if _preview(work, row):
        ready = _available(work, pods.new_live, "ContainersReady")
        return row.step_to(Step.HAND_OVER) if ready else row
    # A pass cut short after recording this step may not have put the new pod into
    # rotation: do it now (as finish_when_available does), or this waits forever.
    work.route(pods.new_live, True)
    return row.step_to(Step.HAND_OVER) if _available(work, pods.new_live) else row


def _single_hand_over(work: Work, row: Row, pods: _SurgePods) -> Row:
    group = work.observed.group
    if _preview(work, row) and group is not None:
        if not group.switch:
            # Blue-green: the old pod serves until every member's new set is Available.
            return row.with_op(waiting=f"the switch of rollout group {group.name}: "
                                       f"{group.why}")
        work.route(pods.new_live, True)
        row = row.with_op(served=True, waiting=None)
    return hand_over(work, row, pods.old.live)


def _preview(work: Work, row: Row) -> bool:
    """A blue-green group's surge: its new pods come up out of rotation, and serving
    switches to them with every other member's (lifecycle/groups.py)."""
    return previews(work, replace(row.op, served=False))


def _single_drain_old(work: Work, row: Row, pods: _SurgePods) -> Row:
    return drain_old(work, row, pods.old.pods)


def _single_wait_drained(work: Work, row: Row, pods: _SurgePods) -> Row:
    drained = wait_drained(work, row, pods.old.pods)
    if drained is not None:
        return drained
    return _finish(work, row.but(ordinal=row.op.ordinal), pods.target)


# A single pod's surge, by step (Abandon is _abandon_single's, before these).
SINGLE_SURGE_STEPS: dict[Step, Callable[[Work, Row, _SurgePods], Row]] = {
    Step.SURGE_CREATE: _single_surge_create,
    Step.SURGE_WAIT_READY: _single_surge_wait_ready,
    Step.SURGE_WAIT_AVAILABLE: _single_surge_wait_available,
    Step.HAND_OVER: _single_hand_over,
    Step.DRAIN_OLD: _single_drain_old,
    Step.WAIT_DRAINED: _single_wait_drained,
}


def _available(work: Work, pods: list[Json], condition: str = "Ready") -> bool:
    """All ``pods`` Ready for minReadySeconds (waking when the window ends). A blue-green
    group's new pods, out of rotation until the switch, count by ``ContainersReady``:
    their Ready condition waits for the serving gate, which the switch sets."""
    if not pods or not all(not P.is_terminating(p) and P.condition(p, condition)[0]
                           for p in pods):
        return False
    since = max(P.condition(p, condition)[1] or 0.0 for p in pods)
    end = since + work.lifecycle.min_ready_seconds
    if work.now >= end:
        return True
    work.wake(end)
    return False


# HandOver, DrainOld, WaitDrained: shared by single pods and gangs.


def hand_over(work: Work, row: Row, live: list[Json]) -> Row:
    work.route(live, False)
    return row.step_to(Step.DRAIN_OLD, handed_over=True)


def drain_old(work: Work, row: Row, listed: list[Json]) -> Row:
    work.delete_unrouted(listed)
    return row.step_to(Step.WAIT_DRAINED)


def wait_drained(work: Work, row: Row, listed: list[Json]) -> Row | None:
    """The row while the source's pods go; None once they are gone and the update may
    end."""
    if listed:
        # A pass cut short after recording WaitDrained (a failed write, a killed job) may
        # have deleted only some of the pods: delete the rest (terminating ones are skipped),
        # or the update would wait for them forever.
        work.delete_unrouted(listed)
        # The update, and its surge slot, last until the drained pods are gone
        # (update-strategies.txt), however long: the Instance serves from its new pods,
        # and OME never fails an Instance whose pods all serve (instances.txt). The wait
        # is named instead, past the deadline too.
        _wake_for(work, listed)
        return row.with_op(waiting=going_text(work, listed))
    return None


def _wake_for(work: Work, pods: list[Json]) -> None:
    """Wake when the first of ``pods`` still within its deletion grace reaches its end;
    a pod past it (a finalizer, a silent node) goes on another's clock, and the pass
    that sees it gone is woken by the change."""
    stuck = stuck_terminating(work, pods)
    pending = [P.deletion_deadline(p) or work.now for p in pods if p not in stuck]
    if pending:
        work.wake(min(pending))


def _abandon_single(work: Work, row: Row, mine: list[Json]) -> Row:
    """End a superseded surge while the old pod still serves: unroute the new pod if
    it serves, delete it, and return to Ready on the revision the Instance runs."""
    if row.op.step != Step.ABANDON:
        work.event("Normal", SURGE_ABANDONED, row.index, _superseded_message(work, row))
        row = row.step_to(Step.ABANDON)
    live = [p for p in mine if not P.is_terminating(p)]
    if any(P.gate_set(p) and not P.has_ended(p) for p in live):
        work.route(live, False)
        return row
    if live:
        grace = None if row.op.served else abandon_grace(work)
        for pod in live:
            work.delete(pod, grace)
        return row
    if mine:
        # The old pod keeps serving meanwhile, so this waits without failing; the pods
        # it waits for are named.
        _wake_for(work, mine)
        return row.with_op(waiting=going_text(work, mine))
    if not work.instance(row).live:
        # The old pod went meanwhile (its node stopped reporting and the taint manager
        # deleted it, say): nothing is left to serve, and Ready with no pod would be
        # repaired by nothing (update-strategies.txt: "With the old pod gone too,
        # nothing is left to serve. The Instance re-enters Failed with no operation, and
        # OME rebuilds it at the newest revision from scratch").
        text = (f"abandoned surge to {_target(row.op)}: no source pod stands, so the "
                f"Instance re-enters as a fresh start at revision {work.desired.revision}")
        work.event("Normal", SURGE_ABANDONED, row.index, text)
        seen = [p["name"] for p in row.pods if p.get("ordinal") == row.own_ordinal]
        return row.but(operation=None, phase=Phase.FAILED, rebuild=True,
                       last_failure=lost_record(work, seen[0] if seen else None, text))
    return row.but(operation=None, phase=Phase.READY)


def abandon_grace(work: Work) -> int | None:
    grace = work.settings.abandoned_replacement_grace_period
    return None if grace is None else int(grace)


def _superseded_message(work: Work, row: Row) -> str:
    target = _target(row.op)
    newest = work.desired.revision
    if newest == row.revision:
        return (f"abandoned surge to withdrawn revision {target}; the Instance stays on "
                f"revision {row.revision} instead")
    return f"abandoned superseded surge to {target}; re-surging toward {newest}"


def _replacement_lost(work: Work, row: Row, source: list[Json], reason: str,
                      lost: list[Json], known: Json | None = None) -> Row:
    """The replacement is gone after it took over serving: nothing is rebuilt at it.

    When a newer change withdrew its revision meanwhile, ending the surge is what
    the change asked for (a Normal event). Otherwise a serving replacement was lost:
    a Warning, with the loss as the Instance's lastFailure, counted against the
    revision when the revision caused it."""
    target = _target(row.op)
    standing = [p for p in source if not P.is_terminating(p)]
    superseded = target != work.desired.revision
    kind, prefix = ("Normal", f"abandoned superseded surge to {target}") if superseded else (
        "Warning", f"surge to {target} lost its replacement")
    failure = None if superseded else (known or _loss(work, lost))
    if failure is not None:
        prefix += f" ({failure['reason']}: {failure['message']})"
        if revision_caused(failure):
            row = record_failure(work, row, target, failure, lost)
        else:
            row = row.but(last_failure=failure)
    if standing:
        work.route(standing, True)
        work.event(kind, reason, row.index, (
            f"{prefix}; the replacement was lost after it took over serving and nothing is "
            f"rebuilt at it; the source returns to rotation on revision {row.revision}"))
        return row.but(operation=None, phase=Phase.READY)
    work.event(kind, reason, row.index, (
        f"{prefix}; no source pod stands, so the Instance re-enters as a fresh start at "
        f"revision {work.desired.revision}"))
    return row.but(operation=None, phase=Phase.FAILED, rebuild=True)


def _loss(work: Work, lost: list[Json]) -> Json:
    """Why the replacement stopped serving: a pod of it that ended, else gone."""
    for pod in lost:
        if P.has_ended(pod):
            return ended_failure(work, pod)
    names = sorted(p["metadata"]["name"] for p in lost)
    return lost_record(work, names[0] if names else None,
                       "the replacement's pods are gone or terminating")


def surge_failed(work: Work, row: Row, failure: Json, new_live: list[Json],
                 attempt: list[Json]) -> Row:
    """The old pod keeps serving; a live new pod stays as an extra until the next start.
    ``attempt``: the pods this attempt made, which say where it ran."""
    target = _target(row.op)
    work.route(new_live, False)
    for pod in work.pods_of(row.index):
        if P.has_ended(pod):
            work.delete(pod)
    instance = work.instance(row)
    serves = instance.serving_pod_count() >= instance.needed
    work.event("Warning", "UpdateFailed", row.index,
               f"update to {target} failed: {failure['reason']}: {failure['message']}; "
               + ("the old pod keeps serving" if serves else
                  "no old pod serves, so the Instance is Failed"))
    return record_failure(work, row.but(operation=None,
                                        phase=Phase.READY if serves else Phase.FAILED),
                          target, failure, attempt)


# -- SurgeThenDrain, a gang --------------------------------------------------------


def lowest_free_index(work: Work) -> int:
    used = set(work.rows) | set(work.groups)
    index = 0
    while index in used:
        index += 1
    return index


def _surge_gang(work: Work, row: Row) -> tuple[Row, Outcome]:
    operation = row.op
    target = _target(operation)
    if operation.step == Step.SURGE_CREATE:
        return _gang_surge_create(work, row, target), Outcome.KEPT
    source = work.instance(row)
    found = work.rows.get(operation.replacement) if operation.replacement is not None \
        else None
    handed_over = operation.handed_over
    if found is None or (handed_over and stopped_serving(work, found)):
        lost = work.pods_of(found.index) if found is not None else []
        known = found.last_failure if found is not None else None  # its restart saw why
        if found is not None and found.phase != Phase.DELETING:
            work.put(open_delete(work, found, "replacement lost"))
        return (_replacement_lost(work, row, source.live, GANG_SURGE_ABANDONED, lost, known),
                Outcome.KEPT)
    replacement = found
    if not handed_over and target != work.desired.revision:
        return (_abandon_gang(work, row, replacement, "Normal",
                              _superseded_message(work, row)), Outcome.KEPT)
    if not handed_over and replacement.phase == Phase.FAILED:
        return _replacement_failed(work, row, replacement, target), Outcome.KEPT
    # A gang never stands at Abandon (a single pod's side step): a row edited there is
    # drained as at WaitDrained.
    handler = GANG_SURGE_STEPS.get(operation.step, _gang_wait_drained)
    return handler(work, row, replacement, source)


def _gang_surge_create(work: Work, row: Row, target: str) -> Row:
    """A whole replacement Instance, at the lowest free index, created in this pass."""
    # As a single pod's start evicts what an earlier attempt left, a gang's waits
    # until an abandoned replacement of an earlier attempt is gone.
    if any(r.surge_of == row.index for r in work.rows.values()):
        return row
    index = lowest_free_index(work)
    replacement = new_row(index, 1, target, Phase.CREATING,
                          work.operation(OperationType.CREATE, Step.CREATE_PODS))
    # The source's earlier attempts steer the replacement they build.
    work.put(replacement.but(surge_of=row.index, avoid_nodes=steering(row, target) or None,
                             avoid_for=target if steering(row, target) else None))
    work.put(step_create(work, work.rows[index]))
    return row.step_to(Step.SURGE_WAIT_READY, replacement=index)


def _replacement_failed(work: Work, row: Row, replacement: Row, target: str) -> Row:
    failure = replacement.last_failure or {}
    message = (f"abandoned surge to {target}: replacement Instance {replacement.index} "
               f"failed: {failure.get('reason', 'Failed')}; the old Instance keeps serving")
    row = _abandon_gang(work, row, replacement, "Warning", message)
    return record_failure(work, row, target, failure or {"reason": "Failed", "message": ""},
                          work.pods_of(replacement.index))


def _gang_wait_ready(work: Work, row: Row, replacement: Row,
                     source: InstancePods) -> tuple[Row, Outcome]:
    if (replacement.operation is not None
            and replacement.operation.step == Step.WAIT_AVAILABLE) or (
            replacement.phase == Phase.READY):
        return row.step_to(Step.SURGE_WAIT_AVAILABLE), Outcome.KEPT
    return row, Outcome.KEPT


def _gang_wait_available(work: Work, row: Row, replacement: Row,
                         source: InstancePods) -> tuple[Row, Outcome]:
    if replacement.phase == Phase.READY:
        return row.step_to(Step.HAND_OVER), Outcome.KEPT
    return row, Outcome.KEPT


def _gang_hand_over(work: Work, row: Row, replacement: Row,
                    source: InstancePods) -> tuple[Row, Outcome]:
    if _preview(work, row) and not row.op.served:
        # Blue-green: the replacement, Ready out of rotation, starts serving only with
        # every other member's new set; the old Instance serves until then.
        group = work.observed.group
        assert group is not None  # _preview says so
        if not group.switch:
            return row.with_op(waiting=f"the switch of rollout group {group.name}: "
                                       f"{group.why}"), Outcome.KEPT
        work.route(work.instance(replacement).live, True)
        row = row.with_op(served=True, waiting=None)
    elif stopped_serving(work, replacement):
        # Not handed over yet: the source keeps serving while the replacement recovers.
        return row.step_to(Step.SURGE_WAIT_AVAILABLE), Outcome.KEPT
    return hand_over(work, row, source.live), Outcome.KEPT


def _gang_drain_old(work: Work, row: Row, replacement: Row,
                    source: InstancePods) -> tuple[Row, Outcome]:
    return drain_old(work, row, work.pods_of(row.index)), Outcome.KEPT


def _gang_wait_drained(work: Work, row: Row, replacement: Row,
                       source: InstancePods) -> tuple[Row, Outcome]:
    drained = wait_drained(work, row, work.pods_of(row.index))
    if drained is not None:
        return drained, Outcome.KEPT
    # The replacement takes the source's place: the source leaves the record.
    work.put(replacement.but(surge_of=None))
    work.event("Normal", "InstanceUpdated", row.index,
               f"replaced by Instance {replacement.index} on {_target(row.op)}")
    return row, Outcome.GONE


# A gang's surge past its SurgeCreate, by step.
GANG_SURGE_STEPS: dict[Step, Callable[[Work, Row, Row, InstancePods],
                                       tuple[Row, Outcome]]] = {
    Step.SURGE_WAIT_READY: _gang_wait_ready,
    Step.SURGE_WAIT_AVAILABLE: _gang_wait_available,
    Step.HAND_OVER: _gang_hand_over,
    Step.DRAIN_OLD: _gang_drain_old,
    Step.WAIT_DRAINED: _gang_wait_drained,
}


def stopped_serving(work: Work, replacement: Row) -> bool:
    """Whether a gang's replacement no longer serves, or is about to stop as a whole.

    A gang serves only through its leader, so a replacement whose leader is lost has
    stopped serving, even while its workers run; so has one that restarts whole (its own
    restart policy, this pass or an earlier one), failed, or is going away. Under
    restartPolicy None the loss of a worker is not this: the others serve on while it
    is replaced."""
    if replacement.phase in (Phase.FAILED, Phase.DELETING):
        return True
    operation = replacement.operation
    if operation is not None and operation.type == OperationType.RESTART \
            and operation.mode == Mode.INSTANCE:
        return True
    if not work.instance(replacement).entries():
        return True
    if operation is not None or replacement.phase != Phase.READY:
        return False
    trigger = find_trigger(work, replacement)
    return trigger is not None and trigger.whole


def _abandon_gang(work: Work, row: Row, replacement: Row, kind: str, message: str) -> Row:
    """Delete the whole replacement Instance; the old one keeps serving."""
    work.event(kind, GANG_SURGE_ABANDONED, row.index, message)
    served = any(P.gate_set(p) for p in work.pods_of(replacement.index))
    replacement = open_delete(work, replacement, "surge abandoned")
    if not served:
        replacement = replacement.with_op(abandon_grace=abandon_grace(work))
    work.put(replacement)
    return row.but(operation=None, phase=Phase.READY)


# -- Drain: delete and recreate under the same names ------------------------------


def _drain(work: Work, row: Row) -> Row:
    return recreate(work, row, retarget=True)


# -- InPlace: new images in the same pod --------------------------------------------


def _target_images(work: Work, revision: str) -> dict[str, str]:
    """The images of the revision the operation moves to (which a newer change may
    have withdrawn meanwhile: the Instance finishes there, then moves again)."""
    template = work.templates(revision)[DEFAULT]
    return {c["name"]: c.get("image") for c in template["spec"].get("containers") or []}


def _in_place(work: Work, row: Row) -> Row:
    operation = row.op
    step = operation.step
    target = _target(operation)
    if step in (Step.UNROUTE, Step.PATCH_IMAGES) and not work.has_templates(target):
        # Nothing patched yet, and nothing tells the target's images any more (its
        # ControllerRevision is gone): recreate the Instance at the newest revision.
        work.event("Warning", REVISION_MISSING, row.index, (
            f"revision {target} has no ControllerRevision, so its images cannot be set in "
            f"place; recreating the Instance at {work.desired.revision}"))
        return _drain(work, row.step_to(Step.UNROUTE, mode=Mode.DRAIN))
    if step in (Step.WAIT_READY, Step.WAIT_AVAILABLE):
        row, failure = check_instance(work, row)
        if failure is not None:
            out_of_rotation(work, row)
            work.event("Warning", "UpdateFailed", row.index,
                       f"in-place update to {row.revision} failed: {failure['reason']}")
            return record_failure(work, row.but(phase=Phase.FAILED), row.revision, failure,
                                  work.instance(row).pods)
    return IN_PLACE_STEPS[step](work, row, target)


def _in_place_unroute(work: Work, row: Row, target: str) -> Row:
    live = work.instance(row).live
    # A pod that already runs the target's images restarts nothing (a new pod label
    # alone): it stays in rotation while it moves.
    restarts = any(_images_for(work, target, p) != _spec_images(p) for p in live)
    if restarts and work.settings.mark_not_ready_during_lifecycle:
        work.route(live, False)
    return row.step_to(Step.PATCH_IMAGES)


def _in_place_patch(work: Work, row: Row, target: str) -> Row:
    _patch_images(work, work.instance(row).live, target)
    return row.but(revision=target).step_to(Step.WAIT_READY)


def _in_place_wait_ready(work: Work, row: Row, target: str) -> Row:
    instance = work.instance(row)
    # A pass cut short after recording WaitReady (a failed write, a killed job) may
    # not have patched every pod: patch what still lacks the images, or this waits
    # for them until the deadline (forever without one). With the target's
    # ControllerRevision gone since, the patched pods' own images are the target's.
    if work.has_templates(target):
        _patch_images(work, instance.live, target)
    elif _never_patched(instance.live, target):
        # Recorded, then cut short before the patch, and the target's images are
        # unknown now (its ControllerRevision deleted): the update never reached the
        # pods. The Instance stays on the revision they run, and moves again.
        work.route(instance.live, True)
        return row.but(revision=P.revision_of(instance.live[0]), operation=None,
                       phase=Phase.READY)
    if instance.containers_ready() and all(
            _runs_images(p, _images_for(work, target, p)) for p in instance.live):
        work.route(instance.live, True)
        return row.step_to(Step.WAIT_AVAILABLE)
    return row


def _in_place_wait_available(work: Work, row: Row, target: str) -> Row:
    return finish_when_available(work, row, "updated in place") or row


# An in-place update's steps.
IN_PLACE_STEPS: dict[Step, Callable[[Work, Row, str], Row]] = {
    Step.UNROUTE: _in_place_unroute,
    Step.PATCH_IMAGES: _in_place_patch,
    Step.WAIT_READY: _in_place_wait_ready,
    Step.WAIT_AVAILABLE: _in_place_wait_available,
}


def _never_patched(pods: list[Json], target: str) -> bool:
    """No pod carries the target's ``ome.io/revision`` label, which the patch sets with
    the images: none was patched."""
    return bool(pods) and all(P.revision_of(p) not in (None, target) for p in pods)


def _images_for(work: Work, revision: str, pod: Json) -> dict[str, str]:
    """The images ``pod`` should run at ``revision``: the stored ones, or (the
    revision's templates gone) those its spec was patched to."""
    if work.has_templates(revision):
        return _target_images(work, revision)
    return _spec_images(pod)


def _spec_images(pod: Json) -> dict[str, str]:
    return {c["name"]: c.get("image") for c in pod["spec"]["containers"]}


def _patch_images(work: Work, pods: list[Json], revision: str) -> None:
    """The images of ``revision`` and its ``ome.io/revision`` label, in one patch per pod
    that lacks either: rows rebuilt from the pods (a lost InferenceReplica) read the
    revision from that label, so it must name what the pod runs."""
    images = _target_images(work, revision)
    for pod in pods:
        current = {c["name"]: c.get("image") for c in pod["spec"]["containers"]}
        changed = tuple(sorted((n, i) for n, i in images.items() if current.get(n) != i))
        relabel = () if P.revision_of(pod) == revision else ((LABEL_REVISION, revision),)
        if changed or relabel:
            meta = pod["metadata"]
            work.actions.append(PatchImages(meta["namespace"], meta["name"], changed, relabel))


def _runs_images(pod: Json, images: dict[str, str]) -> bool:
    statuses = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    for name, image in images.items():
        status = statuses.get(name) or {}
        if status.get("image") != image or not status.get("ready"):
            return False
    return True
