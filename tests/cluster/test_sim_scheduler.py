"""The simulated scheduler: first fit, kube's filters and its Unschedulable message."""

from __future__ import annotations

from sim_helpers import NS, condition, get, make_pod

from omegitops.capacity.scheduler import pod_requests
from omegitops.cluster.sim import SimCluster


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


# -- gangs: the coscheduling plugin's all or nothing, when the PodGroup kind is installed


def _gang_cluster(tmp_path):
    SimCluster.init(tmp_path / "gangs.json", cpu_nodes=0, podgroups=True)
    return SimCluster(tmp_path / "gangs.json")


def _podgroup(sim, name: str, members: int) -> None:
    sim.create_object({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                       "metadata": {"name": name, "namespace": NS},
                       "spec": {"minMember": members}})


def _member(name: str, group: str, gpus: int) -> dict:
    pod = make_pod(name, gpus=gpus)
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = group
    return pod


def test_a_gang_that_cannot_fit_whole_takes_nothing(tmp_path):
    """Eight nodes of 8 GPUs: a gang of 9 pods of 8 GPUs fits no more than 8 of them. A
    default scheduler binds those 8 and starves everyone; the gang scheduler binds none,
    names the first pod that fits nowhere, and a pod made after them still gets its GPU."""
    with _gang_cluster(tmp_path) as sim:
        _podgroup(sim, "big-engine-0", 9)
        for number in range(9):
            sim.create_pod(_member(f"big-{number}", "big-engine-0", gpus=8))
        sim.create_pod(make_pod("small", gpus=1))
        sim.advance(0)
        assert get(sim, "small")["spec"]["nodeName"] == "node-0"
        messages = set()
        for number in range(9):
            pod = get(sim, f"big-{number}")
            assert "nodeName" not in pod["spec"], number
            messages.add(condition(pod, "PodScheduled")["message"])
        rejected = ("PodGroup demo/big-engine-0 gets rejected due to Pod big-7 is "
                    "unschedulable even after PostFilter.")
        assert messages == {
            f"0/8 nodes are available: 8 Insufficient nvidia.com/gpu. {rejected}", rejected}


def test_a_gang_binds_whole_once_it_fits_and_waits_for_its_members(tmp_path):
    with _gang_cluster(tmp_path) as sim:
        _podgroup(sim, "g-engine-0", 3)
        sim.create_pod(_member("g-0", "g-engine-0", gpus=4))
        sim.create_pod(_member("g-1", "g-engine-0", gpus=4))
        sim.advance(0)
        assert condition(get(sim, "g-0"), "PodScheduled")["message"] == (
            "0/8 nodes are available: pre-filter pod g-0 cannot find enough sibling pods, "
            "current pods number: 2, minMember of group: 3.")
        sim.create_pod(_member("g-2", "g-engine-0", gpus=4))
        sim.advance(0)
        assert [get(sim, f"g-{n}")["spec"].get("nodeName") for n in range(3)] == [
            "node-0", "node-0", "node-1"]
        # A member recreated later joins the group's bound pods: it binds alone.
        sim.delete_pod(NS, "g-2", grace_seconds=0)
        sim.advance(1)
        sim.create_pod(_member("g-2", "g-engine-0", gpus=4))
        sim.advance(0)
        assert get(sim, "g-2")["spec"]["nodeName"] == "node-1"


def test_without_its_podgroup_a_labelled_pod_is_scheduled_alone(tmp_path):
    """The coscheduling plugin schedules a pod whose PodGroup does not exist as any pod."""
    with _gang_cluster(tmp_path) as sim:
        sim.create_pod(_member("lone", "missing-group", gpus=8))
        sim.advance(0)
        assert get(sim, "lone")["spec"]["nodeName"] == "node-0"
