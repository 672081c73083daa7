"""The bring-up and teardown steps that Create, a Drain update and a Restart share.

- teardown (``recreate``): Unroute, DeletePods, WaitGone, then the bring-up under
  the same names, one incarnation higher;
- bring-up (``bring_up``): CreatePods, WaitReady, WaitAvailable.

A pod that ended while an Instance comes up is recycled until the operation's
deadline; a revision whose ControllerRevision is gone is built at the desired
revision instead (lifecycle/missing.py says why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from omegitops.lifecycle.failures import check_instance, ended_failure, wait_gone
from omegitops.lifecycle.missing import REVISION_MISSING
from omegitops.lifecycle.retries import record_failure
from omegitops.lifecycle.work import Work
from omegitops.model.state import Json, Mode, Operation, OperationType, Phase, Row, Step
from omegitops.render import pods as P
from omegitops.util.times import parse_time


def new_row(index: int, incarnation: int, revision: str, phase: Phase,
            operation: Operation | None) -> Row:
    return Row(index, incarnation, phase, revision, operation=operation)


# -- teardown ----------------------------------------------------------------------


def recreate(work: Work, row: Row, retarget: bool) -> Row:
    """Unroute, DeletePods, WaitGone, then bring the Instance up again under the same
    names, one incarnation higher: at the newest revision for an update
    (``retarget``), at the revision it runs for a restart."""
    teardown = TEARDOWN_STEPS.get(row.op.step)
    return bring_up(work, row) if teardown is None else teardown(work, row, retarget)


def _unroute(work: Work, row: Row, retarget: bool) -> Row:
    work.route(work.pods_of(row.index), False)
    return row.step_to(Step.DELETE_PODS)


def _delete_pods(work: Work, row: Row, retarget: bool) -> Row:
    work.delete_unrouted(work.pods_of(row.index))
    return row.step_to(Step.WAIT_GONE)


def _wait_gone(work: Work, row: Row, retarget: bool) -> Row:
    operation = row.op
    pods = work.pods_of(row.index)
    if pods:
        # A pass cut short after recording WaitGone may have deleted only some of the
        # pods (or none): delete the rest, as a Delete does, or this waits forever.
        work.delete_unrouted(pods)
        work.wake(min(P.deletion_deadline(p) or work.now for p in pods))
        row, failure = wait_gone(work, row, pods)
        return row if failure is None else fail_operation(work, row, failure)
    # Nothing of the Instance is left: an update builds it at the newest revision.
    target = work.desired.revision if retarget else operation.target_revision
    # An update that deletes and recreates the pods raises the incarnation once; the
    # rebuild of a Failed Instance (a retry, or a new revision that reached it) keeps
    # it (instances.txt). A restart raised it when it opened.
    raised = retarget and not operation.retry
    row = row.but(revision=target or row.revision, ordinal=None,
                  incarnation=row.incarnation + raised).step_to(
                      Step.CREATE_PODS, target_revision=target)
    return bring_up(work, row)


# The teardown's steps (a Drain update's and a whole Instance's restart); the bring-up
# takes the others.
TEARDOWN_STEPS: dict[Step, Callable[[Work, Row, bool], Row]] = {
    Step.UNROUTE: _unroute,
    Step.DELETE_PODS: _delete_pods,
    Step.WAIT_GONE: _wait_gone,
}


def fail_operation(work: Work, row: Row, failure: Json) -> Row:
    """The restart or update of ``row`` failed: out of rotation, Failed, still holding
    its operation, the failure recorded against the revision it was building."""
    operation = row.op
    what = "restart" if operation.type == OperationType.RESTART else "update"
    target = operation.target_revision or row.revision
    out_of_rotation(work, row)
    work.event("Warning", f"{what.capitalize()}Failed", row.index,
               f"{what} at {target} failed: {failure['reason']}: {failure['message']}")
    return record_failure(work, row.but(phase=Phase.FAILED), target, failure,
                          work.own_pods(row))


def out_of_rotation(work: Work, row: Row) -> None:
    """A Failed Instance leaves rotation whole: none of its pods keeps the gate."""
    work.route(work.instance(row).live, False)


# -- bring-up ----------------------------------------------------------------------


def bring_up(work: Work, row: Row) -> Row:
    """CreatePods, WaitReady, WaitAvailable; a failure leaves the Instance Failed,
    still holding its operation."""
    recycled = recycle_ended(work, row)
    if recycled is not None:
        return recycled
    if row.op.step == Step.CREATE_PODS and not ended_pods(work, row):
        return _build(work, row)
    row, failure = check_instance(work, row)
    if failure is not None:
        return fail_operation(work, row, failure)
    if row.op.step == Step.WAIT_READY:
        return enter_rotation_when_ready(work, row)
    return _built_when_available(work, row)


def _build(work: Work, row: Row) -> Row:
    """CreatePods: once what is left of the Instance is gone, its missing pods."""
    pods = work.instance(row).pods
    if clear_leftovers(work, row):
        row, failure = wait_gone(work, row, work.pods_of(row.index))
        return row if failure is None else fail_operation(work, row, failure)
    ready, row = ready_to_build(work, row)
    if not ready:
        return row
    # A restart of one pod keeps the Instance's ordinal (1 after a single-pod surge);
    # recreate() has already reset it to 0 for a whole-Instance rebuild.
    created = work.create_pods(row, row.revision, row.incarnation, row.own_ordinal, pods)
    return row if created else row.step_to(Step.WAIT_READY)


def _built_when_available(work: Work, row: Row) -> Row:
    """WaitAvailable: Ready, the retries forgotten, once available."""
    verb = "restarted" if row.op.type == OperationType.RESTART else "updated"
    done = finish_when_available(work, row, verb)
    return row if done is None else done.but(attempts=None, retry_at=None)


def previews(work: Work, operation: Operation | None) -> bool:
    """Whether ``operation`` is a blue-green group's surge before its switch: the new
    pods it brings up stay out of rotation until every member's new set is Available,
    then serving switches to them all in one pass (lifecycle/groups.py)."""
    group = work.observed.group
    return (group is not None and group.blue_green and operation is not None
            and operation.type == OperationType.UPDATE and operation.mode == Mode.SURGE
            and operation.target_revision == work.desired.revision
            and not operation.served)


def in_preview(work: Work, row: Row) -> bool:
    """A gang's replacement Instance that a blue-green surge brings up: out of rotation
    until the switch, Ready once its containers have been ready for minReadySeconds
    (its pods' Ready condition waits for the serving gate, which the switch sets)."""
    if row.surge_of is None:
        return False
    source = work.rows.get(row.surge_of)
    return source is not None and previews(work, source.operation)


def enter_rotation_when_ready(work: Work, row: Row) -> Row:
    """WaitReady: once the containers of all the Instance's pods are ready, every pod
    gets the serving gate in the same pass, so a gang enters rotation together."""
    pods = work.instance(row)
    if not pods.containers_ready():
        return row
    if not in_preview(work, row):
        work.route(pods.live, True)
    return row.step_to(Step.WAIT_AVAILABLE)


def finish_when_available(work: Work, row: Row, verb: str) -> Row | None:
    """Ready once every pod has been Ready for minReadySeconds; the window starts
    over when a pod stops being Ready. The Ready row, or None while it waits."""
    pods = work.instance(row)
    if in_preview(work, row):
        since = pods.containers_ready_since() if pods.containers_ready() else None
    else:
        # The Instance was admitted to rotation whole at WaitReady; a gate lost since (a
        # write that failed) is put back on every pod, ready or not, so a gang is never
        # left partly in rotation. A pod that is not ready serves nothing either way.
        work.route(pods.live, True)
        since = pods.ready_since()
    if since is None:
        return None
    available_at = since + work.lifecycle.min_ready_seconds
    if work.now < available_at:
        work.wake(available_at)
        return None
    work.event("Normal", "InstanceReady", row.index,
               f"{verb} on revision {row.revision} (incarnation={row.incarnation})")
    return reached(row.but(phase=Phase.READY, operation=None))


def reached(row: Row) -> Row:
    """The Ready row, its steering ended when it was for the revision it now runs."""
    if row.avoid_for in (None, row.revision):
        return row.but(avoid_nodes=None, avoid_for=None)
    return row


def recycle_ended(work: Work, row: Row) -> Row | None:
    """instances.txt: while OME creates or restarts an Instance, it deletes and
    recreates any pod that has ended (one the kubelet evicted, say) until the
    operation's deadline, with a TerminalPodRecycled warning each time. The step goes
    back to CreatePods, which waits for the pod to be gone. Past the deadline the
    ended pod is the operation's failure instead. The row so recycled, or None when
    nothing is."""
    operation = row.op
    pods = work.instance(row).pods
    ended = ended_pods(work, row)
    deadline = operation.deadline
    if not ended or (deadline and work.now >= parse_time(deadline)):
        return None
    if operation.mode != Mode.POD:
        # A whole Instance leaves rotation with the recycled pod and re-enters it whole;
        # the repair of one pod under restartPolicy None leaves the others serving.
        work.route(pods, False)
    for pod in ended:
        failure = ended_failure(work, pod)
        row = row.but(last_failure=failure)
        work.delete(pod, 0)
        work.event("Warning", "TerminalPodRecycled", row.index,
                   f"recycling ended pod {pod['metadata']['name']}: {failure['reason']}")
    return row.step_to(Step.CREATE_PODS)


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


def ready_to_build(work: Work, row: Row) -> tuple[bool, Row]:
    """Whether the Instance's missing pods may be created now, at ``row.revision``, and
    the row to build them from.

    When that revision's templates are gone and pods are missing, the row moves to
    the desired revision first. A gang whose surviving pods run the lost revision is
    restarted whole (Unroute, DeletePods, WaitGone, CreatePods one incarnation
    higher) at the desired revision: False, the restart has taken this pass's step.
    """
    lost = row.revision
    if work.has_templates(lost):
        return True, row
    instance = work.instance(row)
    live = instance.live
    if len(live) >= instance.needed:
        return True, row  # nothing to build: the pods that run it keep running
    newest = work.desired.revision
    operation = row.op
    if live:
        work.event("Warning", REVISION_MISSING, row.index, (
            f"revision {lost} has no ControllerRevision, so its missing pods cannot be "
            f"built; restarting the whole Instance at {newest}"))
        # A restart of one pod raised the incarnation already.
        raised = operation.type != OperationType.RESTART
        row = row.but(phase=Phase.RESTARTING, incarnation=row.incarnation + raised,
                      operation=work.operation(OperationType.RESTART, Step.UNROUTE,
                                               target=newest, mode=Mode.INSTANCE))
        return False, step_restart(work, row)
    work.event("Warning", REVISION_MISSING, row.index, (
        f"revision {lost} has no ControllerRevision, so nothing can be rebuilt at it; "
        f"building at {newest} instead"))
    if operation.target_revision:
        operation = replace(operation, target_revision=newest)
    return True, row.but(revision=newest, operation=operation)


# -- a restart ---------------------------------------------------------------------


def step_restart(work: Work, row: Row) -> Row:
    """A whole-Instance restart is a teardown and a bring-up; under restartPolicy None
    only the failed or missing pod goes (deleting what ended), then what is missing is
    created."""
    if row.op.mode == Mode.INSTANCE:
        return recreate(work, row, retarget=False)
    if row.op.step in (Step.UNROUTE, Step.WAIT_GONE):
        return _pod_gone(work, row)
    return bring_up(work, row)


def _pod_gone(work: Work, row: Row) -> Row:
    """Unroute, WaitGone of one pod's restart: the ended pod goes, then CreatePods."""
    ended = [p for p in work.own_pods(row) if P.has_ended(p) or P.is_terminating(p)]
    for pod in ended:
        if not P.is_terminating(pod):
            work.delete(pod, 0)
    if ended:
        row = row.step_to(Step.WAIT_GONE)
        work.wake(min(P.deletion_deadline(p) or work.now for p in ended))
        row, failure = wait_gone(work, row, ended)
        return row if failure is None else fail_operation(work, row, failure)
    return bring_up(work, row.step_to(Step.CREATE_PODS))
