"""A simulated cluster sized to a repository, so that a forecast never reports a
failure only the simulator would have (pods that no node of a default cluster
can hold, or a node selector that no default node matches).

``size_for(pods)`` is pure: it takes the pods a fleet needs at its peak (every
Instance plus the surge its budget allows) and returns node pools, each a set
of identical nodes labelled to match what their pods select, large enough for
them by first-fit decreasing packing, plus one spare node per pool for the
scheduler's own first-fit order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegitops.capacity.nodes import GPU, tolerates
from omegitops.capacity.scheduler import ONE, POD_SLOT, is_host_port, pod_requests
from omegitops.util.quantities import parse_milli

# A node of the default pools (nodes.make_node): what it offers, in milli-units.
NODE_CPU = parse_milli("128")
NODE_MEMORY = parse_milli("2048Gi")
NODE_PODS = 110 * 1000
DEFAULT_GPUS = 8
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodePool:
    """``nodes`` identical nodes with ``gpus`` GPUs each and ``labels`` beside the usual."""

    nodes: int
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    tainted: bool = False


def selected_labels(pod: dict) -> dict[str, str]:
    """Node labels that satisfy the pod's nodeSelector and its first required
    node-affinity term (an ``In`` takes its first value, ``Exists`` any value; the
    negative operators are met by a label's absence)."""
    spec = pod.get("spec") or {}
    labels = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    for expression in (terms[0].get("matchExpressions") or []) if terms else []:
        key, operator = expression.get("key"), expression.get("operator")
        values = [str(v) for v in expression.get("values") or []]
        if not key or key == "kubernetes.io/hostname":
            continue  # a node of its own, such as a retry steered off one: any will do
        if operator == "In" and values:
            labels[key] = values[0]
        elif operator == "Exists":
            labels.setdefault(key, "true")
        elif operator in ("Gt", "Lt") and values and values[0].lstrip("-").isdigit():
            labels[key] = str(int(values[0]) + (1 if operator == "Gt" else -1))
    return labels


def _tolerates_gpu_taint(pod: dict) -> bool:
    return any(tolerates(t, GPU_TAINT) for t in (pod.get("spec") or {}).get("tolerations") or [])


def size_for(pods: list[dict]) -> list[NodePool]:
    """Node pools that hold ``pods`` all at once; pure."""
    groups: dict[tuple, list[dict]] = {}
    for pod in pods:
        requests = pod_requests(pod)
        key = (tuple(sorted(selected_labels(pod).items())), requests.get(GPU, 0) > 0)
        groups.setdefault(key, []).append({"requests": requests, "pod": pod})
    pools = []
    for (labels, gpu), members in sorted(groups.items()):
        gpus = max([DEFAULT_GPUS] + [-(-m["requests"].get(GPU, 0) // 1000) for m in members])
        if not gpu:
            gpus = 0
        nodes = _packed_nodes([m["requests"] for m in members], gpus)
        tainted = gpu and all(_tolerates_gpu_taint(m["pod"]) for m in members)
        pools.append(NodePool(nodes + 1, gpus, dict(labels), tainted))
    return pools


def _packed_nodes(requests: list[dict[str, int]], gpus: int) -> int:
    """Nodes first-fit decreasing packing needs for ``requests``."""
    capacity = {"cpu": NODE_CPU, "memory": NODE_MEMORY, GPU: gpus * 1000, POD_SLOT: NODE_PODS}
    order = sorted(requests, key=lambda r: tuple(r.get(k, 0) for k in (GPU, "cpu", "memory")),
                   reverse=True)
    free: list[dict[str, int]] = []
    for request in order:
        for room in free:
            if all(room.get(k, ONE if is_host_port(k) else 0) >= v for k, v in request.items()
                   if k in capacity or is_host_port(k)):
                break
        else:
            room = dict(capacity)
            free.append(room)
        for k, v in request.items():
            if k in room or is_host_port(k):
                room[k] = room.get(k, ONE) - v
    return len(free)


# Kubernetes' documented limit: a cluster of at most 5,000 nodes.
MAX_CLUSTER_NODES = 5000


def node_for(requests: dict[str, int]) -> dict[str, int]:
    """What a node of the pools ``size_for`` makes offers a pod of ``requests``: the
    default node, with as many GPUs as the pod asks when that is more than eight."""
    gpus = max(DEFAULT_GPUS, -(-requests.get(GPU, 0) // 1000))
    return {"cpu": NODE_CPU, "memory": NODE_MEMORY, GPU: gpus * 1000, POD_SLOT: NODE_PODS}


def short_of(requests: dict[str, int]) -> list[str]:
    """The resources a pod asks more of than any node ``size_for`` makes holds."""
    node = node_for(requests)
    return [name for name in ("cpu", "memory") if requests.get(name, 0) > node[name]]


def nodes_for(requests: dict[str, int], count: int) -> int:
    """Nodes of ``node_for(requests)`` that ``count`` such pods need (each fits one)."""
    node = node_for(requests)
    per_node = min(node[name] // amount for name, amount in requests.items()
                   if amount and name in node)
    if any(is_host_port(name) for name in requests):
        per_node = 1  # a host port is bound once on a node
    return -(-count // max(per_node, 1))
