"""Telling when an operation's pods can't finish, and recording why.

An operation fails when one of its pods ended (phase Failed), stayed wedged
in a waiting state (CrashLoopBackOff, ImagePullBackOff...) past
stuckPodGracePeriod, could not be scheduled past unschedulableGracePeriod,
or when the operation's deadline passed. Without a setting, its check is off.
"""

from __future__ import annotations

from dataclasses import replace

from omegitops.lifecycle.work import Work
from omegitops.model.state import Json, Operation, Row
from omegitops.render import pods as P
from omegitops.render.instance import InstancePods
from omegitops.render.templates import MAIN_CONTAINER
from omegitops.util.times import format_time, parse_time

STUCK_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError")
# Failures the revision itself causes: retried with backoff, then held.
REVISION_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def _waiting(pod: Json) -> tuple[str, Json] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((status.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in STUCK_REASONS:
            return reason, status
    return None


def _last_terminated(status: Json) -> Json:
    return (status.get("lastState") or {}).get("terminated") or (
        (status.get("state") or {}).get("terminated") or {})


def failure_record(work: Work, pod: Json, reason: str, message: str,
                   container: str | None = None, exit_code: int | None = None) -> Json:
    return {"pod": pod["metadata"]["name"], "container": container, "reason": reason,
            "exitCode": exit_code, "message": message, "time": format_time(work.now)}


def lost_record(work: Work, pod: str | None, message: str) -> Json:
    """The failure of a pod that is gone: its name, and when a pass found it missing."""
    return {"pod": pod, "container": None, "reason": "PodLost", "exitCode": None,
            "message": message, "time": format_time(work.now)}


STUCK_TERMINATING = "PodStuckTerminating"


def stuck_terminating(work: Work, pods: list[Json]) -> list[Json]:
    """Pods the API still lists past their deletion grace: their node stopped reporting
    (the kubelet never confirms the deletion) or a finalizer holds them."""
    return [p for p in pods if P.is_terminating(p)
            and (P.deletion_deadline(p) or work.now) <= work.now]


def terminating_text(pod: Json) -> str:
    node = P.node_of(pod)
    where = f" on node {node}" if node else ""
    since = pod["metadata"].get("deletionTimestamp")
    finalizers = pod["metadata"].get("finalizers") or []
    if finalizers:
        return (f"pod {pod['metadata']['name']}{where} is still terminating past its "
                f"deletion grace ({since}): finalizer {', '.join(finalizers)} holds it "
                "until its controller removes it")
    return (f"pod {pod['metadata']['name']}{where} is still terminating past its deletion "
            f"grace ({since}): it goes when its node reports again or its Node object is "
            "removed")


def going_text(work: Work, pods: list[Json]) -> str | None:
    """What an operation that waits for ``pods`` to go waits for, naming the first and
    how many more: a pod past its deletion grace (``terminating_text``: a finalizer, or
    a node that stopped reporting), else one within it and when that grace ends. None
    when none is listed."""
    if not pods:
        return None
    stuck = stuck_terminating(work, pods)
    first = stuck[0] if stuck else min(
        pods, key=lambda p: P.deletion_deadline(p) or work.now)
    if stuck:
        text = terminating_text(first)
    elif P.is_terminating(first):
        ends = format_time(P.deletion_deadline(first) or work.now)
        text = f"pod {first['metadata']['name']} to go: its deletion grace ends at {ends}"
    else:
        text = f"pod {first['metadata']['name']} to be deleted"
    more = len(pods) - 1
    return text + (f" (and {more} more pod{'' if more == 1 else 's'})" if more else "")


def wait_gone(work: Work, row: Row, pods: list[Json]) -> tuple[Row, Json | None]:
    """An operation waiting for ``pods`` to go before it can build their names again:
    (the row, naming what it waits for, and the failure, or None while it may wait).

    Every wait has a name and a deadline (instances.txt: "OME moves an Instance to
    Failed when an operation can't finish"; "The operation's waiting field names most
    holds"): a pod past its deletion grace is named in ``waiting``, and at the
    operation's deadline the operation fails with it. A pod within its grace only
    wakes the pass when the grace ends.
    """
    stuck = stuck_terminating(work, pods)
    within = [p for p in pods if p not in stuck and P.is_terminating(p)]
    if within:
        work.wake(min(P.deletion_deadline(p) or work.now for p in within))
    if not stuck:
        return row, None
    text = terminating_text(stuck[0])
    row = row.with_op(waiting=text)
    deadline = row.op.deadline
    if deadline and work.now >= parse_time(deadline):
        return row, failure_record(work, stuck[0], STUCK_TERMINATING,
                                   f"the operation ran past its deadline: {text}")
    if deadline:
        work.wake(parse_time(deadline))
    return row, None


def ended_failure(work: Work, pod: Json) -> Json:
    """Why a pod ended: its own reason (Evicted) or its main container's."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        terminated = _last_terminated(container)
        if terminated and container.get("name") == MAIN_CONTAINER:
            return failure_record(work, pod, status.get("reason") or terminated.get("reason")
                                  or "Error", status.get("message") or "pod ended",
                                  container["name"], terminated.get("exitCode"))
    return failure_record(work, pod, status.get("reason") or "Failed",
                          status.get("message") or "pod ended")


def check_instance(work: Work, row: Row) -> tuple[Row, Json | None]:
    """(the row, its operation's record of what it waits for, and the failure of the
    operation bringing its own pods up, or None).

    instances.txt: OME never fails an Instance whose pods all serve, at the desired
    count; such an Instance only waits for its window.
    """
    instance = work.instance(row)
    need = instance.needed
    if instance.serving_pod_count() >= need and len(instance.live) >= need:
        return row, None
    operation, failure = check_pods(work, row.op, instance.pods)
    return row.but(operation=operation), failure


def check_pods(work: Work, operation: Operation,
               pods: list[Json]) -> tuple[Operation, Json | None]:
    """(the operation, with what it waits for, and the failure of an operation bringing
    ``pods`` up, or None while it may go on)."""
    operation = replace(operation, stuck=operation.stuck or {}, waiting=None)
    held = _external_hold(work, operation, pods)
    if held is not None:
        return held, None
    operation = _hold_ended(work, operation, pods) if operation.held_at else operation
    stuck = dict(operation.stuck or {})
    waiting, failure = _pods_failure(work, pods, stuck)
    operation = replace(operation, stuck=stuck, waiting=waiting)
    return operation, failure or _deadline_failure(work, operation, pods)


def _pods_failure(work: Work, pods: list[Json],
                  stuck: dict[str, str]) -> tuple[str | None, Json | None]:
    """(what the pods wait for, the first failure among them), keeping ``stuck`` (since
    when each pod has waited in a stuck state) up to date."""
    stuck_grace = work.settings.stuck_pod_grace_period
    unschedulable_grace = work.settings.unschedulable_grace_period
    unschedulable: list[Json] = []
    waiting: str | None = None
    for pod in pods:
        name = pod["metadata"]["name"]
        if P.has_ended(pod):
            return waiting, ended_failure(work, pod)
        scheduled, since = P.condition(pod, "PodScheduled")
        if not scheduled and since is not None and _unschedulable(pod):
            if unschedulable_grace is not None:
                if work.now >= since + unschedulable_grace:
                    return waiting, failure_record(work, pod, "Unschedulable",
                                                   _condition_message(pod, "PodScheduled"))
                work.wake(since + unschedulable_grace)
            unschedulable.append(pod)
            waiting = _unschedulable_waiting(unschedulable)
            continue
        wedged = _waiting(pod)
        if wedged is None:
            stuck.pop(name, None)
            continue
        reason, status = wedged
        first = parse_time(stuck.setdefault(name, format_time(work.now)))
        if stuck_grace is not None:
            if work.now >= first + stuck_grace:
                terminated = _last_terminated(status)
                return waiting, failure_record(
                    work, pod, reason,
                    f"wedged in {reason} past the stuck-pod grace",
                    status.get("name"), terminated.get("exitCode"))
            work.wake(first + stuck_grace)
    return waiting, None


def _deadline_failure(work: Work, operation: Operation, pods: list[Json]) -> Json | None:
    """The operation ran past its deadline and its pods were not ready in time."""
    deadline = operation.deadline
    if deadline and work.now >= parse_time(deadline) and not _ready_in_time(
            work, pods, parse_time(deadline)):
        named = pods[0]["metadata"]["name"] if pods else None
        return {"pod": named, "container": None, "reason": "DeadlineExceeded",
                "exitCode": None, "message": "the operation ran past its deadline "
                f"({work.settings.instance_ready_timeout_text})",
                "time": format_time(work.now)}
    if deadline:
        work.wake(parse_time(deadline))
    return None


def _ready_in_time(work: Work, pods: list[Json], deadline: float) -> bool:
    """The pods' containers were all ready by the deadline, by their own conditions: the
    operation made its window, and only waits for a pass to put it into rotation (a job
    that runs every few minutes may come by after the deadline)."""
    since = InstancePods(work.needed_of(pods), pods).containers_ready_since()
    return since is not None and since <= deadline


def _external_hold(work: Work, operation: Operation, pods: list[Json]) -> Operation | None:
    """A scheduling gate (Kueue's, say) holds the pods: the clock stops, ``waiting``
    names the gate, and the deadline moves so the operation gets a full window once
    the hold ends (instances.txt). ``heldAt`` records the last pass that saw it. The
    operation so changed, or None when no gate holds them."""
    for pod in pods:
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        if gates and not P.is_terminating(pod):
            timeout = work.settings.instance_ready_timeout
            return replace(
                operation, held_at=format_time(work.now),
                waiting=f"scheduling gate {gates[0].get('name')} on pod "
                        f"{pod['metadata']['name']}",
                deadline=format_time(work.now + timeout) if timeout else operation.deadline)
    return None


def _hold_ended(work: Work, operation: Operation, pods: list[Json]) -> Operation:
    """The hold seen on an earlier pass is over: the full window counts from when it
    ended, not from when a pass came to see it. The pods say when: the scheduler binds
    a pod once its last gate goes, and its PodScheduled condition keeps that moment.
    While a pod is still unbound the moment is unknown, and this pass stands for it
    (a window never starts before the hold really ended)."""
    seen = parse_time(operation.held_at) if operation.held_at else work.now
    live = [p for p in pods if not P.is_terminating(p) and not P.has_ended(p)]
    bound = [P.condition(p, "PodScheduled") for p in live]
    times = [since for ok, since in bound if ok and since is not None]
    if live and len(times) == len(bound):
        ended = min(max(max(times), seen), work.now)
    else:
        ended = work.now
    timeout = work.settings.instance_ready_timeout
    return replace(operation, held_at=None, hold_ended=format_time(ended),
                   deadline=format_time(ended + timeout) if timeout else operation.deadline)


def _unschedulable(pod: Json) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return bool(cond.get("reason") == "Unschedulable")
    return False


def _unschedulable_waiting(pods: list[Json]) -> str:
    """``pod … is unschedulable: <the scheduler's words>``, the first such pod named (a
    gang the scheduler refuses whole has every pod so)."""
    first = pods[0]
    text = f"pod {first['metadata']['name']} is unschedulable"
    if len(pods) > 1:
        text += f" (and {len(pods) - 1} more of its pods)"
    message = _condition_message(first, "PodScheduled")
    return f"{text}: {message}" if message else text


def _condition_message(pod: Json, kind: str) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond.get("message") or cond.get("reason") or ""
    return ""


def revision_caused(failure: Json) -> bool:
    return failure.get("reason") in REVISION_REASONS
