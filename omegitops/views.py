"""Read-side views of what omegitops recorded: replicas, Instances, events.

Shared by ``get irep``, ``instance``, ``events`` and the status report, so
that each shows the same numbers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from omegitops.cluster.times import parse_time
from omegitops.lifecycle.replica import decode_rows


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
        "createdAt": replica["metadata"].get("creationTimestamp"),
    }


def instance_rows(replica: dict) -> list[dict[str, Any]]:
    """``instance list -o json``: the Instance rows, whichever encoding stored them."""
    rows = decode_rows((replica.get("status") or {}).get("instances"))
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
