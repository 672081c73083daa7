"""Each fault kind, and node loss timing (Ready lost at 40 s, pods deleted 300 s after that)."""

from __future__ import annotations

import pytest
from sim_helpers import NS, condition, container, get, make_pod

from omegitops.cluster.errors import Invalid


@pytest.fixture
def serving(cluster):
    """Pod ``a`` running, ready and in rotation at t = 25 s."""
    cluster.create_pod(make_pod("a"))
    cluster.advance(25)
    cluster.set_pod_condition(NS, "a", "ome.io/serving", True)
    return cluster


def test_crash_keeps_crashing_until_cleared(serving):
    serving.inject_fault("crash", pod="a")
    state = container(serving, "a")
    assert state["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert state["lastState"]["terminated"]["reason"] == "Error"
    assert condition(get(serving, "a"), "Ready")["status"] == "False"
    serving.inject_fault("crash", pod="a", clear=True)
    serving.advance(10 + 5)
    assert container(serving, "a")["ready"] is True
    assert container(serving, "a")["restartCount"] == 1


def test_oom_kills_once_then_the_container_restarts_normally(serving):
    serving.inject_fault("oom", pod="a")
    last = container(serving, "a")["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("OOMKilled", 137)
    serving.advance(600)
    assert container(serving, "a")["restartCount"] == 1
    assert container(serving, "a")["ready"] is True


def test_imagepull_on_a_pod_fails_its_next_pull(cluster):
    cluster.create_pod(make_pod("a"))
    cluster.advance(5)
    cluster.inject_fault("imagepull", pod="a")
    cluster.advance(15)
    assert container(cluster, "a")["state"]["waiting"]["reason"] == "ErrImagePull"
    cluster.create_pod(make_pod("b"))  # other pods pull the same image fine
    cluster.advance(0)
    assert "running" in container(cluster, "b")["state"]


def test_evict_fails_the_pod_and_frees_its_room(serving):
    serving.inject_fault("evict", pod="a")
    pod = get(serving, "a")
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "Evicted")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert condition(pod, "Ready")["status"] == "False"
    serving.advance(3600)
    assert get(serving, "a")["status"]["phase"] == "Failed"  # stays until deleted
    with pytest.raises(Invalid):
        serving.inject_fault("evict", pod="a", clear=True)


def test_unschedulable_cordons_every_node_until_cleared(serving):
    serving.inject_fault("unschedulable", pod="a")
    serving.create_pod(make_pod("b"))
    serving.advance(0)
    assert condition(get(serving, "b"), "PodScheduled")["message"] == (
        "0/8 nodes are available: 8 node(s) were unschedulable.")
    assert "running" in container(serving, "a")["state"]
    serving.inject_fault("unschedulable", clear=True)
    serving.advance(0)
    assert get(serving, "b")["spec"]["nodeName"] == "node-0"


def test_hang_fails_readiness_while_the_container_keeps_running(serving):
    serving.inject_fault("hang", pod="a")
    assert container(serving, "a")["ready"] is False
    assert "running" in container(serving, "a")["state"]
    serving.advance(300)
    assert condition(get(serving, "a"), "Ready")["status"] == "False"
    serving.inject_fault("hang", pod="a", clear=True)
    assert condition(get(serving, "a"), "Ready")["status"] == "True"
    assert container(serving, "a")["restartCount"] == 0


def test_node_down_loses_ready_after_40s_and_deletes_pods_300s_later(serving):
    serving.inject_fault("node-down", pod="a")
    serving.advance(39)
    assert condition(get(serving, "a"), "Ready")["status"] == "True"
    serving.advance(1)
    ready = condition(get(serving, "a"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NodeLost")
    node = serving.get_object("Node", None, "node-0")
    assert condition(node, "Ready")["status"] == "Unknown"
    serving.advance(299)
    assert "deletionTimestamp" not in get(serving, "a")["metadata"]
    serving.advance(1)
    assert get(serving, "a")["metadata"]["deletionTimestamp"] == "2026-09-27T08:06:35Z"
    serving.advance(30)  # the pod's default 30 s grace
    assert get(serving, "a") is None


def test_new_pods_avoid_a_lost_node_and_it_recovers_when_cleared(serving):
    serving.inject_fault("node-down", node="node-0")
    serving.advance(40)
    serving.create_pod(make_pod("b"))
    serving.advance(0)
    assert get(serving, "b")["spec"]["nodeName"] == "node-1"
    serving.inject_fault("node-down", node="node-0", clear=True)
    assert condition(get(serving, "a"), "Ready")["status"] == "True"
    assert condition(serving.get_object("Node", None, "node-0"), "Ready")["status"] == "True"


def test_faults_belong_to_the_pod_uid_not_its_name(serving):
    serving.inject_fault("crash", pod="a")
    serving.delete_pod(NS, "a")
    serving.create_pod(make_pod("a"))
    serving.advance(30)
    assert container(serving, "a")["ready"] is True
