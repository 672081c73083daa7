"""Update operations: moving one Instance onto a new revision.

- Surge (SurgeThenDrain): SurgeCreate, SurgeWaitReady, SurgeWaitAvailable,
  HandOver, DrainOld, WaitDrained. A single-pod Instance gets its new pod at
  the other ordinal; a gang gets a whole replacement Instance at a new index.
- Drain (RecreatePod, or a change InPlaceIfPossible can't make in place):
  Unroute, DeletePods, WaitGone, CreatePods, WaitReady, WaitAvailable.
- InPlace (only regular containers' images changed): Unroute, PatchImages,
  WaitReady, WaitAvailable.

update-strategies.txt "Changing the pod template mid-surge" decides what a
surge does when its target revision is withdrawn.
"""

from __future__ import annotations

import copy

from omegitops.lifecycle import pods as P
from omegitops.lifecycle.actions import PatchImages
from omegitops.lifecycle.failures import (
    check_instance,
    check_pods,
    ended_failure,
    lost_record,
    revision_caused,
    wait_gone,
)
from omegitops.lifecycle.missing import REVISION_MISSING, ready_to_build
from omegitops.lifecycle.operations import (
    CREATE_PODS,
    GONE,
    WAIT_AVAILABLE,
    WAIT_READY,
    clear_leftovers,
    ended_pods,
    enter_rotation_when_ready,
    finish_when_available,
    new_row,
    open_delete,
    recycle_ended,
    step_create,
)
from omegitops.lifecycle.retries import record_failure
from omegitops.lifecycle.templates import DEFAULT, LABEL_REVISION
from omegitops.lifecycle.work import (
    CREATE,
    CREATING,
    DELETING,
    DRAIN,
    FAILED,
    IN_PLACE,
    OPERATION_ANNOTATION,
    READY,
    RESTART,
    SURGE,
    UPDATE,
    UPDATING,
    Work,
)

SURGE_CREATE, SURGE_WAIT_READY, SURGE_WAIT_AVAILABLE = (
    "SurgeCreate", "SurgeWaitReady", "SurgeWaitAvailable")
HAND_OVER, DRAIN_OLD, WAIT_DRAINED = "HandOver", "DrainOld", "WaitDrained"
UNROUTE, DELETE_PODS, WAIT_GONE, PATCH_IMAGES = "Unroute", "DeletePods", "WaitGone", "PatchImages"
ABANDON = "Abandon"
FIRST_STEP = {SURGE: SURGE_CREATE, DRAIN: UNROUTE, IN_PLACE: UNROUTE}
SURGE_THEN_DRAIN, IN_PLACE_ONLY = "SurgeThenDrain", "InPlaceOnly"


# -- choosing how an Instance moves ------------------------------------------------


def images_only(old: dict[str, dict], new: dict[str, dict]) -> bool:
    """Whether two single-pod template sets differ in regular containers' images alone."""
    if set(old) != {DEFAULT} or set(new) != {DEFAULT}:
        return False
    return _without_images(old[DEFAULT]) == _without_images(new[DEFAULT])


def _without_images(template: dict) -> dict:
    blank = copy.deepcopy(template)
    for container in blank["spec"].get("containers") or []:
        container.pop("image", None)
    return blank


def update_mode(work: Work, row: dict, strategy: str, surge_allowed: bool) -> str | None:
    """How ``row`` moves under ``strategy``; None when InPlaceOnly must refuse."""
    if strategy == SURGE_THEN_DRAIN:
        return SURGE if surge_allowed else DRAIN
    if strategy == "RecreatePod" or work.desired.gang:
        # A gang moves whole: the in-place strategies recreate its pods.
        return DRAIN
    # With its revision's templates gone, nothing shows the change is images only.
    possible = work.has_templates(row["revision"]) and images_only(
        work.templates(row["revision"]), work.desired.templates)
    if possible:
        return IN_PLACE
    return None if strategy == IN_PLACE_ONLY else DRAIN


def open_update(work: Work, row: dict, strategy: str, mode: str) -> None:
    target = work.desired.revision
    operation = work.operation(UPDATE, FIRST_STEP[mode], strategy, target=target, mode=mode)
    if mode == SURGE and not work.desired.gang:
        operation["ordinal"] = 1 - int(row.get("ordinal", 0))
    row["operation"] = operation
    row["phase"] = UPDATING
    row.pop("refused", None)
    work.event("Normal", "InstanceUpdating", row["index"],
               f"updating to {target} ({strategy}: {mode})")
    step_update(work, row)


def step_update(work: Work, row: dict) -> str | None:
    mode = row["operation"].get("mode")
    if mode == SURGE:
        if work.desired.gang:
            return _surge_gang(work, row)
        return _surge_single(work, row)
    if mode == IN_PLACE:
        return _in_place(work, row)
    return _drain(work, row)


def _finish(work: Work, row: dict, revision: str) -> None:
    row["revision"] = revision
    row["phase"] = READY
    row["operation"] = None
    row.pop("attempts", None)
    row.pop("retryAt", None)
    work.event("Normal", "InstanceUpdated", row["index"],
               f"updated to {revision} (incarnation={row['incarnation']})")


# -- SurgeThenDrain, one pod ------------------------------------------------------


def _surge_pods(work: Work, row: dict) -> tuple[list[dict], list[dict]]:
    """(this attempt's new pods, pods an earlier attempt left at the surge ordinal)."""
    operation = row["operation"]
    at_ordinal = [p for p in work.groups.get(row["index"], [])
                  if P.ordinal_of(p) == operation["ordinal"]]
    mine = [p for p in at_ordinal
            if p["metadata"].get("annotations", {}).get(OPERATION_ANNOTATION)
            == operation["startedAt"]]
    return mine, [p for p in at_ordinal if p not in mine]


def _surge_single(work: Work, row: dict) -> str | None:
    operation = row["operation"]
    target = operation["targetRevision"]
    mine, stale = _surge_pods(work, row)
    old = work.instance(row)
    new_live = [p for p in mine if not P.is_terminating(p) and not P.has_ended(p)]
    superseded = target != work.desired.revision
    handed_over = operation.get("handedOver", False)
    if handed_over and not new_live:
        return _replacement_lost(work, row, old.live, SURGE_ABANDONED, mine)
    # A withdrawn target is abandoned at once, unless the old pod is gone and a ready
    # new pod is all the Instance has: then it promotes on the revision it was built for.
    promote_anyway = not old.live and any(P.containers_ready(p) for p in new_live)
    step = operation["step"]
    if step == ABANDON or (superseded and not handed_over and not promote_anyway):
        return _abandon_single(work, row, mine)
    if step == SURGE_CREATE:
        if stale:
            # The start evicts what an earlier attempt left before it creates anything.
            for pod in stale:
                work.delete(pod)
            work.wake(min(P.deletion_deadline(p) or work.now for p in stale))
            # A pod whose node stopped reporting holds the name past its grace: named,
            # and the attempt fails at its deadline (the old pod keeps serving).
            failure = wait_gone(work, operation, stale)
            if failure is not None:
                return _surge_failed(work, row, failure, new_live)
            return None
        if not work.create_pods(row, target, row["incarnation"], operation["ordinal"], mine,
                                operation):
            operation["step"] = SURGE_WAIT_READY
        return None
    if not handed_over:
        failure = check_pods(work, operation, mine)
        if failure is not None:
            return _surge_failed(work, row, failure, new_live)
    if step == SURGE_WAIT_READY:
        if new_live and all(P.containers_ready(p) for p in new_live):
            work.route(new_live, True)
            operation["served"] = True
            operation["step"] = SURGE_WAIT_AVAILABLE
        return None
    if step == SURGE_WAIT_AVAILABLE:
        # A pass cut short after recording this step may not have put the new pod into
        # rotation: do it now (as finish_when_available does), or this waits forever.
        work.route(new_live, True)
        if _available(work, new_live):
            operation["step"] = HAND_OVER
        return None
    return _drain_source(work, row, old.live, old.pods, lambda: _promote_single(work, row))


def _available(work: Work, pods: list[dict]) -> bool:
    """All ``pods`` Ready for minReadySeconds (waking when the window ends)."""
    if not pods or not all(P.is_ready(p) for p in pods):
        return False
    since = max(P.condition(p, "Ready")[1] or 0.0 for p in pods)
    end = since + work.lifecycle.min_ready_seconds
    if work.now >= end:
        return True
    work.wake(end)
    return False


def _drain_source(work: Work, row: dict, live: list[dict], listed: list[dict], promote) -> None:
    """HandOver, DrainOld, WaitDrained: shared by single pods and gangs."""
    operation = row["operation"]
    step = operation["step"]
    if step == HAND_OVER:
        work.route(live, False)
        operation["handedOver"] = True
        operation["step"] = DRAIN_OLD
        return None
    if step == DRAIN_OLD:
        work.delete_unrouted(listed)
        operation["step"] = WAIT_DRAINED
        return None
    if listed:
        # A pass cut short after recording WaitDrained (a failed write, a killed job) may
        # have deleted only some of the pods: delete the rest (terminating ones are skipped),
        # or the update would wait for them forever.
        work.delete_unrouted(listed)
        # The update, and its surge slot, last until the drained pods are gone.
        work.wake(min(P.deletion_deadline(p) or work.now for p in listed))
        return None
    return promote()


def _promote_single(work: Work, row: dict) -> None:
    row["ordinal"] = row["operation"]["ordinal"]
    _finish(work, row, row["operation"]["targetRevision"])


SURGE_ABANDONED, GANG_SURGE_ABANDONED = "SurgeAbandoned", "GangSurgeAbandoned"


def _abandon_single(work: Work, row: dict, mine: list[dict]) -> None:
    """End a superseded surge while the old pod still serves: unroute the new pod if
    it serves, delete it, and return to Ready on the revision the Instance runs."""
    operation = row["operation"]
    if operation["step"] != ABANDON:
        operation["step"] = ABANDON
        work.event("Normal", SURGE_ABANDONED, row["index"], _superseded_message(work, row))
    live = [p for p in mine if not P.is_terminating(p)]
    if any(P.gate_set(p) and not P.has_ended(p) for p in live):
        work.route(live, False)
        return
    if live:
        grace = None if operation.get("served") else _abandon_grace(work)
        for pod in live:
            work.delete(pod, grace)
        return
    if mine:
        work.wake(min(P.deletion_deadline(p) or work.now for p in mine))
        return
    row["operation"] = None
    row["phase"] = READY
    return


def _abandon_grace(work: Work) -> int | None:
    grace = work.seconds("abandonedReplacementGracePeriod")
    return None if grace is None else int(grace)


def _superseded_message(work: Work, row: dict) -> str:
    target = row["operation"]["targetRevision"]
    newest = work.desired.revision
    if newest == row["revision"]:
        return (f"abandoned surge to withdrawn revision {target}; the Instance stays on "
                f"revision {row['revision']} instead")
    return f"abandoned superseded surge to {target}; re-surging toward {newest}"


def _replacement_lost(work: Work, row: dict, source: list[dict], reason: str,
                      lost: list[dict], known: dict | None = None) -> None:
    """The replacement is gone after it took over serving: nothing is rebuilt at it.

    When a newer change withdrew its revision meanwhile, ending the surge is what
    the change asked for (a Normal event). Otherwise a serving replacement was lost:
    a Warning, with the loss as the Instance's lastFailure, counted against the
    revision when the revision caused it."""
    target = row["operation"]["targetRevision"]
    standing = [p for p in source if not P.is_terminating(p)]
    superseded = target != work.desired.revision
    kind, prefix = ("Normal", f"abandoned superseded surge to {target}") if superseded else (
        "Warning", f"surge to {target} lost its replacement")
    failure = None if superseded else (known or _loss(work, lost))
    if failure is not None:
        prefix += f" ({failure['reason']}: {failure['message']})"
        if revision_caused(failure):
            record_failure(work, row, target, failure)
        else:
            row["lastFailure"] = failure
    if standing:
        work.route(standing, True)
        row["operation"] = None
        row["phase"] = READY
        work.event(kind, reason, row["index"], (
            f"{prefix}; the replacement was lost after it took over serving and nothing is "
            f"rebuilt at it; the source returns to rotation on revision {row['revision']}"))
        return
    row["operation"] = None
    row["phase"] = FAILED
    row["rebuild"] = True
    work.event(kind, reason, row["index"], (
        f"{prefix}; no source pod stands, so the Instance re-enters as a fresh start at "
        f"revision {work.desired.revision}"))
    return


def _loss(work: Work, lost: list[dict]) -> dict:
    """Why the replacement stopped serving: a pod of it that ended, else gone."""
    for pod in lost:
        if P.has_ended(pod):
            return ended_failure(work, pod)
    names = sorted(p["metadata"]["name"] for p in lost)
    return lost_record(work, names[0] if names else None,
                       "the replacement's pods are gone or terminating")


def _surge_failed(work: Work, row: dict, failure: dict, new_live: list[dict]) -> None:
    """The old pod keeps serving; a live new pod stays as an extra until the next start."""
    target = row["operation"]["targetRevision"]
    work.route(new_live, False)
    for pod in work.groups.get(row["index"], []):
        if P.has_ended(pod):
            work.delete(pod)
    row["operation"] = None
    instance = work.instance(row)
    row["phase"] = READY if instance.serving_pod_count() >= instance.needed else FAILED
    work.event("Warning", "UpdateFailed", row["index"],
               f"update to {target} failed: {failure['reason']}: {failure['message']}; "
               "the old pod keeps serving")
    record_failure(work, row, target, failure)


# -- SurgeThenDrain, a gang --------------------------------------------------------


def _lowest_free_index(work: Work) -> int:
    used = set(work.rows) | set(work.groups)
    index = 0
    while index in used:
        index += 1
    return index


def _surge_gang(work: Work, row: dict) -> str | None:
    operation = row["operation"]
    target = operation["targetRevision"]
    step = operation["step"]
    source = work.instance(row)
    if step == SURGE_CREATE:
        # As a single pod's start evicts what an earlier attempt left, a gang's waits
        # until an abandoned replacement of an earlier attempt is gone.
        if any(r.get("surgeOf") == row["index"] for r in work.rows.values()):
            return None
        index = _lowest_free_index(work)
        replacement = new_row(index, 1, target, CREATING, work.operation(CREATE, CREATE_PODS))
        replacement["surgeOf"] = row["index"]
        work.rows[index] = replacement
        operation["replacement"] = index
        operation["step"] = SURGE_WAIT_READY
        step_create(work, replacement)
        return None
    replacement = work.rows.get(operation.get("replacement"))
    handed_over = operation.get("handedOver", False)
    if replacement is None or (handed_over and _stopped_serving(work, replacement)):
        lost = work.groups.get(replacement["index"], []) if replacement is not None else []
        known = (replacement or {}).get("lastFailure")  # its own restart may have seen why
        if replacement is not None and replacement.get("phase") != DELETING:
            open_delete(work, replacement, "replacement lost")
        return _replacement_lost(work, row, source.live, GANG_SURGE_ABANDONED, lost, known)
    if not handed_over and target != work.desired.revision:
        return _abandon_gang(work, row, replacement, "Normal", _superseded_message(work, row))
    if not handed_over and replacement.get("phase") == FAILED:
        failure = replacement.get("lastFailure") or {}
        message = (f"abandoned surge to {target}: replacement Instance {replacement['index']} "
                   f"failed: {failure.get('reason', 'Failed')}; the old Instance keeps serving")
        _abandon_gang(work, row, replacement, "Warning", message)
        record_failure(work, row, target, failure or {"reason": "Failed", "message": ""})
        return None
    if step == SURGE_WAIT_READY:
        if (replacement.get("operation") or {}).get("step") == WAIT_AVAILABLE or (
                replacement["phase"] == READY):
            operation["step"] = SURGE_WAIT_AVAILABLE
        return None
    if step == SURGE_WAIT_AVAILABLE:
        if replacement["phase"] == READY:
            operation["step"] = HAND_OVER
        return None
    if step == HAND_OVER and _stopped_serving(work, replacement):
        # Not handed over yet: the source keeps serving while the replacement recovers.
        operation["step"] = SURGE_WAIT_AVAILABLE
        return None

    def promote() -> str:
        replacement.pop("surgeOf", None)
        work.event("Normal", "InstanceUpdated", row["index"],
                   f"replaced by Instance {replacement['index']} on {target}")
        return GONE

    return _drain_source(work, row, source.live, work.groups.get(row["index"], []), promote)


def _stopped_serving(work: Work, replacement: dict) -> bool:
    """Whether a gang's replacement no longer serves, or is about to stop as a whole.

    A gang serves only through its leader, so a replacement whose leader is lost has
    stopped serving, even while its workers run; so has one that restarts whole (its own
    restart policy, this pass or an earlier one), failed, or is going away. Under
    restartPolicy None the loss of a worker is not this: the others serve on while it
    is replaced."""
    from omegitops.lifecycle.repairs import find_trigger

    if replacement.get("phase") in (FAILED, DELETING):
        return True
    operation = replacement.get("operation") or {}
    if operation.get("type") == RESTART and operation.get("mode") == "Instance":
        return True
    if not work.instance(replacement).entries():
        return True
    if operation or replacement.get("phase") != READY:
        return False
    trigger = find_trigger(work, replacement)
    return trigger is not None and trigger.whole


def _abandon_gang(work: Work, row: dict, replacement: dict, kind: str, message: str) -> None:
    """Delete the whole replacement Instance; the old one keeps serving."""
    work.event(kind, GANG_SURGE_ABANDONED, row["index"], message)
    served = any(P.gate_set(p) for p in work.groups.get(replacement["index"], []))
    open_delete(work, replacement, "surge abandoned")
    if not served:
        replacement["operation"]["abandonGrace"] = _abandon_grace(work)
    row["operation"] = None
    row["phase"] = READY


# -- Drain: delete and recreate under the same names ------------------------------


def _drain(work: Work, row: dict) -> None:
    recreate(work, row, retarget=True)


def recreate(work: Work, row: dict, retarget: bool) -> None:
    """Unroute, DeletePods, WaitGone, then bring the Instance up again under the same
    names, one incarnation higher: at the newest revision for an update
    (``retarget``), at the revision it runs for a restart."""
    operation = row["operation"]
    step = operation["step"]
    pods = work.groups.get(row["index"], [])
    if step == UNROUTE:
        work.route(pods, False)
        operation["step"] = DELETE_PODS
        return
    if step == DELETE_PODS:
        work.delete_unrouted(pods)
        operation["step"] = WAIT_GONE
        return
    if step == WAIT_GONE:
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
            operation["targetRevision"] = work.desired.revision
        row["revision"] = operation.get("targetRevision") or row["revision"]
        if retarget and not operation.get("retry"):
            # An update that deletes and recreates the pods raises the incarnation once;
            # a retry rebuilds a Failed Instance, which keeps it (instances.txt). A
            # restart raised it when it opened.
            row["incarnation"] += 1
        row.pop("ordinal", None)
        operation["step"] = CREATE_PODS
    bring_up(work, row)


def fail_operation(work: Work, row: dict, failure: dict) -> None:
    """The restart or update of ``row`` failed: out of rotation, Failed, still holding
    its operation, the failure recorded against the revision it was building."""
    operation = row["operation"]
    what = "restart" if operation["type"] == RESTART else "update"
    target = operation.get("targetRevision") or row["revision"]
    _out_of_rotation(work, row)
    row["phase"] = FAILED
    work.event("Warning", f"{what.capitalize()}Failed", row["index"],
               f"{what} at {target} failed: {failure['reason']}: {failure['message']}")
    record_failure(work, row, target, failure)


def bring_up(work: Work, row: dict) -> None:
    """CreatePods, WaitReady, WaitAvailable; a failure leaves the Instance Failed,
    still holding its operation."""
    operation = row["operation"]
    instance = work.instance(row)
    what = "restart" if operation["type"] == RESTART else "update"
    if recycle_ended(work, row):
        return
    if operation["step"] == CREATE_PODS and not ended_pods(work, row):
        if clear_leftovers(work, row):
            failure = wait_gone(work, operation, work.groups.get(row["index"], []))
            if failure is not None:
                fail_operation(work, row, failure)
            return
        if not ready_to_build(work, row):
            return
        # A restart of one pod keeps the Instance's ordinal (1 after a single-pod surge);
        # recreate() has already reset it to 0 for a whole-Instance rebuild.
        created = work.create_pods(row, row["revision"], row["incarnation"],
                                   row.get("ordinal", 0), instance.pods)
        if not created:
            operation["step"] = WAIT_READY
        return
    failure = check_instance(work, row)
    if failure is not None:
        fail_operation(work, row, failure)
        return
    if operation["step"] == WAIT_READY:
        enter_rotation_when_ready(work, row)
        return
    if finish_when_available(work, row, "restarted" if what == "restart" else "updated"):
        row.pop("attempts", None)
        row.pop("retryAt", None)


# -- InPlace: new images in the same pod --------------------------------------------


def _target_images(work: Work, revision: str) -> dict[str, str]:
    """The images of the revision the operation moves to (which a newer change may
    have withdrawn meanwhile: the Instance finishes there, then moves again)."""
    template = work.templates(revision)[DEFAULT]
    return {c["name"]: c.get("image") for c in template["spec"].get("containers") or []}


def _in_place(work: Work, row: dict) -> None:
    operation = row["operation"]
    step = operation["step"]
    instance = work.instance(row)
    mark = work.lifecycle.value(
        "updateStrategy.inPlaceUpdateStrategy.markNotReadyDuringLifecycle", True)
    target = operation["targetRevision"]
    if step in (UNROUTE, PATCH_IMAGES) and not work.has_templates(target):
        # Nothing patched yet, and nothing tells the target's images any more (its
        # ControllerRevision is gone): recreate the Instance at the newest revision.
        work.event("Warning", REVISION_MISSING, row["index"], (
            f"revision {target} has no ControllerRevision, so its images cannot be set in "
            f"place; recreating the Instance at {work.desired.revision}"))
        operation.update(mode=DRAIN, step=UNROUTE)
        _drain(work, row)
        return
    if step == UNROUTE:
        if mark:
            work.route(instance.live, False)
        operation["step"] = PATCH_IMAGES
        return
    if step == PATCH_IMAGES:
        _patch_images(work, instance.live, target)
        row["revision"] = operation["targetRevision"]
        operation["step"] = WAIT_READY
        return
    failure = check_instance(work, row)
    if failure is not None:
        _out_of_rotation(work, row)
        row["phase"] = FAILED
        work.event("Warning", "UpdateFailed", row["index"],
                   f"in-place update to {row['revision']} failed: {failure['reason']}")
        record_failure(work, row, row["revision"], failure)
        return
    if step == WAIT_READY:
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
            row["revision"] = P.revision_of(instance.live[0])
            work.route(instance.live, True)
            row["operation"] = None
            row["phase"] = READY
            return
        if instance.containers_ready() and all(
                _runs_images(p, _images_for(work, target, p)) for p in instance.live):
            work.route(instance.live, True)
            operation["step"] = WAIT_AVAILABLE
        return
    finish_when_available(work, row, "updated in place")
    return


def _never_patched(pods: list[dict], target: str) -> bool:
    """No pod carries the target's ``ome.io/revision`` label, which the patch sets with
    the images: none was patched."""
    return bool(pods) and all(P.revision_of(p) not in (None, target) for p in pods)


def _images_for(work: Work, revision: str, pod: dict) -> dict[str, str]:
    """The images ``pod`` should run at ``revision``: the stored ones, or (the
    revision's templates gone) those its spec was patched to."""
    if work.has_templates(revision):
        return _target_images(work, revision)
    return {c["name"]: c.get("image") for c in pod["spec"]["containers"]}


def _patch_images(work: Work, pods: list[dict], revision: str) -> None:
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


def _out_of_rotation(work: Work, row: dict) -> None:
    """A Failed Instance leaves rotation whole: none of its pods keeps the gate."""
    work.route(work.instance(row).live, False)


def _runs_images(pod: dict, images: dict[str, str]) -> bool:
    statuses = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    for name, image in images.items():
        status = statuses.get(name) or {}
        if status.get("image") != image or not status.get("ready"):
            return False
    return True
