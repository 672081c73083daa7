"""Host ports keep pods apart, as kube-scheduler's NodePorts filter does.

A real API server defaults a hostNetwork pod's ``hostPort`` to its ``containerPort``,
and the scheduler never puts two pods that bind one host port on one node. The
catalogue's RDMA and prefill/decode runtimes run on the host network, so sizing and
forecasts must count a node per such pod.
"""

from __future__ import annotations

from omegitops.capacity import sizing
from omegitops.capacity.scheduler import (
    PORTS_TAKEN,
    NodeRoom,
    Round,
    host_ports,
    place,
    pod_requests,
)


def _node(name: str) -> dict:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {"metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, host_network: bool = True, host_port: int | None = None) -> dict:
    port = {"containerPort": 8080, **({"hostPort": host_port} if host_port else {})}
    return {"metadata": {"name": name},
            "spec": {"hostNetwork": host_network,
                     "containers": [{"name": "main", "ports": [port],
                                     "resources": {"requests": {"cpu": "1"}}}]}}


def test_a_host_network_pod_binds_its_container_ports():
    assert host_ports(_pod("a")["spec"]) == ["hostport:TCP/8080"]
    assert host_ports(_pod("b", host_network=False)["spec"]) == []
    assert host_ports(_pod("c", host_network=False, host_port=9000)["spec"]) == [
        "hostport:TCP/9000"]


def test_two_pods_on_one_host_port_never_share_a_node():
    rooms = [NodeRoom.of(_node("node-1")), NodeRoom.of(_node("node-2"))]
    scheduler = Round(rooms)
    placed = [scheduler.place(pod, pod_requests(pod))
              for pod in (_pod("a"), _pod("b"), _pod("c"))]
    assert [room.name if room else None for room, _ in placed] == ["node-1", "node-2", None]
    assert placed[2][1] == f"0/2 nodes are available: 2 {PORTS_TAKEN}."


def test_other_pods_still_share_the_node():
    rooms = [NodeRoom.of(_node("node-1"))]
    first = _pod("a")
    rooms[0].take(pod_requests(first))
    other = _pod("b", host_network=False)
    assert place(other, pod_requests(other), rooms)[0] is rooms[0]


def test_sizing_counts_a_node_for_each_pod_on_one_host_port():
    requests = pod_requests(_pod("a"))
    assert sizing.nodes_for(requests, 3) == 3
    assert sizing.nodes_for(pod_requests(_pod("b", host_network=False)), 3) == 1
