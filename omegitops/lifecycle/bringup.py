"""The bring-up and teardown steps that Create, a Drain update and a Restart share.

- teardown (``recreate``): Unroute, DeletePods, WaitGone, then the bring-up under
  the same names, one incarnation higher;
- bring-up (``bring_up``): CreatePods, WaitReady, WaitAvailable.

A pod that ended while an Instance comes up is recycled until the operation's
deadline; a revision whose ControllerRevision is gone is built at the desired
revision instead (lifecycle/missing.py says why).
"""

from __future__ import annotations

from omegitops.lifecycle import pods as P
from omegitops.lifecycle.failures import check_instance, ended_failure, wait_gone
from omegitops.lifecycle.missing import REVISION_MISSING
from omegitops.lifecycle.retries import record_failure
from omegitops.lifecycle.state import Json, Mode, Operation, OperationType, Phase, Row, Step
from omegitops.lifecycle.work import Work
from omegitops.times import parse_time


def new_row(index: int, incarnation: int, revision: str, phase: Phase,
            operation: Operation | None) -> Row:
    return Row(index, incarnation, phase, revision, operation=operation)


def operation_of(row: Row) -> Operation:
    """The operation a step function works on: only rows holding one reach a step."""
    if row.operation is None:
        raise ValueError(f"Instance {row.index} holds no operation")
    return row.operation


# -- teardown ----------------------------------------------------------------------


def recreate(work: Work, row: Row, retarget: bool) -> None:
    """Unroute, DeletePods, WaitGone, then bring the Instance up again under the same
    names, one incarnation higher: at the newest revision for an update
    (``retarget``), at the revision it runs for a restart."""
    operation = operation_of(row)
    pods = work.pods_of(row.index)
    if operation.step == Step.UNROUTE:
        work.route(pods, False)
        operation.step = Step.DELETE_PODS
        return
    if operation.step == Step.DELETE_PODS:
        work.delete_unrouted(pods)
        operation.step = Step.WAIT_GONE
        return
    if operation.step == Step.WAIT_GONE:
        if pods:
            # A pass cut short after recording WaitGone may have deleted only some of the
            # pods (or none): delete the rest, as a Delete does, or this waits forever.
            work.delete_unrouted(pods)
            work.wake(min(P.deletion_deadline(p) or work.now for p in pods))
            failure = wait_gone(work, operation, pods)
            if failure is not None:
                fail_operation(work, row, failure)
            return
        if retarget:
            # Nothing of the Instance is left: build it at the newest revision.
            operation.target_revision = work.desired.revision
        row.revision = operation.target_revision or row.revision
        if retarget and not operation.retry:
            # An update that deletes and recreates the pods raises the incarnation once;
            # a retry rebuilds a Failed Instance, which keeps it (instances.txt). A
            # restart raised it when it opened.
            row.incarnation += 1
        row.ordinal = None
        operation.step = Step.CREATE_PODS
    bring_up(work, row)


def fail_operation(work: Work, row: Row, failure: Json) -> None:
    """The restart or update of ``row`` failed: out of rotation, Failed, still holding
    its operation, the failure recorded against the revision it was building."""
    operation = operation_of(row)
    what = "restart" if operation.type == OperationType.RESTART else "update"
    target = operation.target_revision or row.revision
    out_of_rotation(work, row)
    row.phase = Phase.FAILED
    work.event("Warning", f"{what.capitalize()}Failed", row.index,
               f"{what} at {target} failed: {failure['reason']}: {failure['message']}")
    record_failure(work, row, target, failure)


def out_of_rotation(work: Work, row: Row) -> None:
    """A Failed Instance leaves rotation whole: none of its pods keeps the gate."""
    work.route(work.instance(row).live, False)


# -- bring-up ----------------------------------------------------------------------


def bring_up(work: Work, row: Row) -> None:
    """CreatePods, WaitReady, WaitAvailable; a failure leaves the Instance Failed,
    still holding its operation."""
    operation = operation_of(row)
    instance = work.instance(row)
    what = "restart" if operation.type == OperationType.RESTART else "update"
    if recycle_ended(work, row):
        return
    if operation.step == Step.CREATE_PODS and not ended_pods(work, row):
        if clear_leftovers(work, row):
            failure = wait_gone(work, operation, work.pods_of(row.index))
            if failure is not None:
                fail_operation(work, row, failure)
            return
        if not ready_to_build(work, row):
            return
        # A restart of one pod keeps the Instance's ordinal (1 after a single-pod surge);
        # recreate() has already reset it to 0 for a whole-Instance rebuild.
        created = work.create_pods(row, row.revision, row.incarnation, row.own_ordinal,
                                   instance.pods)
        if not created:
            operation.step = Step.WAIT_READY
        return
    failure = check_instance(work, row)
    if failure is not None:
        fail_operation(work, row, failure)
        return
    if operation.step == Step.WAIT_READY:
        enter_rotation_when_ready(work, row)
        return
    if finish_when_available(work, row, "restarted" if what == "restart" else "updated"):
        row.attempts = None
        row.retry_at = None


def enter_rotation_when_ready(work: Work, row: Row) -> None:
    """WaitReady: once the containers of all the Instance's pods are ready, every pod
    gets the serving gate in the same pass, so a gang enters rotation together."""
    pods = work.instance(row)
    if pods.containers_ready():
        work.route(pods.live, True)
        operation_of(row).step = Step.WAIT_AVAILABLE


def finish_when_available(work: Work, row: Row, verb: str) -> bool:
    """Ready once every pod has been Ready for minReadySeconds; the window starts
    over when a pod stops being Ready. Returns whether the Instance is Ready."""
    pods = work.instance(row)
    # The Instance was admitted to rotation whole at WaitReady; a gate lost since (a
    # write that failed) is put back on every pod, ready or not, so a gang is never
    # left partly in rotation. A pod that is not ready serves nothing either way.
    work.route(pods.live, True)
    since = pods.ready_since()
    if since is None:
        return False
    available_at = since + work.lifecycle.min_ready_seconds
    if work.now < available_at:
        work.wake(available_at)
        return False
    row.phase = Phase.READY
    row.operation = None
    work.event("Normal", "InstanceReady", row.index,
               f"{verb} on revision {row.revision} (incarnation={row.incarnation})")
    return True


def recycle_ended(work: Work, row: Row) -> bool:
    """instances.txt: while OME creates or restarts an Instance, it deletes and
    recreates any pod that has ended (one the kubelet evicted, say) until the
    operation's deadline, with a TerminalPodRecycled warning each time. The step goes
    back to CreatePods, which waits for the pod to be gone. Past the deadline the
    ended pod is the operation's failure instead."""
    operation = operation_of(row)
    pods = work.instance(row).pods
    ended = ended_pods(work, row)
    deadline = operation.deadline
    if not ended or (deadline and work.now >= parse_time(deadline)):
        return False
    if operation.mode != Mode.POD:
        # A whole Instance leaves rotation with the recycled pod and re-enters it whole;
        # the repair of one pod under restartPolicy None leaves the others serving.
        work.route(pods, False)
    for pod in ended:
        failure = ended_failure(work, pod)
        row.last_failure = failure
        work.delete(pod, 0)
        work.event("Warning", "TerminalPodRecycled", row.index,
                   f"recycling ended pod {pod['metadata']['name']}: {failure['reason']}")
    operation.step = Step.CREATE_PODS
    return True


def ended_pods(work: Work, row: Row) -> list[Json]:
    """The Instance's own pods that ended and are not being deleted yet."""
    return [p for p in work.instance(row).pods if P.has_ended(p) and not P.is_terminating(p)]


def clear_leftovers(work: Work, row: Row) -> bool:
    """Ended or terminating pods of the Instance would collide with the names about
    to be created: delete the ended ones and wait for all of them to go. So would a
    live pod of another revision, which a pass cut short before it deleted what a
    fresh start replaces leaves: completing the Instance beside it would mix two
    revisions in one gang, so it goes too (out of rotation first). After a fresh start
    every old pod goes, whatever its revision: a pass cut short may have deleted only
    some of them, and a new gang is never completed beside an old one's pods."""
    listed = work.pods_of(row.index)
    leftovers = [p for p in listed if P.is_terminating(p) or P.has_ended(p)]
    for pod in leftovers:
        if P.has_ended(pod):
            work.delete(pod, 0)
    fresh = row.operation is not None and row.operation.fresh
    stale = [p for p in listed if not P.is_terminating(p)
             and not P.has_ended(p) and (fresh or P.revision_of(p) != row.revision)]
    if not fresh:
        own = {p["metadata"]["name"] for p in work.own_pods(row)}
        stale = [p for p in stale if p["metadata"]["name"] in own]
    work.delete_unrouted(stale)
    if leftovers:
        work.wake(min(P.deletion_deadline(p) or work.now for p in leftovers))
    return bool(leftovers or stale)


def ready_to_build(work: Work, row: Row) -> bool:
    """Whether the Instance's missing pods may be created now, at ``row.revision``.

    When that revision's templates are gone and pods are missing, the row moves to
    the desired revision first. A gang whose surviving pods run the lost revision is
    restarted whole (Unroute, DeletePods, WaitGone, CreatePods one incarnation
    higher) at the desired revision: False, the restart has taken this pass's step.
    """
    lost = row.revision
    if work.has_templates(lost):
        return True
    instance = work.instance(row)
    live = instance.live
    if len(live) >= instance.needed:
        return True  # nothing to build: the pods that run it keep running
    newest = work.desired.revision
    operation = operation_of(row)
    if live:
        work.event("Warning", REVISION_MISSING, row.index, (
            f"revision {lost} has no ControllerRevision, so its missing pods cannot be "
            f"built; restarting the whole Instance at {newest}"))
        row.phase = Phase.RESTARTING
        if operation.type != OperationType.RESTART:
            row.incarnation += 1  # a restart of one pod raised it already
        row.operation = work.operation(OperationType.RESTART, Step.UNROUTE, target=newest,
                                       mode=Mode.INSTANCE)
        step_restart(work, row)
        return False
    work.event("Warning", REVISION_MISSING, row.index, (
        f"revision {lost} has no ControllerRevision, so nothing can be rebuilt at it; "
        f"building at {newest} instead"))
    row.revision = newest
    if operation.target_revision:
        operation.target_revision = newest
    return True


# -- a restart ---------------------------------------------------------------------


def step_restart(work: Work, row: Row) -> None:
    """A whole-Instance restart is a teardown and a bring-up; under restartPolicy None
    only the failed or missing pod goes (deleting what ended), then what is missing is
    created."""
    operation = operation_of(row)
    if operation.mode == Mode.INSTANCE:
        recreate(work, row, retarget=False)
        return
    if operation.step in (Step.UNROUTE, Step.DELETE_PODS, Step.WAIT_GONE):
        ended = [p for p in work.own_pods(row) if P.has_ended(p) or P.is_terminating(p)]
        for pod in ended:
            if not P.is_terminating(pod):
                work.delete(pod, 0)
        if ended:
            operation.step = Step.WAIT_GONE
            work.wake(min(P.deletion_deadline(p) or work.now for p in ended))
            failure = wait_gone(work, operation, ended)
            if failure is not None:
                fail_operation(work, row, failure)
            return
        operation.step = Step.CREATE_PODS
    bring_up(work, row)
