"""Create and Delete operations, and Instances at rest.

Each step function moves one Instance by at most one step per pass:

- Create: CreatePods, WaitReady, WaitAvailable
- Delete: Unroute, DeletePods, WaitGone
"""

from __future__ import annotations

from omegitops.lifecycle import pods as P
from omegitops.lifecycle.failures import ended_failure
from omegitops.lifecycle.missing import ready_to_build
from omegitops.lifecycle.work import CREATE, CREATING, DELETE, DELETING, READY, Work
from omegitops.times import parse_time

CREATE_PODS, WAIT_READY, WAIT_AVAILABLE = "CreatePods", "WaitReady", "WaitAvailable"
UNROUTE, DELETE_PODS, WAIT_GONE = "Unroute", "DeletePods", "WaitGone"
GONE = "gone"


def new_row(index: int, incarnation: int, revision: str, phase: str,
            operation: dict | None) -> dict:
    return {"index": index, "incarnation": incarnation, "phase": phase, "revision": revision,
            "pods": [], "operation": operation, "lastFailure": None}


def open_create(work: Work, index: int) -> dict:
    """A new Instance at ``index`` on the desired revision, created in this pass."""
    row = new_row(index, 1, work.desired.revision, CREATING,
                  work.operation(CREATE, CREATE_PODS))
    work.rows[index] = row
    work.event("Normal", "InstanceCreating", index,
               f"creating at revision {row['revision']} (incarnation=1)")
    step_create(work, row)
    return row


def open_delete(work: Work, row: dict, why: str) -> None:
    row["phase"] = DELETING
    row["operation"] = work.operation(DELETE, UNROUTE)
    work.event("Normal", "InstanceDeleting", row["index"], f"deleting: {why}")
    step_delete(work, row)


def step_create(work: Work, row: dict) -> None:
    operation = row["operation"]
    pods = work.instance(row)
    if operation["step"] == CREATE_PODS:
        if clear_leftovers(work, row) or not ready_to_build(work, row):
            return
        created = work.create_pods(row, row["revision"], row["incarnation"],
                                   row.get("ordinal", 0), pods.pods)
        operation.pop("fresh", None)  # the old pods are gone: these are the new ones
        if not created:
            operation["step"] = WAIT_READY
        return
    if operation["step"] == WAIT_READY:
        enter_rotation_when_ready(work, row)
        return
    if operation["step"] == WAIT_AVAILABLE:
        finish_when_available(work, row, "ready")


def enter_rotation_when_ready(work: Work, row: dict) -> None:
    """WaitReady: once the containers of all the Instance's pods are ready, every pod
    gets the serving gate in the same pass, so a gang enters rotation together."""
    pods = work.instance(row)
    if pods.containers_ready():
        work.route(pods.live, True)
        row["operation"]["step"] = WAIT_AVAILABLE


def recycle_ended(work: Work, row: dict) -> bool:
    """instances.txt: while OME creates or restarts an Instance, it deletes and
    recreates any pod that has ended (one the kubelet evicted, say) until the
    operation's deadline, with a TerminalPodRecycled warning each time. The step goes
    back to CreatePods, which waits for the pod to be gone. Past the deadline the
    ended pod is the operation's failure instead."""
    operation = row["operation"]
    pods = work.instance(row).pods
    ended = ended_pods(work, row)
    deadline = operation.get("deadline")
    if not ended or (deadline and work.now >= parse_time(deadline)):
        return False
    if operation.get("mode") != "Pod":
        # A whole Instance leaves rotation with the recycled pod and re-enters it whole;
        # the repair of one pod under restartPolicy None leaves the others serving.
        work.route(pods, False)
    for pod in ended:
        row["lastFailure"] = ended_failure(work, pod)
        work.delete(pod, 0)
        work.event("Warning", "TerminalPodRecycled", row["index"],
                   f"recycling ended pod {pod['metadata']['name']}: "
                   f"{row['lastFailure']['reason']}")
    operation["step"] = CREATE_PODS
    return True


def ended_pods(work: Work, row: dict) -> list[dict]:
    """The Instance's own pods that ended and are not being deleted yet."""
    return [p for p in work.instance(row).pods if P.has_ended(p) and not P.is_terminating(p)]


def clear_leftovers(work: Work, row: dict) -> bool:
    """Ended or terminating pods of the Instance would collide with the names about
    to be created: delete the ended ones and wait for all of them to go. So would a
    live pod of another revision, which a pass cut short before it deleted what a
    fresh start replaces leaves: completing the Instance beside it would mix two
    revisions in one gang, so it goes too (out of rotation first). After a fresh start
    every old pod goes, whatever its revision: a pass cut short may have deleted only
    some of them, and a new gang is never completed beside an old one's pods."""
    leftovers = [p for p in work.groups.get(row["index"], [])
                 if P.is_terminating(p) or P.has_ended(p)]
    for pod in leftovers:
        if P.has_ended(pod):
            work.delete(pod, 0)
    fresh = (row.get("operation") or {}).get("fresh")
    stale = [p for p in work.groups.get(row["index"], []) if not P.is_terminating(p)
             and not P.has_ended(p) and (fresh or P.revision_of(p) != row["revision"])]
    if not fresh:
        own = {p["metadata"]["name"] for p in work.own_pods(row)}
        stale = [p for p in stale if p["metadata"]["name"] in own]
    work.delete_unrouted(stale)
    if leftovers:
        work.wake(min(P.deletion_deadline(p) or work.now for p in leftovers))
    return bool(leftovers or stale)


def finish_when_available(work: Work, row: dict, verb: str) -> bool:
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
    row["phase"] = READY
    row["operation"] = None
    work.event("Normal", "InstanceReady", row["index"],
               f"{verb} on revision {row['revision']} (incarnation={row['incarnation']})")
    return True


def step_delete(work: Work, row: dict) -> str | None:
    """Unroute, delete once unrouted, and drop the row when every pod is gone."""
    operation = row["operation"]
    pods = work.groups.get(row["index"], [])
    if operation["step"] == UNROUTE:
        work.route(pods, False)
        operation["step"] = DELETE_PODS
        return None
    grace = operation.get("abandonGrace")  # a replacement that never served goes fast
    if operation["step"] == DELETE_PODS:
        work.delete_unrouted(pods, grace)
        operation["step"] = WAIT_GONE
        return None
    if pods:
        work.delete_unrouted(pods, grace)  # a pod that appeared meanwhile goes too
        work.wake(min((P.deletion_deadline(p) or work.now) for p in pods))
        _overdue(work, row)
        return None
    # Its PodGroup goes with the row (planner: left_podgroups), whatever removed it.
    work.event("Normal", "InstanceDeleted", row["index"], "deleted")
    return GONE


def _overdue(work: Work, row: dict) -> None:
    """A drain past its deadline does not fail: one DrainOverdue warning, and the
    condition of the same name, until the pods are gone."""
    deadline = row["operation"].get("deadline")
    if not deadline or row["operation"].get("overdue"):
        return
    if work.now >= parse_time(deadline):
        row["operation"]["overdue"] = True
        work.event("Warning", "DrainOverdue", row["index"],
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
        if not work.desired.gang:
            ordinal = min(P.ordinal_of(p) for p in source)
            own = [p for p in source if P.ordinal_of(p) == ordinal]
        row = new_row(index, max(P.incarnation_of(p) for p in own),
                      P.revision_of(own[0]), CREATING if live else DELETING, None)
        if not work.desired.gang:
            row["ordinal"] = ordinal
        row["operation"] = (work.operation(CREATE, CREATE_PODS) if live
                            else work.operation(DELETE, WAIT_GONE))
        work.rows[index] = row


def rest(work: Work, row: dict) -> None:
    """An Instance with no operation: a Ready one whose pods are all ready stays
    in rotation as a whole (a pod the kubelet restarted gets its gate back)."""
    pods = work.instance(row)
    if row["phase"] == READY and pods.containers_ready():
        work.route(pods.live, True)
    if row["phase"] == READY and row["revision"] == work.desired.revision \
            and not work.desired.gang:
        # A replacement a failed attempt left running holds a surge slot until a start
        # on its Instance replaces it (update-strategies.txt); on the target revision
        # no start will come, and the slot would stall every other Instance's update.
        extras = [p for p in work.groups.get(row["index"], [])
                  if P.ordinal_of(p) != row.get("ordinal", 0) and not P.is_terminating(p)]
        work.delete_unrouted(extras)
