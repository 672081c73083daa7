"""The simulated scheduler: first fit, kube's filters and its Unschedulable message."""

from __future__ import annotations

from sim_helpers import NS, condition, get, make_pod

from omegitops.cluster.sim.scheduler import pod_requests


def test_a_pod_binds_to_the_first_node_with_room(cluster):
    for name in ("a", "b"):
        cluster.create_pod(make_pod(name, gpus=5))
    cluster.advance(0)
    assert get(cluster, "a")["spec"]["nodeName"] == "node-0"
    assert get(cluster, "b")["spec"]["nodeName"] == "node-1"  # 5 + 5 > 8
    assert condition(get(cluster, "a"), "PodScheduled")["status"] == "True"


def test_no_room_gives_kubes_unschedulable_message_and_retries_when_room_frees(cluster):
    for index in range(8):
        cluster.create_pod(make_pod(f"full-{index}", gpus=8))
    cluster.create_pod(make_pod("late", gpus=1))
    cluster.advance(0)
    scheduled = condition(get(cluster, "late"), "PodScheduled")
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    assert cluster.next_transition_at() is not None  # the others still start
    cluster.delete_pod(NS, "full-3", grace_seconds=1)
    cluster.advance(1)
    assert get(cluster, "late")["spec"]["nodeName"] == "node-3"


def test_untolerated_taint_selector_and_affinity_are_reported_per_node(cluster):
    untolerant = make_pod("untolerant")
    untolerant["spec"]["tolerations"] = []
    picky = make_pod("picky", nodeSelector={"kubernetes.io/hostname": "node-9"})
    steered = make_pod("steered", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                   "values": ["node-0", "node-1"]}]}]}}})
    for pod in (untolerant, picky, steered):
        cluster.create_pod(pod)
    cluster.advance(0)
    assert condition(get(cluster, "untolerant"), "PodScheduled")["message"] == (
        "0/8 nodes are available: 8 node(s) had untolerated taint {nvidia.com/gpu: present}.")
    assert condition(get(cluster, "picky"), "PodScheduled")["message"] == (
        "0/8 nodes are available: 8 node(s) didn't match Pod's node affinity/selector.")
    assert get(cluster, "steered")["spec"]["nodeName"] == "node-2"


def test_scheduling_gates_hold_a_pod_until_removed(cluster):
    cluster.create_pod(make_pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))
    cluster.advance(0)
    pod = get(cluster, "gated")
    assert "nodeName" not in pod["spec"]
    assert condition(pod, "PodScheduled")["reason"] == "SchedulingGated"
    del pod["spec"]["schedulingGates"]
    cluster.replace_object(pod)
    assert cluster.next_transition_at() == cluster.now()
    cluster.advance(0)
    assert get(cluster, "gated")["spec"]["nodeName"] == "node-0"


def test_requests_fall_back_to_limits_and_init_containers_count_as_their_maximum():
    pod = make_pod("p", gpus=2)
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m", "memory": "1Gi"}
    pod["spec"]["containers"].append({"name": "side", "image": "s",
                                      "resources": {"requests": {"cpu": "1"}}})
    pod["spec"]["initContainers"] = [{"name": "init", "image": "i",
                                      "resources": {"requests": {"cpu": "4"}}}]
    assert pod_requests(pod) == {"nvidia.com/gpu": 2000, "cpu": 4000, "memory": 2**30 * 1000,
                                 "pods": 1000}


def test_insufficient_cpu_and_gpu_are_both_counted(cluster):
    pod = make_pod("huge", gpus=9)
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "200"}
    cluster.create_pod(pod)
    cluster.advance(0)
    assert condition(get(cluster, "huge"), "PodScheduled")["message"] == (
        "0/8 nodes are available: 8 Insufficient cpu, 8 Insufficient nvidia.com/gpu.")
