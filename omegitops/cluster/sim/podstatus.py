"""Render a pod's Kubernetes status from the simulator's records.

The kubelet writes phase, conditions (PodScheduled, Initialized,
ContainersReady, Ready) and container statuses; other conditions, such as the
``ome.io/serving`` readiness gate, belong to whoever set them and are kept.
A pod is Ready only when all its containers are ready and every readiness
gate has a True condition.
"""

from __future__ import annotations

from omegitops.cluster.sim.kubelet import (
    COMPLETED,
    CRASHED,
    DONE,
    PULL_FAILED,
    PULLING,
    RUNNING,
    WAITING,
)
from omegitops.util.times import format_time

KUBELET_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready", "DisruptionTarget")


def go_duration(seconds: float) -> str:
    """Go's time.Duration text as kubelet messages print it: ``10s``, ``5m0s``."""
    whole = int(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def render_unscheduled(pod: dict, rec: dict, now: float, reason: str = "Unschedulable") -> None:
    """A pod the scheduler has not placed: Pending, with why (once it has been tried)."""
    status = pod.setdefault("status", {})
    status["phase"] = "Pending"
    if rec["tried"]:
        set_condition(status, "PodScheduled", False, now, reason, rec["message"])


def render(pod: dict, rec: dict, now: float, lost_node: str | None = None) -> None:
    """Write the status of a bound pod as of ``now``.

    ``lost_node`` names the pod's node when the control plane has noticed it
    stopped reporting: Ready turns False, as the node lifecycle controller does.
    """
    status = pod.setdefault("status", {})
    name = pod["metadata"]["name"]
    inits_done = rec["init"] >= len(rec["inits"])
    status["phase"] = _phase(rec)
    status["hostIP"] = rec.get("hostIP", "")
    if rec["ip"]:
        status["podIP"] = rec["ip"]
        status["podIPs"] = [{"ip": rec["ip"]}]
    if rec["startTime"] is not None:
        status["startTime"] = format_time(rec["startTime"])
    if rec["evicted"]:
        status["reason"] = "Evicted"
        status["message"] = rec["evicted"]["message"]

    context = f"{name}_{pod['metadata'].get('namespace', '')}({pod['metadata'].get('uid', '')})"
    if rec["inits"]:
        status["initContainerStatuses"] = [
            _container_status(c, now, inits_done, context) for c in rec["inits"]
        ]
    status["containerStatuses"] = [
        _container_status(c, now, inits_done, context) for c in rec["containers"]
    ]

    set_condition(status, "PodScheduled", True, now)
    unfinished = [c["name"] for c in rec["inits"] if c["phase"] != COMPLETED]
    if inits_done or not unfinished:
        set_condition(status, "Initialized", True, now)
    else:
        set_condition(status, "Initialized", False, now, "ContainersNotInitialized",
                       f"containers with incomplete status: [{' '.join(unfinished)}]")

    unready = [s["name"] for s in status["containerStatuses"] if not s["ready"]]
    if unready:
        reason = "PodCompleted" if status["phase"] in ("Succeeded", "Failed") else (
            "ContainersNotReady")
        message = f"containers with unready status: [{' '.join(unready)}]"
        set_condition(status, "ContainersReady", False, now, reason, message)
    else:
        set_condition(status, "ContainersReady", True, now)

    if lost_node:
        set_condition(status, "Ready", False, now, "NodeLost",
                       f"node {lost_node} stopped reporting status")
    elif unready:
        set_condition(status, "Ready", False, now, reason, message)
    else:
        gate = _blocking_gate(pod, status)
        if gate:
            set_condition(status, "Ready", False, now, "ReadinessGatesNotReady", gate)
        else:
            set_condition(status, "Ready", True, now)
    if rec["evicted"]:
        set_condition(status, "DisruptionTarget", True, now, "TerminationByKubelet",
                       rec["evicted"]["message"])


def _phase(rec: dict) -> str:
    if rec["evicted"]:
        return "Failed"
    containers = rec["containers"]
    if rec["terminating"] is not None and all(c["phase"] in DONE for c in rec["inits"] + containers):
        ok = all((c["exit"] or {}).get("exitCode") == 0 for c in containers)
        return "Succeeded" if ok else "Failed"
    if all(c["everStarted"] for c in containers):
        return "Running"
    return "Pending"


def _blocking_gate(pod: dict, status: dict) -> str:
    """Kube's message for the first readiness gate whose condition is not True, or ""."""
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    for gate in pod["spec"].get("readinessGates") or []:
        kind = gate.get("conditionType")
        condition = conditions.get(kind)
        if condition is None:
            return f"corresponding condition of pod readiness gate \"{kind}\" does not exist."
        if condition.get("status") != "True":
            return (f"the status of pod readiness gate \"{kind}\" is not \"True\", "
                    f"but {condition.get('status')}")
    return ""


def _container_status(c: dict, now: float, inits_done: bool, context: str) -> dict:
    phase = c["phase"]
    running = phase == RUNNING
    entry = {
        "name": c["name"],
        "image": c["image"],
        "imageID": c["image"] if c["everStarted"] else "",
        "ready": running and c["readyAt"] is not None and c["readyAt"] <= now,
        "started": running and c["startupAt"] is not None and c["startupAt"] <= now,
        "restartCount": c["restarts"],
        "state": _state(c, now, inits_done, context),
        "lastState": {},
    }
    if c["everStarted"]:
        entry["containerID"] = f"sim://{context}-{c['name']}-{c['restarts']}"
    if c.get("startupAt") is None and running:
        entry["started"] = True  # init containers have no probes
    last = c["exit"] if phase in (CRASHED, PULLING, PULL_FAILED) and c["exit"] else c["last"]
    if last and phase not in DONE:
        entry["lastState"] = {"terminated": _terminated(last)}
    return entry


def _state(c: dict, now: float, inits_done: bool, context: str) -> dict:
    phase = c["phase"]
    if phase == RUNNING:
        return {"running": {"startedAt": format_time(c["since"])}}
    if phase in DONE:
        return {"terminated": _terminated(c["exit"] or {})}
    if phase == CRASHED:
        message = (f"back-off {go_duration(c['backoff'])} restarting failed "
                   f"container={c['name']} pod={context}")
        return {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    if phase == PULL_FAILED:
        if now < c["since"] + 1:
            message = f"failed to pull and unpack image \"{c['image']}\": not found"
            return {"waiting": {"reason": "ErrImagePull", "message": message}}
        return {"waiting": {"reason": "ImagePullBackOff",
                            "message": f"Back-off pulling image \"{c['image']}\""}}
    if phase == PULLING or (phase == WAITING and inits_done):
        return {"waiting": {"reason": "ContainerCreating"}}
    return {"waiting": {"reason": "PodInitializing"}}


def _terminated(exit: dict) -> dict:
    out = {"exitCode": exit.get("exitCode", 0), "reason": exit.get("reason", "")}
    if exit.get("message"):
        out["message"] = exit["message"]
    for key in ("startedAt", "finishedAt"):
        if exit.get(key) is not None:
            out[key] = format_time(exit[key])
    return out


def set_condition(status: dict, kind: str, value: bool, now: float, reason: str = "",
                  message: str = "") -> None:
    """Set one pod condition; lastTransitionTime moves only when the status flips."""
    text = "True" if value else "False"
    conditions = status.setdefault("conditions", [])
    for condition in conditions:
        if condition["type"] == kind:
            if condition["status"] != text:
                condition["lastTransitionTime"] = format_time(now)
                condition["status"] = text
            _set_text(condition, reason, message)
            return
    condition = {"type": kind, "status": text, "lastProbeTime": None,
                 "lastTransitionTime": format_time(now)}
    _set_text(condition, reason, message)
    conditions.append(condition)


def _set_text(condition: dict, reason: str, message: str) -> None:
    for key, value in (("reason", reason), ("message", message)):
        if value:
            condition[key] = value
        else:
            condition.pop(key, None)
