"""The step machine: which handler moves an Instance's operation, and how far a pass
takes it.

Each operation's steps, in order (rendered from model/steps.py's ``SEQUENCES``, which
also holds the moves besides the next step; the shared bring-up and teardown live in
lifecycle/bringup.py):

====================  ================================================================
(type, mode)          steps
====================  ================================================================
(Create, -)           CreatePods, WaitReady, WaitAvailable
(Delete, -)           Unroute, DeletePods, WaitGone
(Restart, Instance)   Unroute, DeletePods, WaitGone, CreatePods, WaitReady,
                      WaitAvailable
(Restart, Pod)        Unroute, WaitGone, CreatePods, WaitReady, WaitAvailable
(Update, Drain)       Unroute, DeletePods, WaitGone, CreatePods, WaitReady,
                      WaitAvailable
(Update, InPlace)     Unroute, PatchImages, WaitReady, WaitAvailable
(Update, Surge)       SurgeCreate, SurgeWaitReady, SurgeWaitAvailable, HandOver,
                      DrainOld, WaitDrained; side: Abandon
(Migrate, Surge)      SurgeCreate, SurgeWaitReady, SurgeWaitAvailable, HandOver,
                      DrainOld, WaitDrained
====================  ================================================================

A handler is chosen by (type, mode) here, and each takes the step the operation
stands at from its own table of one small function a step (``CREATE_STEPS``,
``DELETE_STEPS`` in lifecycle/operations.py, ``TEARDOWN_STEPS`` in lifecycle/bringup.py,
the surge's and the in-place update's in lifecycle/updates.py). An operation moves
only through ``Row.step_to``, which refuses a move the table does not allow.

A Failed Instance takes no step: it keeps its operation for inspection until a
retry, a reset or a new revision moves it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from omegitops.lifecycle.bringup import ended_pods, fail_operation, recycle_ended, step_restart
from omegitops.lifecycle.failures import check_instance
from omegitops.lifecycle.migration import step_migrate
from omegitops.lifecycle.operations import rest, step_create, step_delete
from omegitops.lifecycle.retries import may_start
from omegitops.lifecycle.updates import step_update, surge_failed
from omegitops.lifecycle.work import Work
from omegitops.model.state import Mode, OperationType, Outcome, Phase, Row, Step
from omegitops.render import pods as P
from omegitops.util.times import format_time, parse_time

# More steps than any operation has: a bound on one Instance's steps in one pass.
MAX_STEPS_PER_PASS = 12

# What a step gives back: the Instance's new row, and whether it stays in the record.
Stepped = tuple[Row, Outcome]


def _kept(handler: Callable[[Work, Row], Row]) -> Callable[[Work, Row], Stepped]:
    def step(work: Work, row: Row) -> Stepped:
        return handler(work, row), Outcome.KEPT
    return step


def _step_creating(work: Work, row: Row) -> Row:
    """A Create step, recycling ended pods until the deadline and failing past it."""
    recycled = recycle_ended(work, row)
    if recycled is not None:
        return recycled
    if row.op.step != Step.CREATE_PODS or ended_pods(work, row):
        row, failure = check_instance(work, row)
        if failure is not None:
            work.route(work.instance(row).live, False)  # a Failed Instance leaves whole
            work.event("Warning", "InstanceFailed", row.index,
                       f"failed while creating: {failure['reason']}: {failure['message']}")
            return row.but(phase=Phase.FAILED, last_failure=failure)
    return step_create(work, row)


# The handler of each (type, mode) of model/steps.py's table; an Update's choose by
# step (and a surge by whether the Instance is a gang) in lifecycle/updates.py.
HANDLERS: dict[tuple[OperationType, Mode | None], Callable[[Work, Row], Stepped]] = {
    (OperationType.CREATE, None): _kept(_step_creating),
    (OperationType.DELETE, None): step_delete,
    (OperationType.RESTART, Mode.INSTANCE): _kept(step_restart),
    (OperationType.RESTART, Mode.POD): _kept(step_restart),
    (OperationType.UPDATE, Mode.DRAIN): step_update,
    (OperationType.UPDATE, Mode.IN_PLACE): step_update,
    (OperationType.UPDATE, Mode.SURGE): step_update,
    (OperationType.MIGRATE, Mode.SURGE): step_migrate,
}


def advance(work: Work, row: Row) -> Stepped:
    """Take every step of ``row``'s operation whose precondition already holds.

    A step that only reads what the cluster shows (the new pod is available, the old
    ones are gone) leads straight to the next one in the same pass; the first step that
    writes to the cluster ends the Instance's turn, since what comes after it depends
    on the cluster acting on that write. A job that runs one pass per period so spends
    a period only where the cluster has something to do. An operation that ends stays
    ended until the next pass: the Instance at rest is looked at then."""
    for _ in range(MAX_STEPS_PER_PASS):
        before, writes = _progress(row), len(work.actions)
        row, outcome = step(work, row)
        if outcome == Outcome.GONE or row.operation is None or len(work.actions) != writes:
            return row, outcome
        if row.operation.type == OperationType.DELETE:
            # An Instance leaves the record only on a pass after one that recorded it
            # Deleting: a pass cut short after its record is written still knows what
            # is left to remove (its PodGroup, a pod that appears late).
            return row, outcome
        if _progress(row) == before:
            return row, outcome
    return row, Outcome.KEPT


def _progress(row: Row) -> tuple[object, ...]:
    """Where an Instance's operation stands, to tell a step taken from a wait."""
    operation = row.operation
    if operation is None:
        return (row.phase, row.revision)
    return (row.phase, row.revision, operation.type, operation.step, operation.started_at,
            operation.mode)


def step(work: Work, row: Row) -> Stepped:
    """One step of ``row``: its operation's next step, a Failed Instance's retry or
    fresh start, or the care of an Instance at rest."""
    operation = row.operation
    if operation is None:
        if row.phase == Phase.FAILED and row.rebuild:
            return _fresh_start(work, row.but(rebuild=False)), Outcome.KEPT
        rest(work, row)
        return row, Outcome.KEPT
    if row.phase == Phase.FAILED:
        if operation.type == OperationType.UPDATE:
            row = _retry_update(work, row)
        if row.phase == Phase.FAILED:
            # It took no step: let a new revision reach it. Counted among the Instances
            # that moved this pass, it was never a rollout candidate and stayed Failed
            # forever (a reset skips a failed Update by design).
            work.moved.discard(row.index)
        return row, Outcome.KEPT  # kept, with its operation, until reset or a new revision
    if operation.refused:
        row, failed = _refused_past_deadline(work, row)
        if failed:
            return row, Outcome.KEPT
    return HANDLERS[row.op.type, row.op.mode](work, row)


def _refused_past_deadline(work: Work, row: Row) -> tuple[Row, bool]:
    """A create the API server refused (a quota, a LimitRange, Pod Security, a webhook,
    a stranger's pod holding the name; the apply layer records it on the operation) is
    named in ``waiting`` while the operation still creates, and fails the operation at
    its deadline (instances.txt: "OME moves an Instance to Failed when an operation
    can't finish"). (The row, whether it failed the operation now.)"""
    operation = row.op
    refused = operation.refused or {}
    if operation.step not in (Step.CREATE_PODS, Step.SURGE_CREATE):
        return row.with_op(refused=None), False  # the pods were made since
    row = row.with_op(waiting=f"FailedCreate: {refused.get('message')}")
    deadline = operation.deadline
    if not deadline:
        return row, False
    if work.now < parse_time(deadline):
        work.wake(parse_time(deadline))
        return row, False
    failure = {"pod": refused.get("pod"), "container": None, "reason": "FailedCreate",
               "exitCode": None, "message": refused.get("message"),
               "time": format_time(work.now)}
    if operation.type == OperationType.UPDATE and operation.mode == Mode.SURGE \
            and not work.desired.gang:
        return surge_failed(work, row, failure, [], []), True
    return fail_operation(work, row, failure), True


def _retry_update(work: Work, row: Row) -> Row:
    """A failed Update tries again once its backoff has passed, unless its revision is
    held: the Instance is rebuilt on the revision, one incarnation higher."""
    operation = row.op
    target = operation.target_revision or row.revision
    if target != work.desired.revision or not may_start(work, row, target):
        return row
    retry = replace(work.operation(OperationType.UPDATE, Step.UNROUTE, operation.strategy,
                                   target=target, mode=Mode.DRAIN), retry=True)
    work.event("Normal", "InstanceUpdating", row.index,
               f"retrying the update to {target} ({operation.strategy}: {Mode.DRAIN})")
    return step_update(work, row.but(phase=Phase.UPDATING, operation=retry))[0]


def _fresh_start(work: Work, row: Row) -> Row:
    """Rebuild a Failed Instance from scratch at the newest revision (same incarnation).

    Its remaining pods go first; CreatePods waits for them to be gone, since the
    new pods take the same names.
    """
    # Every old pod goes, even one this pass fails to delete: CreatePods sees to it.
    fresh = replace(work.operation(OperationType.CREATE, Step.CREATE_PODS), fresh=True)
    row = row.but(phase=Phase.CREATING, revision=work.desired.revision, operation=fresh,
                  ordinal=None)
    pods = work.pods_of(row.index)
    for pod in pods:
        work.delete(pod, 0 if P.has_ended(pod) else None)
    return row if pods else step_create(work, row)
