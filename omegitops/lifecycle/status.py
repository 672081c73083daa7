"""Counts and conditions of a component, from its Instance rows and pods.

An Instance counts toward a state when at least its desired number of pods
are in it (instances.txt "Readiness and availability"), so it still counts
during a surge:

- ready: its pods are Ready (containers ready and the ``ome.io/serving``
  gate True);
- available: its pods' containers have been ready for minReadySeconds. The
  headless Service lists pods before they enter rotation, so with
  minReadySeconds 0 an Instance can be available before it is ready;
- serving: its entry pod (the leader, or the single pod) serves; a gang
  whose leader does not serve serves nothing, however many workers do.
"""

from __future__ import annotations

from typing import Any

from omegitops.cluster.times import format_time
from omegitops.lifecycle.instance import InstancePods
from omegitops.lifecycle.resolve import timeout_seconds

TRUE, FALSE = "True", "False"


def component_status(
    desired: Any,
    rows: list[dict],
    groups: dict[int, list[dict]],
    previous: dict,
    now: float,
) -> dict[str, Any]:
    need = desired.pods_per_instance
    min_ready = desired.lifecycle.min_ready_seconds
    ready = available = serving = updated = 0
    for row in rows:
        pods = InstancePods(need, groups.get(row["index"], []))
        if pods.ready_count() >= need:
            ready += 1
        since = pods.containers_ready_since()
        if since is not None and now >= since + min_ready:
            available += 1
        if pods.serving_pod_count() >= need:
            serving += 1
        if row.get("revision") == desired.revision and row.get("phase") != "Deleting":
            updated += 1
    want = desired.lifecycle.replicas
    counts = {
        "replicas": len(rows),
        "readyReplicas": ready,
        "availableReplicas": available,
        "servingReplicas": serving,
        "updatedReplicas": updated,
    }
    current = _current_revision(rows)
    conditions = _conditions(desired, rows, counts, want, previous.get("conditions") or [], now)
    return {
        **counts,
        "desiredReplicas": want,
        "currentRevision": current,
        "updateRevision": desired.revision,
        "conditions": conditions,
        "rolloutHold": None,
    }


def _current_revision(rows: list[dict]) -> str | None:
    """The revision most Instances run, Ready ones first; ties go to the name, so the
    answer never depends on hash order."""
    counts: dict[str, tuple[int, int]] = {}
    for row in rows:
        revision = row.get("revision")
        if revision:
            ready, total = counts.get(revision, (0, 0))
            counts[revision] = (ready + (row.get("phase") == "Ready"), total + 1)
    if not counts:
        return None
    return min(counts, key=lambda r: (-counts[r][0], -counts[r][1], r))


def _conditions(desired: Any, rows: list[dict], counts: dict, want: int,
                previous: list[dict], now: float) -> list[dict]:
    failed = [row["index"] for row in rows if row.get("phase") == "Failed"]
    in_flight = [row for row in rows if row.get("operation")]
    serving = counts["servingReplicas"]
    if failed:
        ready = (FALSE, "InstanceFailed", (f"Instances {_list(failed)} failed; "
                 f"{serving}/{want} Instances serving"))
    elif serving >= want:
        ready = (TRUE, "AllInstancesServing", f"{serving}/{want} Instances serving")
    else:
        ready = (FALSE, "InsufficientServing", f"{serving}/{want} Instances serving")
    progressing = (
        (TRUE, "InstancesChanging", _plural(len(in_flight), "Instance operation")
         + " in flight")
        if in_flight or len(rows) != want
        else (FALSE, "Settled", "no Instance operation in flight")
    )
    unconfigured = timeout_seconds(desired.lifecycle) is None
    timeout = (
        (TRUE, "NoDeadline", ("lifecycle.instanceReadyTimeout is unset everywhere: operations "
         "get no deadline and a stuck Instance waits for you"))
        if unconfigured
        else (FALSE, "DeadlineConfigured",
              f"operations time out after {desired.lifecycle.value('instanceReadyTimeout')}")
    )
    wanted = {
        "Ready": ready,
        "Progressing": progressing,
        "InstanceReadyTimeoutUnconfigured": timeout,
    }
    if desired.pinned:
        wanted["RuntimeDrifted"] = (
            (TRUE, "RuntimeChanged", ("the runtime changed since this service pinned it "
             "(spec.runtime.autoSync: false); the pinned template keeps serving"))
            if desired.drifted
            else (FALSE, "RuntimeInSync", "the pinned runtime matches the runtime")
        )
    return [_condition(kind, *value, previous, now) for kind, value in wanted.items()]


def _condition(kind: str, status: str, reason: str, message: str, previous: list[dict],
               now: float) -> dict:
    """A condition whose lastTransitionTime moves only when its status does."""
    since = format_time(now)
    for old in previous:
        if old.get("type") == kind and old.get("status") == status:
            since = old.get("lastTransitionTime") or since
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _list(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)
