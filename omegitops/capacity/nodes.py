"""Simulated nodes: their default shape, and what the control plane writes when one goes silent.

Node loss follows the Kubernetes node lifecycle controller, taint manager and
pod garbage collector (PodGC):

- ``NODE_MONITOR_GRACE`` (40 s) after the kubelet last reported, the node's Ready
  condition turns Unknown, it gets the ``node.kubernetes.io/unreachable``
  NoSchedule and NoExecute taints, and its pods' Ready condition turns False;
- pods tolerate ``unreachable:NoExecute`` for 300 s by default (the
  DefaultTolerationSeconds admission plugin), so the taint manager deletes
  them 300 s after the taint, 340 s after the node went silent;
- a deleted pod then stays, Terminating, for as long as the node is silent:
  only its kubelet can confirm that the containers stopped. It goes when the
  node reports again (the kubelet finishes the deletion), when it is deleted
  with a grace of 0 (a force delete), when the node is not Ready and carries
  the ``node.kubernetes.io/out-of-service`` taint (PodGC force-deletes its
  terminating pods), or when the Node object is deleted: PodGC force-deletes
  every pod bound to a node that no longer exists, after a quarantine of
  ``PODGC_QUARANTINE`` (40 s) in which the node could reappear.
"""

from __future__ import annotations

from omegitops.util.times import format_time

NODE_MONITOR_GRACE = 40
DEFAULT_TOLERATION_SECONDS = 300
# PodGC's quarantineTime. It looks every 20 s (gcCheckPeriod), so on a real cluster the
# pods go 40 to 60 s after their node; the simulator takes the lower bound.
PODGC_QUARANTINE = 40
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
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


def has_taint(node: dict, key: str) -> bool:
    return any(t.get("key") == key for t in node["spec"].get("taints") or [])


def no_execute_taints(node: dict) -> list[dict]:
    return [t for t in node["spec"].get("taints") or [] if t.get("effect") == "NoExecute"]


def tolerates(toleration: dict, taint: dict) -> bool:
    """The rules of k8s.io/api/core/v1 Toleration.ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def eviction_delay(pod: dict, taint: dict) -> float | None:
    """How long the pod stays once the NoExecute ``taint`` is on its node: 0 when it does
    not tolerate it, its tolerationSeconds, or None for ever.

    A pod that states no toleration of the not-ready and unreachable taints has the
    DefaultTolerationSeconds admission plugin's 300 s for them.
    """
    matching = [t for t in pod["spec"].get("tolerations") or [] if tolerates(t, taint)]
    if not matching:
        default = taint.get("key") in (UNREACHABLE_TAINT, NOT_READY_TAINT)
        return DEFAULT_TOLERATION_SECONDS if default else 0
    # As the taint manager: the shortest of the stated tolerationSeconds, for ever if none.
    seconds = [t["tolerationSeconds"] for t in matching if t.get("tolerationSeconds") is not None]
    return float(max(0, min(seconds))) if seconds else None
