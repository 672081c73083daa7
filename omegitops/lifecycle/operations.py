"""Create and Delete operations, and Instances at rest.

Each step function moves one Instance by at most one step per pass:

- Create: CreatePods, WaitReady, WaitAvailable (lifecycle/bringup.py)
- Delete: Unroute, DeletePods, WaitGone
"""

from __future__ import annotations

from collections.abc import Callable

from omegitops.lifecycle.bringup import (
    clear_leftovers,
    enter_rotation_when_ready,
    finish_when_available,
    in_preview,
    new_row,
    ready_to_build,
)
from omegitops.lifecycle.work import Work
from omegitops.model.state import OperationType, Outcome, Phase, Row, Step
from omegitops.render import pods as P
from omegitops.util.times import parse_time


def open_create(work: Work, index: int) -> Row:
    """A new Instance at ``index`` on the desired revision, created in this pass."""
    row = new_row(index, 1, work.desired.revision, Phase.CREATING,
                  work.operation(OperationType.CREATE, Step.CREATE_PODS))
    work.event("Normal", "InstanceCreating", index,
               f"creating at revision {row.revision} (incarnation=1)")
    return step_create(work, row)


def open_delete(work: Work, row: Row, why: str) -> Row:
    row = row.but(phase=Phase.DELETING,
                  operation=work.operation(OperationType.DELETE, Step.UNROUTE))
    work.event("Normal", "InstanceDeleting", row.index, f"deleting: {why}")
    return step_delete(work, row)[0]


def _create_pods(work: Work, row: Row) -> Row:
    if clear_leftovers(work, row):
        return row
    ready, row = ready_to_build(work, row)
    if not ready:
        return row
    created = work.create_pods(row, row.revision, row.incarnation, row.own_ordinal,
                               work.instance(row).pods)
    # The old pods are gone: these are the new ones.
    return row.with_op(fresh=False) if created else row.step_to(Step.WAIT_READY, fresh=False)


def _create_wait_available(work: Work, row: Row) -> Row:
    return finish_when_available(work, row, "ready") or row


# A Create's steps (model/steps.py has which follows which).
CREATE_STEPS: dict[Step, Callable[[Work, Row], Row]] = {
    Step.CREATE_PODS: _create_pods,
    Step.WAIT_READY: enter_rotation_when_ready,
    Step.WAIT_AVAILABLE: _create_wait_available,
}


def step_create(work: Work, row: Row) -> Row:
    return CREATE_STEPS[row.op.step](work, row)


def _delete_unroute(work: Work, row: Row) -> Row:
    work.route(work.pods_of(row.index), False)
    return row.step_to(Step.DELETE_PODS)


def _delete_pods(work: Work, row: Row) -> Row:
    # A replacement that never served goes fast.
    work.delete_unrouted(work.pods_of(row.index), row.op.abandon_grace)
    return row.step_to(Step.WAIT_GONE)


def _delete_wait_gone(work: Work, row: Row) -> Row | None:
    """None once every pod is gone: the row leaves the record."""
    pods = work.pods_of(row.index)
    if pods:
        work.delete_unrouted(pods, row.op.abandon_grace)  # a pod that appeared meanwhile
        work.wake(min((P.deletion_deadline(p) or work.now) for p in pods))
        return _overdue(work, row)
    # Its PodGroup goes with the row (planner: left_podgroups), whatever removed it.
    work.event("Normal", "InstanceDeleted", row.index, "deleted")
    return None


# A Delete's steps.
DELETE_STEPS: dict[Step, Callable[[Work, Row], Row | None]] = {
    Step.UNROUTE: _delete_unroute,
    Step.DELETE_PODS: _delete_pods,
    Step.WAIT_GONE: _delete_wait_gone,
}


def step_delete(work: Work, row: Row) -> tuple[Row, Outcome]:
    """Unroute, delete once unrouted, and drop the row when every pod is gone."""
    stepped = DELETE_STEPS[row.op.step](work, row)
    return (row, Outcome.GONE) if stepped is None else (stepped, Outcome.KEPT)


def _overdue(work: Work, row: Row) -> Row:
    """A drain past its deadline does not fail: one DrainOverdue warning, and the
    condition of the same name, until the pods are gone."""
    deadline = row.op.deadline
    if not deadline or row.op.overdue:
        return row
    if work.now < parse_time(deadline):
        work.wake(parse_time(deadline))
        return row
    work.event("Warning", "DrainOverdue", row.index,
               f"drain overdue: pods still terminating past the deadline {deadline}")
    return row.with_op(overdue=True)


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
        work.rows[index] = row.but(ordinal=ordinal)


def rest(work: Work, row: Row) -> None:
    """An Instance with no operation: a Ready one whose pods are all ready stays
    in rotation as a whole (a pod the kubelet restarted gets its gate back)."""
    pods = work.instance(row)
    if row.phase == Phase.READY and pods.containers_ready() and not in_preview(work, row):
        work.route(pods.live, True)
    if row.phase == Phase.READY and row.revision == work.desired.revision \
            and not work.desired.gang:
        # A replacement a failed attempt left running holds a surge slot until a start
        # on its Instance replaces it (update-strategies.txt); on the target revision
        # no start will come, and the slot would stall every other Instance's update.
        extras = [p for p in work.pods_of(row.index)
                  if P.ordinal_of(p) != row.own_ordinal and not P.is_terminating(p)]
        work.delete_unrouted(extras)
