"""Pods on the host network, on both backends (``tests/backends.py``): the simulated
cluster schedules them as the real API server and scheduler do.

The API server defaults a hostNetwork pod's ``hostPort`` to its ``containerPort``, and
kube-scheduler's NodePorts filter keeps two pods that bind one host port off one node;
with more such Instances than nodes, the last waits, unschedulable, and says why.
"""

from __future__ import annotations

from omegitops.capacity.scheduler import PORTS_TAKEN
from tests.backends import NAME, rows

NODES = 8  # GPU nodes, on both backends


def _unscheduled(pod: dict) -> str | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message") or ""
    return None


def test_host_network_instances_take_a_node_each_and_the_one_too_many_waits(backend):
    scenario = backend.scenario(replicas=NODES + 1, host_port=8080)
    scenario.until(lambda s: sum(row["phase"] == "Ready" for row in rows(s).values()) == NODES
                   and any(_unscheduled(pod) for pod in s.pods(NAME)), seconds=180)
    pods = scenario.pods(NAME)
    bound = [pod for pod in pods if pod["spec"].get("nodeName")]
    assert len(bound) == NODES
    assert len({pod["spec"]["nodeName"] for pod in bound}) == NODES  # one a node
    assert all(port.get("hostPort") == 8080 for pod in pods
               for port in pod["spec"]["containers"][0]["ports"])  # defaulted
    (waiting,) = [pod for pod in pods if not pod["spec"].get("nodeName")]
    message = _unscheduled(waiting)
    assert f"{NODES} {PORTS_TAKEN}" in message, message

