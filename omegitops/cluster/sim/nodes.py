"""Simulated nodes: their default shape, and what the control plane writes when one goes silent.

Node loss follows the Kubernetes node lifecycle controller and taint manager:

- ``NODE_MONITOR_GRACE`` (40 s) after the kubelet last reported, the node's Ready
  condition turns Unknown, it gets the ``node.kubernetes.io/unreachable``
  NoSchedule and NoExecute taints, and its pods' Ready condition turns False;
- pods tolerate ``unreachable:NoExecute`` for 300 s by default (the
  DefaultTolerationSeconds admission plugin), so the taint manager deletes
  them 300 s after the taint, 340 s after the node went silent.
"""

from __future__ import annotations

from omegitops.cluster.times import format_time

NODE_MONITOR_GRACE = 40
DEFAULT_TOLERATION_SECONDS = 300
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
GPU = "nvidia.com/gpu"


def node_name(index: int) -> str:
    return f"node-{index}"


def make_node(index: int, gpus: int) -> dict:
    """One GPU node like the ones OME runs on: 128 cpu, 2048Gi, ``gpus`` GPUs, tainted for GPUs."""
    name = node_name(index)
    resources = {"cpu": "128", "memory": "2048Gi", GPU: str(gpus), "pods": "110"}
    taints = [{"key": GPU, "value": "present", "effect": "NoSchedule"}] if gpus else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **({"nvidia.com/gpu.present": "true"} if gpus else {}),
            },
            "annotations": {},
        },
        "spec": {"taints": taints},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [],
            "addresses": [
                {"type": "InternalIP", "address": f"192.168.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def set_ready(node: dict, ready: bool, now: float) -> None:
    """The node's Ready condition: True while its kubelet reports, Unknown once it went silent."""
    if ready:
        status, reason, message = "True", "KubeletReady", "kubelet is posting ready status"
    else:
        status, reason, message = "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    conditions = node["status"].setdefault("conditions", [])
    for condition in conditions:
        if condition["type"] == "Ready":
            if condition["status"] != status:
                condition["lastTransitionTime"] = format_time(now)
            condition.update(status=status, reason=reason, message=message)
            condition["lastHeartbeatTime"] = format_time(now)
            return
    conditions.append({
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": format_time(now), "lastTransitionTime": format_time(now),
    })


def is_ready(node: dict) -> bool:
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def set_unreachable_taints(node: dict, present: bool) -> None:
    taints = [t for t in node["spec"].get("taints", []) if t.get("key") != UNREACHABLE_TAINT]
    if present:
        taints += [
            {"key": UNREACHABLE_TAINT, "effect": "NoSchedule"},
            {"key": UNREACHABLE_TAINT, "effect": "NoExecute"},
        ]
    node["spec"]["taints"] = taints


def set_cordoned(node: dict, cordoned: bool) -> None:
    """``kubectl cordon``: spec.unschedulable and the matching taint the node controller adds."""
    taints = [t for t in node["spec"].get("taints", []) if t.get("key") != UNSCHEDULABLE_TAINT]
    if cordoned:
        node["spec"]["unschedulable"] = True
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    else:
        node["spec"].pop("unschedulable", None)
    node["spec"]["taints"] = taints


def unreachable_toleration_seconds(pod: dict) -> float | None:
    """How long the pod stays on an unreachable node: 300 s by default, None for ever."""
    for toleration in pod["spec"].get("tolerations") or []:
        if toleration.get("effect") not in (None, "", "NoExecute"):
            continue
        key = toleration.get("key")
        if key == UNREACHABLE_TAINT or (not key and toleration.get("operator") == "Exists"):
            seconds = toleration.get("tolerationSeconds")
            return None if seconds is None else float(seconds)
    return DEFAULT_TOLERATION_SECONDS
