"""Repairs of Ready Instances (restart-policy.txt) and recovery by hand (instances.txt).

Under RecreateInstanceOnPodRestart, a Ready Instance restarts whole when its
main container (``ome-container``) restarts, when one of its pods is in phase
Failed, or when it has fewer pods than it needs. Under None, only the failed
or missing pod is replaced. Under either policy, a pod wedged in
CrashLoopBackOff or ImagePullBackOff past stuckPodGracePeriod restarts the
whole Instance: those are the crash-loop repairs, bounded per pass by
repairBatchSize and, when they take a serving Instance offline, by
maxUnavailable. Policy restarts wait for neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegitops.lifecycle.availability import unavailable
from omegitops.lifecycle.bringup import step_restart
from omegitops.lifecycle.failures import ended_failure, failure_record, lost_record
from omegitops.lifecycle.work import Work
from omegitops.model.budgets import scaled_value
from omegitops.model.state import Json, Mode, OperationType, Phase, Row, Step
from omegitops.render import pods as P
from omegitops.render.instance import InstancePods, instance_pods
from omegitops.render.templates import MAIN_CONTAINER

RECREATE_INSTANCE = "RecreateInstanceOnPodRestart"
WEDGED = ("CrashLoopBackOff", "ImagePullBackOff")
RESET_ANNOTATION = "ome.io/reset-instances"
RELEASE_ANNOTATION = "ome.io/release-revision"


@dataclass
class Trigger:
    """Why a Ready Instance needs repair; ``crash_loop`` repairs are budgeted."""

    text: str
    failure: Json
    crash_loop: bool = False
    whole: bool = True


def _restarted(work: Work, row: Row, pod: Json) -> Trigger | None:
    """The main container restarted since the last pass saw the Instance Ready."""
    seen = {p["name"]: p.get("restarts", 0) for p in row.pods}
    name = pod["metadata"]["name"]
    if name not in seen or P.restarts(pod) <= seen[name]:
        return None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != MAIN_CONTAINER:
            continue
        last = (status.get("lastState") or {}).get("terminated") or {}
        reason, code = last.get("reason") or "Error", last.get("exitCode")
        text = (f"pod {name} container {MAIN_CONTAINER} restarted after Ready: {reason}"
                + (f" (exit {code})" if code is not None else ""))
        return Trigger(text, failure_record(work, pod, reason, text, MAIN_CONTAINER, code))
    return None


def _wedged(work: Work, pod: Json) -> Trigger | None:
    """A pod stuck in CrashLoopBackOff or ImagePullBackOff past the stuck-pod grace."""
    grace = work.settings.stuck_pod_grace_period
    if grace is None or P.is_terminating(pod):
        return None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((status.get("state") or {}).get("waiting") or {}).get("reason")
        if reason not in WEDGED:
            continue
        ready, since = P.condition(pod, "ContainersReady")
        if ready or since is None:
            return None
        if work.now < since + grace:
            work.wake(since + grace)
            return None
        name = pod["metadata"]["name"]
        text = f"pod {name} wedged in {reason} past the stuck-pod grace"
        last = (status.get("lastState") or {}).get("terminated") or {}
        return Trigger(text, failure_record(work, pod, reason, text, status.get("name"),
                                            last.get("exitCode")), crash_loop=True)
    return None


def find_trigger(work: Work, row: Row) -> Trigger | None:
    """Why the Ready Instance ``row`` needs a repair now, if it does."""
    policy = work.settings.restart_policy
    own = work.own_pods(row)
    for pod in own:
        wedge = _wedged(work, pod)
        if wedge is not None:
            return wedge
    for pod in own:
        if P.has_ended(pod) and not P.is_terminating(pod):
            failure = ended_failure(work, pod)
            text = f"pod {pod['metadata']['name']} is in phase Failed: {failure['reason']}"
            return Trigger(text, failure, whole=policy == RECREATE_INSTANCE)
    short = short_of_pods(work, row)
    if short is not None:
        return short
    if policy == RECREATE_INSTANCE:
        live = [p for p in own if not P.is_terminating(p) and not P.has_ended(p)]
        for pod in live:
            restarted = _restarted(work, row, pod)
            if restarted is not None:
                return restarted
    return None


def short_of_pods(work: Work, row: Row) -> Trigger | None:
    """The Ready Instance ``row`` has fewer pods than it needs (restart-policy.txt): one
    was deleted or evicted, or is gone."""
    policy = work.settings.restart_policy
    pods = work.pods_of(row.index)
    own = work.own_pods(row)
    live = [p for p in own if not P.is_terminating(p) and not P.has_ended(p)]
    need = work.needed_for(row)
    leaving = [p for p in own if P.is_terminating(p)]
    if len(live) < need and leaving:
        # A Ready Instance has no deletion of its own in flight: someone else deleted the
        # pod (the taint manager of a node that stopped reporting, an eviction). It has
        # fewer pods than it needs from now on (restart-policy.txt), whether or not the
        # pod ever goes: the restart opens at once and waits for the name under its
        # deadline.
        pod = leaving[0]
        node = P.node_of(pod)
        text = (f"{len(live)}/{need} pods remain (pod {pod['metadata']['name']} is being "
                f"deleted{f' on node {node}' if node else ''})")
        failure = lost_record(work, pod["metadata"]["name"], text)
        return Trigger(text, failure, whole=policy == RECREATE_INSTANCE)
    if len(live) < need and not [p for p in pods if P.is_terminating(p)]:
        gone = sorted(set(_own_names(work, row)) - {p["metadata"]["name"] for p in live})
        text = (f"{len(live)}/{need} pods remain"
                + (f" (pod {gone[0]} is gone)" if gone else ""))
        failure = lost_record(work, gone[0] if gone else None, text)
        return Trigger(text, failure, whole=policy == RECREATE_INSTANCE)
    return None


def _own_names(work: Work, row: Row) -> list[str]:
    """The names of the pods the Instance is made of, present or not."""
    pods = instance_pods(work.pod_input(row.revision), row.index, row.incarnation,
                         row.own_ordinal)
    return [p["metadata"]["name"] for p in pods]


def plan_repairs(work: Work) -> None:
    """Open the repairs Ready Instances need, within the batch and the budget."""
    batch = work.settings.repair_batch_size
    budget = scaled_value(work.settings.max_unavailable, work.lifecycle.replicas)
    down, down_rows = unavailable(work)
    opened = 0
    held: list[tuple[Row, int | None, int]] = []
    for index in sorted(work.rows):
        row = work.rows[index]
        if row.operation is not None or row.phase != Phase.READY:
            continue
        if index in work.moved:
            # Its operation ended this pass. Whatever else the next pass repairs, an
            # Instance Ready with fewer pods than it needs is repaired now: a pass that
            # finds nothing else to do marks the component converged, and nothing would
            # look at it again while its pods stay as they are.
            trigger = short_of_pods(work, row)
        else:
            trigger = find_trigger(work, row)
        if trigger is None:
            continue
        if trigger.crash_loop:
            if batch is not None and opened >= batch:
                continue  # repaired on a following pass, without a RepairHeld event
            serving = InstancePods(work.needed_for(row),
                                   work.pods_of(index)).serving_pod_count()
            if serving and index not in down_rows:
                if budget is not None and down + 1 > budget:
                    held.append((row, budget, down))
                    continue
                down += 1
                down_rows.add(index)
            opened += 1
        work.put(open_restart(work, row, trigger))
    if held and not opened:
        row, budget, down = held[0]
        work.event("Warning", "RepairHeld", row.index,
                   f"repair held: per-Component unavailability budget {budget} exhausted "
                   f"(would become {down + 1})")


def open_restart(work: Work, row: Row, trigger: Trigger) -> Row:
    """Restart: unroute, delete once unrouted, recreate on the same revision one
    incarnation higher. Under restartPolicy None only the failed pod is replaced."""
    # A restart raises the incarnation by one, and the Instance shows the new one from
    # the start (restart-policy.txt: "IDX/INC shows the new incarnation, such as 0/2").
    # Under None only the replaced pod is built at it; the pods that kept running keep
    # the label they started with, which tells the recreated pod from the others.
    row = row.but(last_failure=trigger.failure, phase=Phase.RESTARTING,
                  incarnation=row.incarnation + 1,
                  operation=work.operation(OperationType.RESTART, Step.UNROUTE,
                                           target=row.revision,
                                           mode=Mode.INSTANCE if trigger.whole else Mode.POD))
    work.event("Normal", "RestartTriggered", row.index,
               f"restart triggered: {trigger.text} (incarnation={row.incarnation})")
    work.moved.add(row.index)
    return step_restart(work, row)


def reset_and_release(work: Work, annotations: dict[str, str]) -> None:
    """Recovery by hand, through annotations on the InferenceReplica.

    ``ome.io/reset-instances``: ``all`` or a comma-separated list of indices;
    their Failed Instances start over (one that still holds its failed Update
    is skipped: a new revision or a release moves it). ``ome.io/release-revision``:
    a held revision's name; its attempts start over.
    """
    released = annotations.get(RELEASE_ANNOTATION)
    if released and released in work.retries:
        del work.retries[released]
        work.event("Normal", "RevisionReleased", None, f"released revision {released}")
    value = (annotations.get(RESET_ANNOTATION) or "").strip()
    if not value:
        return
    wanted = None if value == "all" else {int(i) for i in value.split(",") if i.strip().isdigit()}
    for index, row in sorted(work.rows.items()):
        if row.phase != Phase.FAILED or (wanted is not None and index not in wanted):
            continue
        if row.operation is not None and row.operation.type == OperationType.UPDATE:
            continue
        # Rebuilt like any failed Instance: same incarnation, at the newest revision.
        work.put(row.but(rebuild=True, operation=None))
        work.event("Normal", "InstanceReset", index, "reset: starting over")
