"""Create and Delete operations, and Instances at rest.

Each step function moves one Instance by at most one step per pass:

- Create: CreatePods, WaitReady, WaitAvailable (lifecycle/bringup.py)
- Delete: Unroute, DeletePods, WaitGone
"""

from __future__ import annotations

from omegitops.lifecycle import pods as P
from omegitops.lifecycle.bringup import (
    clear_leftovers,
    enter_rotation_when_ready,
    finish_when_available,
    new_row,
    operation_of,
    ready_to_build,
)
from omegitops.lifecycle.state import OperationType, Outcome, Phase, Row, Step
from omegitops.lifecycle.work import Work
from omegitops.times import parse_time


def open_create(work: Work, index: int) -> Row:
    """A new Instance at ``index`` on the desired revision, created in this pass."""
    row = new_row(index, 1, work.desired.revision, Phase.CREATING,
                  work.operation(OperationType.CREATE, Step.CREATE_PODS))
    work.rows[index] = row
    work.event("Normal", "InstanceCreating", index,
               f"creating at revision {row.revision} (incarnation=1)")
    step_create(work, row)
    return row


def open_delete(work: Work, row: Row, why: str) -> None:
    row.phase = Phase.DELETING
    row.operation = work.operation(OperationType.DELETE, Step.UNROUTE)
    work.event("Normal", "InstanceDeleting", row.index, f"deleting: {why}")
    step_delete(work, row)


def step_create(work: Work, row: Row) -> None:
    operation = operation_of(row)
    pods = work.instance(row)
    if operation.step == Step.CREATE_PODS:
        if clear_leftovers(work, row) or not ready_to_build(work, row):
            return
        created = work.create_pods(row, row.revision, row.incarnation, row.own_ordinal,
                                   pods.pods)
        operation.fresh = False  # the old pods are gone: these are the new ones
        if not created:
            operation.step = Step.WAIT_READY
        return
    if operation.step == Step.WAIT_READY:
        enter_rotation_when_ready(work, row)
        return
    if operation.step == Step.WAIT_AVAILABLE:
        finish_when_available(work, row, "ready")


def step_delete(work: Work, row: Row) -> Outcome:
    """Unroute, delete once unrouted, and drop the row when every pod is gone."""
    operation = operation_of(row)
    pods = work.pods_of(row.index)
    if operation.step == Step.UNROUTE:
        work.route(pods, False)
        operation.step = Step.DELETE_PODS
        return Outcome.KEPT
    grace = operation.abandon_grace  # a replacement that never served goes fast
    if operation.step == Step.DELETE_PODS:
        work.delete_unrouted(pods, grace)
        operation.step = Step.WAIT_GONE
        return Outcome.KEPT
    if pods:
        work.delete_unrouted(pods, grace)  # a pod that appeared meanwhile goes too
        work.wake(min((P.deletion_deadline(p) or work.now) for p in pods))
        _overdue(work, row)
        return Outcome.KEPT
    # Its PodGroup goes with the row (planner: left_podgroups), whatever removed it.
    work.event("Normal", "InstanceDeleted", row.index, "deleted")
    return Outcome.GONE


def _overdue(work: Work, row: Row) -> None:
    """A drain past its deadline does not fail: one DrainOverdue warning, and the
    condition of the same name, until the pods are gone."""
    operation = operation_of(row)
    deadline = operation.deadline
    if not deadline or operation.overdue:
        return
    if work.now >= parse_time(deadline):
        operation.overdue = True
        work.event("Warning", "DrainOverdue", row.index,
                   f"drain overdue: pods still terminating past the deadline {deadline}")
    else:
        work.wake(parse_time(deadline))


def adopt_orphans(work: Work) -> None:
    """Pods whose Instance has no row (a lost status) get their row back.

    The row is rebuilt from the labels of the Instance's own pods (not a surge
    replacement beside them): its revision and incarnation are what those pods
    run, so nothing is created twice and an updated Instance is not updated again.
    """
    for index, members in work.groups.items():
        if index in work.rows:
            continue
        live = [p for p in members if not P.is_terminating(p)]
        own = source = live or members
        ordinal = None
        if not work.desired.gang:
            ordinal = min(P.ordinal_of(p) for p in source)
            own = [p for p in source if P.ordinal_of(p) == ordinal]
        row = new_row(index, max(P.incarnation_of(p) for p in own),
                      P.revision_of(own[0]), Phase.CREATING if live else Phase.DELETING,
                      work.operation(OperationType.CREATE, Step.CREATE_PODS) if live
                      else work.operation(OperationType.DELETE, Step.WAIT_GONE))
        row.ordinal = ordinal
        work.rows[index] = row


def rest(work: Work, row: Row) -> None:
    """An Instance with no operation: a Ready one whose pods are all ready stays
    in rotation as a whole (a pod the kubelet restarted gets its gate back)."""
    pods = work.instance(row)
    if row.phase == Phase.READY and pods.containers_ready():
        work.route(pods.live, True)
    if row.phase == Phase.READY and row.revision == work.desired.revision \
            and not work.desired.gang:
        # A replacement a failed attempt left running holds a surge slot until a start
        # on its Instance replaces it (update-strategies.txt); on the target revision
        # no start will come, and the slot would stall every other Instance's update.
        extras = [p for p in work.pods_of(row.index)
                  if P.ordinal_of(p) != row.own_ordinal and not P.is_terminating(p)]
        work.delete_unrouted(extras)
