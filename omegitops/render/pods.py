"""Reading observed pods: pure helpers over Kubernetes pod dicts."""

from __future__ import annotations

from typing import Any, cast

from omegitops.model.state import Json
from omegitops.render.templates import (
    LABEL_INCARNATION,
    LABEL_INDEX,
    LABEL_REVISION,
    LABEL_RUNNER,
    MAIN_CONTAINER,
    SERVING_GATE,
)
from omegitops.util.times import parse_time


def condition(pod: Json, kind: str) -> tuple[bool, float | None]:
    """(status is True, lastTransitionTime in epoch seconds) of a pod condition."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            when = cond.get("lastTransitionTime")
            return cond.get("status") == "True", parse_time(when) if when else None
    return False, None


def is_terminating(pod: Json) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def deletion_deadline(pod: Json) -> float | None:
    when = pod["metadata"].get("deletionTimestamp")
    return parse_time(when) if when else None


def has_ended(pod: Json) -> bool:
    """Phase Failed or Succeeded: the kubelet will not run it again."""
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def containers_ready(pod: Json) -> bool:
    return not is_terminating(pod) and condition(pod, "ContainersReady")[0]


def is_ready(pod: Json) -> bool:
    """Ready, and so in rotation: containers ready and every readiness gate True."""
    return not is_terminating(pod) and condition(pod, "Ready")[0]


def gate_set(pod: Json) -> bool:
    return condition(pod, SERVING_GATE)[0]


def index_of(pod: Json) -> int | None:
    try:
        return int(pod["metadata"]["labels"][LABEL_INDEX])
    except (KeyError, TypeError, ValueError):
        return None


def incarnation_of(pod: Json) -> int:
    try:
        return int(pod["metadata"]["labels"][LABEL_INCARNATION])
    except (KeyError, TypeError, ValueError):
        return 0


def runner_of(pod: Json) -> str:
    # A label value is a string: the API server refuses any other.
    return cast(str, pod["metadata"].get("labels", {}).get(LABEL_RUNNER, ""))


def revision_of(pod: Json) -> str:
    # A label value is a string: the API server refuses any other.
    return cast(str, pod["metadata"].get("labels", {}).get(LABEL_REVISION, ""))


def ordinal_of(pod: Json) -> int:
    """The trailing number of ``{isvc}-{component}-{index}-{runner}-{ordinal}``."""
    try:
        return int(pod["metadata"]["name"].rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def restarts(pod: Json, container: str = MAIN_CONTAINER) -> int:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return int(status.get("restartCount") or 0)
    return 0


def node_of(pod: Json) -> str | None:
    return (pod.get("spec") or {}).get("nodeName")


def pod_row(pod: Json) -> dict[str, Any]:
    """The pod entry of an Instance status row."""
    return {
        "name": pod["metadata"]["name"],
        "runner": runner_of(pod),
        "ordinal": ordinal_of(pod),
        "ready": is_ready(pod),
        "serving": is_ready(pod) and gate_set(pod),
        "restarts": restarts(pod),
        "node": node_of(pod),
    }
