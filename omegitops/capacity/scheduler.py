"""A small kube-scheduler: first fit in stable node order, with kube's filters and messages.

Filters, in the order kube-scheduler runs them, each node reporting the first
one that fails: NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector
and required node affinity), NodeResourcesFit (cpu, memory, GPUs, pod count).
A pod that fits nowhere gets kube's summary, e.g.
``0/8 nodes are available: 8 Insufficient nvidia.com/gpu.``
With the PodGroup kind installed, a gang is placed as the scheduler-plugins
coscheduling plugin places it: all its pods or none (``Round.place_gang``), with
that plugin's messages.
Pure: it reads node and pod dicts and returns decisions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from omegitops.capacity.nodes import UNSCHEDULABLE_TAINT, is_ready, tolerates
from omegitops.util.quantities import parse_milli

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
POD_SLOT = "pods"
# A host port a pod binds is counted as a resource every node has one of
# ("hostport:TCP/8080"): two pods that bind the same port never share a node, as
# kube-scheduler's NodePorts filter keeps them apart. The host IP is not told apart:
# two pods on one port are kept apart even when they bind different addresses.
HOST_PORT = "hostport:"
ONE = 1000
PORTS_TAKEN = "node(s) didn't have free ports for the requested pod ports"


def is_host_port(name: str) -> bool:
    return name.startswith(HOST_PORT)


def pod_requests(pod: dict) -> dict[str, int]:
    """Milli-unit requests of a pod: containers summed, init containers as their maximum.

    A container's limit counts as its request when it sets no request, as the
    API server defaults it. Every pod also takes one of the node's pod slots, and one of
    each host port it binds (``HOST_PORT``).
    """
    spec = pod.get("spec", {})
    total = _sum(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        for name, amount in _container_requests(init).items():
            total[name] = max(total.get(name, 0), amount)
    total[POD_SLOT] = ONE
    for port in host_ports(spec):
        total[port] = ONE
    return total


def host_ports(spec: dict) -> list[str]:
    """The host ports a pod binds, as ``HOST_PORT`` names. A hostNetwork pod binds each
    container port on the node: the API server defaults its ``hostPort`` to the
    ``containerPort`` (SetDefaults_PodSpec), so a port left without one counts too."""
    ports = set()
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for port in container.get("ports") or []:
            number = port.get("hostPort") or (port.get("containerPort")
                                              if spec.get("hostNetwork") else None)
            if number:
                ports.add(f"{HOST_PORT}{port.get('protocol') or 'TCP'}/{number}")
    return sorted(ports)


def _sum(containers: list[dict]) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in containers:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    return total


def _container_requests(container: dict) -> dict[str, int]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_milli(value) for name, value in merged.items() if name in RESOURCES}


@dataclass
class NodeRoom:
    """A node as the scheduler sees it during one round: what it offers and what is taken."""

    name: str
    node: dict
    allocatable: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, node: dict) -> NodeRoom:
        allocatable = node.get("status", {}).get("allocatable", {})
        return cls(
            name=node["metadata"]["name"],
            node=node,
            allocatable={k: parse_milli(v) for k, v in allocatable.items()},
        )

    def take(self, requests: dict[str, int]) -> None:
        for name, amount in requests.items():
            self.used[name] = self.used.get(name, 0) + amount


def failures(pod: dict, requests: dict[str, int], room: NodeRoom) -> list[str]:
    """Why the pod cannot go on this node: kube's reason strings, empty if it fits."""
    node = room.node
    tolerations = pod["spec"].get("tolerations") or []
    if node["spec"].get("unschedulable") and not _tolerates(
        tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return ["node(s) were unschedulable"]
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    if not is_ready(node):
        return ["node(s) were not ready"]
    if not _matches_selector(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    return _insufficient(requests, room)


def _insufficient(requests: dict[str, int], room: NodeRoom) -> list[str]:
    # NodePorts runs before NodeResourcesFit, and a node reports its first failure.
    if any(is_host_port(name) and room.used.get(name, 0) for name in requests):
        return [PORTS_TAKEN]
    reasons = []
    for name, amount in requests.items():
        if is_host_port(name):
            continue
        if amount and room.used.get(name, 0) + amount > room.allocatable.get(name, 0):
            reasons.append("Too many pods" if name == POD_SLOT else f"Insufficient {name}")
    return reasons


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def _matches_selector(pod: dict, node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    selector = pod["spec"].get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    # Terms are ORed; the expressions inside a term are ANDed.
    return any(
        all(_holds(e, labels) for e in term.get("matchExpressions") or [])
        and all(_holds(e, fields) for e in term.get("matchFields") or [])
        for term in terms
    )


def _holds(expression: dict, values: dict[str, str]) -> bool:
    key: Any = expression.get("key")
    operator = expression.get("operator")
    wanted = expression.get("values") or []
    present = key in values
    match operator:
        case "In":
            return present and values[key] in wanted
        case "NotIn":
            return not present or values[key] not in wanted
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt":
            try:
                actual, bound = int(values[key]), int(wanted[0])
            except (KeyError, IndexError, ValueError):
                return False
            return actual > bound if operator == "Gt" else actual < bound
    return False


def place(pod: dict, requests: dict[str, int], rooms: list[NodeRoom]) -> tuple[NodeRoom | None, str]:
    """The first node the pod fits on, or None and kube's "0/N nodes are available" message."""
    room, _ = _first_fit(pod, requests, rooms, 0)
    return (room, "") if room else (None, unschedulable_message(pod, requests, rooms))


def _first_fit(pod: dict, requests: dict[str, int], rooms: list[NodeRoom],
               start: int) -> tuple[NodeRoom | None, int]:
    for index in range(start, len(rooms)):
        if not failures(pod, requests, rooms[index]):
            return rooms[index], index
    return None, len(rooms)


def unschedulable_message(pod: dict, requests: dict[str, int], rooms: list[NodeRoom]) -> str:
    reasons: Counter[str] = Counter()
    for room in rooms:
        reasons.update(failures(pod, requests, room))
    summary = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    return f"0/{len(rooms)} nodes are available: {summary}."


class Round:
    """One scheduling round over many pods, fast when they share a shape.

    Within a round nodes only fill up, so a node that refused a pod refuses every
    later pod of the same shape (requests and placement rules): each shape keeps
    a cursor past the nodes that refused it, and a shape that fitted nowhere
    fails at once with the same message. 8,000 pods on 1,000 nodes take one
    pass over the nodes per shape instead of one per pod.
    """

    def __init__(self, rooms: list[NodeRoom]) -> None:
        self.rooms = rooms
        self._cursor: dict[str, int] = {}
        self._refused: dict[str, str] = {}
        # While a gang is tried: what it took, to give back if it cannot go whole.
        self._taken: list[tuple[NodeRoom, dict[str, int]]] | None = None

    def place(self, pod: dict, requests: dict[str, int]) -> tuple[NodeRoom | None, str]:
        shape = _shape(pod, requests)
        if shape in self._refused:
            return None, self._refused[shape]
        room, index = _first_fit(pod, requests, self.rooms, self._cursor.get(shape, 0))
        if room is None:
            self._refused[shape] = unschedulable_message(pod, requests, self.rooms)
            return None, self._refused[shape]
        self._cursor[shape] = index
        room.take(requests)
        if self._taken is not None:
            self._taken.append((room, requests))
        return room, ""

    def place_gang(self, gang: Gang, members: list[tuple[dict, dict[str, int]]]
                   ) -> list[tuple[NodeRoom | None, str]]:
        """Place the pending ``members`` of ``gang`` all together or not at all, as the
        coscheduling plugin does: PreFilter refuses every member while the group has
        fewer pods than ``minMember``; Permit lets the members bind only once the
        group's bound pods and those placed now reach ``minMember``, and PostFilter
        rejects the whole group when one of them fits nowhere."""
        if gang.pods < gang.min_member:
            return [(None, (f"0/{len(self.rooms)} nodes are available: pre-filter pod "
                            f"{pod['metadata']['name']} cannot find enough sibling pods, "
                            f"current pods number: {gang.pods}, minMember of group: "
                            f"{gang.min_member}.")) for pod, _ in members]
        cursor, refused = dict(self._cursor), dict(self._refused)
        self._taken = []
        try:
            placed = [self.place(pod, requests) for pod, requests in members]
            taken = self._taken
        finally:
            self._taken = None
        if gang.bound + sum(1 for room, _ in placed if room is not None) >= gang.min_member:
            return placed
        for room, requests in taken:
            for name, amount in requests.items():
                room.used[name] -= amount
        self._cursor, self._refused = cursor, refused
        first, (_, why) = next((pod, outcome) for (pod, _), outcome in zip(members, placed)
                               if outcome[0] is None)
        rejected = (f"PodGroup {gang.name} gets rejected due to Pod {first['metadata']['name']} "
                    "is unschedulable even after PostFilter")
        return [(None, f"{why} {rejected}." if outcome[0] is None else f"{rejected}.")
                for outcome in placed]


@dataclass(frozen=True)
class Gang:
    """A PodGroup as the coscheduling plugin counts it: ``namespace/name``, its
    ``minMember``, the pods that carry its label, and those of them already bound."""

    name: str
    min_member: int
    pods: int
    bound: int


def _shape(pod: dict, requests: dict[str, int]) -> str:
    spec = pod["spec"]
    rules = (sorted(requests.items()), spec.get("tolerations"), spec.get("nodeSelector"),
             spec.get("affinity"))
    return repr(rules)
