"""A node that stops reporting keeps its pods Terminating until it reports again or its
Node object is removed; nothing else removes them. An Instance never stays silent
about it:

- a Ready Instance whose pod is deleted under it (the taint manager's eviction) has
  fewer pods than it needs from that moment (restart-policy.txt): its restart opens at
  the deletion, takes the gang out of rotation, names the Terminating pod and its node
  in ``waiting``, and fails at its deadline;
- a SurgeThenDrain attempt whose surge pod's name is held by such a pod names it and
  fails at its deadline (instances.txt: "OME moves an Instance to Failed when an
  operation can't finish"), the old pod serving on.
"""

from __future__ import annotations

from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.fleet import strategy, write_service
from tests.scenario import Scenario

TIMEOUT = {"instanceReadyTimeout": "10m"}


def node_of(scenario, name):
    (pod,) = [p for p in scenario.pods() if p["metadata"]["name"] == name]
    return pod["spec"]["nodeName"]


def silence(scenario, pod):
    node = node_of(scenario, pod)
    with SimCluster(scenario.path) as cluster:
        cluster.inject_fault("node-down", node=node)
    scenario.strict_gangs = False
    return node


def run_for(scenario, seconds, step=20):
    for _ in range(int(seconds // step)):
        scenario.run_pass()
        scenario.advance(step)
    return scenario.run_pass()


def gang_with_a_silent_worker_node(tmp_path):
    """A one-gang service at rest, the leader and its worker on nodes of their own (one
    GPU a node), then the worker's node silenced: (scenario, that node)."""
    repo = write_service(tmp_path / "repo", replicas=1, workers=1,
                         lifecycle={**strategy(maxUnavailable=1), **TIMEOUT})
    scenario = Scenario(tmp_path, repo, nodes=3, gpus=1)
    scenario.until_idle()
    return scenario, silence(scenario, "svc-engine-0-worker-0")


def test_a_gang_whose_worker_node_goes_silent_restarts_and_says_why(tmp_path):
    scenario, node = gang_with_a_silent_worker_node(tmp_path)
    run_for(scenario, 360)  # NotReady at 40 s, evicted at 340 s, Terminating since
    worker = [p for p in scenario.pods() if p["metadata"]["name"] == "svc-engine-0-worker-0"]
    assert worker and P.is_terminating(worker[0])
    (row,) = scenario.rows("svc-engine")
    assert row["phase"] == "Restarting", row
    assert [e for e in scenario.events("RestartTriggered")
            if "svc-engine-0-worker-0 is being deleted on node " + node in e["message"]]
    leader = [p for p in scenario.pods() if "leader" in p["metadata"]["name"]]
    assert not any(P.gate_set(p) and not P.is_terminating(p) for p in leader), \
        "the leader of a gang that lost a worker stays out of rotation"
    # Past the pod's deletion grace: named, with its node.
    run_for(scenario, 60)
    (row,) = scenario.rows("svc-engine")
    assert "svc-engine-0-worker-0 on node " + node in row["operation"]["waiting"]
    assert "still terminating past its deletion grace" in row["operation"]["waiting"]
    # At the deadline: Failed, with the pod and node in the failure.
    run_for(scenario, 600, step=60)
    (row,) = scenario.rows("svc-engine")
    assert row["phase"] == "Failed", row
    assert row["lastFailure"]["reason"] == "PodStuckTerminating"
    assert node in row["lastFailure"]["message"]
    assert scenario.events("RestartFailed")


def test_a_gang_rebuilds_once_the_silent_node_is_removed(tmp_path):
    scenario, node = gang_with_a_silent_worker_node(tmp_path)
    run_for(scenario, 420)
    with SimCluster(scenario.path) as cluster:
        cluster.inject_fault("node-removed", node=node)
    scenario.until_idle()
    (row,) = scenario.rows("svc-engine")
    assert row["phase"] == "Ready"
    assert len([p for p in scenario.pods() if not P.is_terminating(p)]) == 2


def test_a_surge_retry_held_by_a_lost_pods_name_is_named_and_fails_at_its_deadline(tmp_path):
    lifecycle = {**strategy(maxSurge=1, maxUnavailable=0), **TIMEOUT}
    repo = write_service(tmp_path / "repo", replicas=1, lifecycle=lifecycle)
    scenario = Scenario(tmp_path, repo, nodes=3, gpus=1)
    scenario.until_idle()
    write_service(repo, replicas=1, lifecycle=lifecycle, image="sglang:v2")
    scenario.until(lambda s: any(p["metadata"]["name"] == "svc-engine-0-default-1"
                                 and p["spec"].get("nodeName") for p in s.pods()))
    node = silence(scenario, "svc-engine-0-default-1")
    # The first attempt fails at its deadline; its pod, deleted, stays Terminating.
    run_for(scenario, 900, step=30)
    held = [p for p in scenario.pods() if p["metadata"]["name"] == "svc-engine-0-default-1"]
    assert held and P.is_terminating(held[0])
    # Every later attempt waits for the name: named, and failed at its own deadline.
    seen_waiting = []
    for _ in range(120):
        scenario.run_pass()
        (row,) = [r for r in scenario.rows("svc-engine") if r["index"] == 0]
        if (row.get("operation") or {}).get("waiting"):
            seen_waiting.append(row["operation"]["waiting"])
        scenario.advance(60)
    assert any("svc-engine-0-default-1 on node " + node in w for w in seen_waiting)
    failures = [e for e in scenario.events("UpdateFailed") if "PodStuckTerminating" in
                e["message"]]
    assert failures, [e["message"] for e in scenario.events("UpdateFailed")]
    # The old pod served throughout.
    old = [p for p in scenario.pods() if p["metadata"]["name"] == "svc-engine-0-default-0"]
    assert old and P.is_ready(old[0])
