"""Pure helpers for core/v1 Events and pod conditions: names, bodies and patches."""

from __future__ import annotations

import hashlib
from datetime import datetime

from omegitops.cluster.sequences import SEQUENCE_ANNOTATION
from omegitops.util.times import format_time


def kube_time(moment: datetime) -> str:
    """A metav1.Time: RFC3339 in whole seconds, as the API server writes it."""
    return format_time(int(moment.timestamp()))


def micro_time(moment: datetime) -> str:
    """A metav1.MicroTime (Lease times): always six fractional digits."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_identity(event: dict) -> tuple[str, ...]:
    """What makes two events "the same" for aggregation, as the simulator counts it."""
    io = event.get("involvedObject") or {}
    parts = (io.get("kind"), io.get("namespace"), io.get("name"), io.get("uid"),
             event.get("type") or "Normal", event.get("reason"), event.get("message"))
    return tuple("" if part is None else str(part) for part in parts)


def event_name(event: dict) -> str:
    """``{involved name}.{16 hex}``: a repeat finds its Event by name, with one GET."""
    digest = hashlib.sha256("\x1f".join(event_identity(event)).encode()).hexdigest()[:16]
    return f"{event['involvedObject']['name']}.{digest}"


def new_event(event: dict, namespace: str, now: datetime) -> dict:
    """The first Event of its kind: count 1, first and last timestamp now."""
    stamp = kube_time(now)
    body = {key: value for key, value in event.items() if key != "metadata"}
    body.update(apiVersion="v1", kind="Event", count=1, firstTimestamp=stamp,
                lastTimestamp=stamp)
    body.setdefault("type", "Normal")
    body.setdefault("source", {"component": "omegitops"})
    body.setdefault("reportingComponent", body["source"].get("component", "omegitops"))
    body["metadata"] = {**(event.get("metadata") or {}), "name": event_name(event),
                        "namespace": namespace}
    return body


def repeat_patch(stored: dict, event: dict, now: datetime) -> dict:
    """The merge patch that counts one more occurrence, as kubectl shows ``(x3 over 5m)``,
    and records the outbox entry it counts (``omegitops.cluster.sequences``)."""
    patch: dict = {"count": int(stored.get("count") or 1) + 1, "lastTimestamp": kube_time(now)}
    value = ((event.get("metadata") or {}).get("annotations") or {}).get(SEQUENCE_ANNOTATION)
    if value is not None:
        patch["metadata"] = {"annotations": {SEQUENCE_ANNOTATION: value}}
    return patch


def condition_patch(pod: dict, type: str, status: bool, reason: str, message: str,
                    now: datetime) -> dict | None:
    """The strategic merge patch of ``status.conditions`` (merge key ``type``), or None when
    the pod already has that condition as asked. lastTransitionTime moves only when the
    status flips, as the kubelet does for its own conditions."""
    wanted = "True" if status else "False"
    current = next((c for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == type), None)
    if current is not None and (current.get("status"), current.get("reason", ""),
                                current.get("message", "")) == (wanted, reason, message):
        return None
    condition = {"type": type, "status": wanted, "reason": reason, "message": message}
    if current is None or current.get("status") != wanted:
        condition["lastTransitionTime"] = kube_time(now)
    return {"status": {"conditions": [condition]}}


def images_patch(images: dict[str, str], labels: dict[str, str] | None = None) -> dict:
    """The strategic merge patch of ``spec.containers[name].image`` (merge key ``name``)
    and of ``metadata.labels``, so the revision label moves with the images at once."""
    patch: dict = {}
    if labels:
        patch["metadata"] = {"labels": dict(sorted(labels.items()))}
    if images:
        patch["spec"] = {"containers": [{"name": name, "image": image}
                                        for name, image in sorted(images.items())]}
    return patch
