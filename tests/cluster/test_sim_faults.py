"""Each fault kind, and node loss: Ready lost at 40 s, pods deleted 300 s after that and
kept Terminating until the node reports again, is removed (PodGC) or they are force-deleted."""

from __future__ import annotations

import pytest
from sim_helpers import GPU_TOLERATION, NS, condition, container, get, make_pod

from omegitops.cluster.errors import Invalid, NotFound


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


def test_a_pod_deleted_on_a_silent_node_stays_terminating_while_the_node_is_silent(serving):
    """No kubelet confirms that its containers stopped, so the API server keeps it."""
    serving.inject_fault("node-down", pod="a")
    serving.advance(340 + 30)  # deleted by the taint manager, and past its 30 s grace
    serving.advance(3600)
    pod = get(serving, "a")
    assert pod["metadata"]["deletionTimestamp"] == "2026-09-27T08:06:35Z"
    assert pod["status"]["phase"] == "Running"
    assert condition(pod, "Ready")["status"] == "False"
    assert serving.next_transition_at() is None  # nothing will change by itself
    serving.delete_pod(NS, "a")  # a second graceful delete changes nothing
    assert get(serving, "a")["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]


def test_the_kubelet_finishes_the_deletion_with_its_whole_grace_when_it_reports_again(cluster):
    cluster.create_pod(make_pod("a", annotations={"sim.omegitops.io/exit-seconds": "10"}))
    cluster.advance(25)
    cluster.inject_fault("node-down", pod="a")
    cluster.advance(400)
    assert get(cluster, "a")["metadata"]["deletionTimestamp"]
    cluster.inject_fault("node-down", node="node-0", clear=True)
    # The kubelet learns of the deletion now: SIGTERM, and 10 s to exit within 30 s of grace.
    cluster.advance(9)
    assert get(cluster, "a") is not None
    cluster.advance(1)
    assert get(cluster, "a") is None


def test_a_force_delete_removes_a_pod_on_a_silent_node_at_once(serving):
    serving.create_pod(make_pod("b"))
    serving.advance(25)
    serving.inject_fault("node-down", node="node-0")
    serving.advance(10)
    serving.delete_pod(NS, "b")
    serving.advance(60)
    assert get(serving, "b")["metadata"]["deletionGracePeriodSeconds"] == 30
    serving.delete_pod(NS, "b", grace_seconds=0)
    assert get(serving, "b") is None
    serving.advance(400)
    serving.delete_pod(NS, "a", grace_seconds=0)  # one the taint manager deleted
    assert get(serving, "a") is None


def test_a_removed_node_s_pods_go_after_podgc_s_quarantine(serving):
    serving.create_pod(make_pod("b"))
    serving.advance(25)
    serving.inject_fault("node-down", pod="a")
    serving.advance(340)
    assert serving.inject_fault("node-removed", pod="a") == (
        "node node-0 removed; PodGC deletes its pods in 40 s")
    assert serving.get_object("Node", None, "node-0") is None
    serving.advance(39)
    assert get(serving, "a") is not None and get(serving, "b") is not None
    serving.advance(1)
    # Every pod bound to the node goes, terminating or not: force-deleted.
    assert get(serving, "a") is None and get(serving, "b") is None
    assert serving.next_transition_at() is None


def test_a_node_removed_while_it_reports_keeps_its_pods_ready_until_podgc(serving):
    """Its machine is gone, but no node controller looks at a Node that no longer exists."""
    serving.inject_fault("node-removed", node="node-0")
    serving.advance(39)
    assert condition(get(serving, "a"), "Ready")["status"] == "True"
    assert "deletionTimestamp" not in get(serving, "a")["metadata"]
    serving.create_pod(make_pod("b"))
    serving.advance(1)
    assert get(serving, "a") is None
    assert get(serving, "b")["spec"]["nodeName"] == "node-1"
    assert len(serving.list_objects("Node")) == 7


def test_a_removed_node_cannot_come_back_or_be_removed_twice(serving):
    serving.inject_fault("node-removed", node="node-0")
    with pytest.raises(NotFound):
        serving.inject_fault("node-down", node="node-0", clear=True)
    with pytest.raises(NotFound):
        serving.inject_fault("node-removed", node="node-0")
    with pytest.raises(Invalid):
        serving.inject_fault("node-removed", node="node-1", clear=True)


def test_a_node_of_the_removed_one_s_name_takes_its_pods_before_podgc(serving):
    node = serving.get_object("Node", None, "node-0")
    serving.inject_fault("node-removed", node="node-0")
    serving.advance(20)
    serving.create_object({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node-0", "labels": node["metadata"]["labels"]}, "spec": node["spec"],
        "status": node["status"]})
    serving.advance(60)
    assert condition(get(serving, "a"), "Ready")["status"] == "True"


def test_out_of_service_on_a_lost_node_has_its_pods_removed(serving):
    forever = {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
               "effect": "NoExecute"}
    serving.create_pod(make_pod("b", tolerations=[GPU_TOLERATION, forever]))
    serving.advance(25)
    serving.inject_fault("node-down", node="node-0")
    serving.advance(340)
    assert get(serving, "a")["metadata"]["deletionTimestamp"]
    assert "deletionTimestamp" not in get(serving, "b")["metadata"]  # tolerates it for ever
    node = serving.get_object("Node", None, "node-0")
    node["spec"]["taints"].append({"key": "node.kubernetes.io/out-of-service",
                                   "value": "nodeshutdown", "effect": "NoExecute"})
    serving.replace_object(node)
    # The taint manager deletes b, which does not tolerate out-of-service; PodGC
    # force-deletes both, terminating on a NotReady out-of-service node.
    assert get(serving, "a") is None and get(serving, "b") is None


def test_the_taint_manager_honours_toleration_seconds(cluster):
    minute = {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
              "effect": "NoExecute", "tolerationSeconds": 60}
    cluster.create_pod(make_pod("a", tolerations=[GPU_TOLERATION, minute]))
    cluster.advance(25)
    cluster.inject_fault("node-down", node="node-0")
    cluster.advance(40 + 59)
    assert "deletionTimestamp" not in get(cluster, "a")["metadata"]
    cluster.advance(1)
    assert get(cluster, "a")["metadata"]["deletionTimestamp"]


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
