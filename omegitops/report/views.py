"""Read-side views of what omegitops recorded: replicas, Instances, events.

Shared by ``get irep``, ``instance``, ``events`` and the status report, so
that each shows the same numbers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from omegitops.cluster.base import EVENT
from omegitops.model.replica import decode_rows
from omegitops.render.templates import MANAGED_BY, MANAGER
from omegitops.util.times import parse_time


def replica_view(replica: dict) -> dict[str, Any]:
    """``get irep -o json``: name, component, counts, minReadySeconds, conditions, hold."""
    spec = replica.get("spec") or {}
    status = replica.get("status") or {}
    return {
        "name": replica["metadata"]["name"],
        "namespace": replica["metadata"].get("namespace"),
        "inferenceService": spec.get("inferenceService"),
        "component": spec.get("component"),
        "desired": spec.get("replicas", 0),
        # Who set ``desired``: Git, or an autoscaler between the bounds (Git's too).
        "countFrom": status.get("replicasFrom") or "Git",
        "minReplicas": spec.get("minReplicas", spec.get("replicas", 0)),
        "maxReplicas": spec.get("maxReplicas", spec.get("replicas", 0)),
        "current": status.get("replicas", 0),
        "ready": status.get("readyReplicas", 0),
        "available": status.get("availableReplicas", 0),
        "updated": status.get("updatedReplicas", 0),
        "serving": status.get("servingReplicas", 0),
        "minReadySeconds": spec.get("minReadySeconds", 0),
        "revision": spec.get("revision"),
        "currentRevision": status.get("currentRevision"),
        "conditions": status.get("conditions") or [],
        "rolloutHold": status.get("rolloutHold"),
        # The canary's current step, while one moves the component (lifecycle/canary.py).
        "canary": status.get("canary"),
        "createdAt": replica["metadata"].get("creationTimestamp"),
    }


def instance_rows(replica: dict, decoded: list[dict] | None = None) -> list[dict[str, Any]]:
    """``instance list -o json``: the Instance rows, whichever encoding stored them
    (``decoded``: the replica's rows, when the caller has decoded them already)."""
    rows = decoded if decoded is not None else \
        decode_rows((replica.get("status") or {}).get("instances"))
    out = []
    for row in sorted(rows, key=lambda r: r.get("index", 0)):
        out.append({
            "index": row.get("index"),
            "incarnation": row.get("incarnation"),
            "phase": row.get("phase"),
            "revision": row.get("revision"),
            "pods": row.get("pods") or [],
            "operation": row.get("operation"),
            "lastFailure": row.get("lastFailure"),
        })
    return out


def age(created: str | None, now: datetime) -> str:
    """kubectl's AGE column: 45s, 5m, 3h, 2d."""
    if not created:
        return ""
    seconds = max(0, int(now.timestamp() - parse_time(created)))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def condition(view: dict, kind: str) -> dict | None:
    for cond in view.get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


# -- events ---------------------------------------------------------------------
WARNING = "Warning"


def event_view(event: dict) -> dict[str, Any]:
    """One Event as ``events -o json`` prints it."""
    involved = event.get("involvedObject") or {}
    return {
        "namespace": (event.get("metadata") or {}).get("namespace"),
        "type": event.get("type"),
        "reason": event.get("reason"),
        "object": {"kind": involved.get("kind"), "name": involved.get("name")},
        "count": event.get("count", 1),
        "firstTimestamp": event.get("firstTimestamp"),
        "lastTimestamp": event.get("lastTimestamp"),
        "message": event.get("message", ""),
    }


def _sort_key(view: dict) -> tuple:
    # Timestamps are RFC3339 in UTC with a Z, so they sort as text; the other
    # fields only break ties, so that the order never depends on list order.
    return (view["lastTimestamp"] or "", view["firstTimestamp"] or "", view["namespace"] or "",
            view["object"]["name"] or "", view["reason"] or "", view["message"])


def sort_events(views: list[dict]) -> list[dict]:
    return sorted(views, key=_sort_key)


def managed_events(cluster: Any) -> list[dict]:
    """Every Event omegitops recorded, as views, oldest first."""
    return sort_events([event_view(e) for e in cluster.list_objects(EVENT, {MANAGED_BY: MANAGER})])


def about_service(view: dict, namespace: str, name: str) -> bool:
    return (view["namespace"] == namespace and view["object"]["kind"] == "InferenceService"
            and view["object"]["name"] == name)


def about_component(view: dict, component: str) -> bool:
    """Whether the message names the component (``OMENative component=engine ...``)."""
    return f"component={component}" in view["message"].split()


def about_instance(view: dict, component: str, index: int) -> bool:
    # The trailing space keeps instance=1 from matching instance=10; the added
    # space lets a message that ends with the index match too.
    return f"component={component} instance={index} " in view["message"] + " "
