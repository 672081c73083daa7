"""The simulated kubelet: pulls, probes, readiness gates, back-off, in-place updates, deletion."""

from __future__ import annotations

import pytest
from sim_helpers import NS, condition, container, elapsed, get, make_pod, step

from omegitops.cluster.errors import AlreadyExists, Invalid


def test_first_pull_takes_20_seconds_then_the_node_has_the_image(cluster):
    cluster.create_pod(make_pod("a"))
    cluster.advance(0)
    assert container(cluster, "a")["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert get(cluster, "a")["status"]["phase"] == "Pending"
    assert step(cluster) == 20
    assert container(cluster, "a")["state"] == {"running": {"startedAt": "2026-09-27T08:00:20Z"}}
    assert get(cluster, "a")["status"]["phase"] == "Running"
    cluster.create_pod(make_pod("b"))  # same node, same image: no pull
    cluster.advance(0)
    assert "running" in container(cluster, "b")["state"]


def test_pods_started_together_share_one_pull(cluster):
    cluster.create_pod(make_pod("a"))
    cluster.advance(10)
    cluster.create_pod(make_pod("b"))
    cluster.advance(10)
    assert "running" in container(cluster, "b")["state"]


# A probe's handler: the API server refuses a probe without one.
TCP = {"tcpSocket": {"port": 8000}}


@pytest.mark.parametrize(("probes", "annotations", "ready_after"), [
    ({}, {}, 5),
    ({"readinessProbe": {**TCP, "initialDelaySeconds": 30, "periodSeconds": 10}}, {}, 40),
    ({"startupProbe": {**TCP, "initialDelaySeconds": 60, "periodSeconds": 6},
      "readinessProbe": {**TCP, "periodSeconds": 30}}, {}, 66),
    ({"startupProbe": {**TCP, "initialDelaySeconds": 60}},
     {"sim.omegitops.io/startup-seconds": "3"}, 3),
])
def test_a_container_is_ready_after_its_probe_delay(cluster, probes, annotations, ready_after):
    cluster.create_pod(make_pod("a", annotations=annotations, container=probes))
    cluster.advance(20)
    assert container(cluster, "a")["ready"] is False
    assert step(cluster) == 20 + ready_after
    assert container(cluster, "a")["ready"] is True
    assert container(cluster, "a")["started"] is True


def test_the_readiness_gate_holds_ready_until_the_serving_condition_is_true(cluster):
    cluster.create_pod(make_pod("a"))
    cluster.advance(25)
    pod = get(cluster, "a")
    assert condition(pod, "ContainersReady")["status"] == "True"
    assert condition(pod, "Ready")["status"] == "False"
    assert condition(pod, "Ready")["reason"] == "ReadinessGatesNotReady"
    cluster.set_pod_condition(NS, "a", "ome.io/serving", True, "Serving")
    assert condition(get(cluster, "a"), "Ready")["status"] == "True"
    cluster.set_pod_condition(NS, "a", "ome.io/serving", False)
    assert condition(get(cluster, "a"), "Ready")["status"] == "False"
    with pytest.raises(Invalid):
        cluster.set_pod_condition(NS, "a", "Ready", True)


def test_init_containers_run_first_five_seconds_each(cluster):
    pod = make_pod("a", gates=False)
    pod["spec"]["initContainers"] = [{"name": "one", "image": "registry/engine:v1"},
                                     {"name": "two", "image": "registry/engine:v1"}]
    cluster.create_pod(pod)
    cluster.advance(20)
    assert condition(get(cluster, "a"), "Initialized")["status"] == "False"
    assert container(cluster, "a")["state"]["waiting"]["reason"] == "PodInitializing"
    cluster.advance(10)
    assert condition(get(cluster, "a"), "Initialized")["status"] == "True"
    assert container(cluster, "a")["state"]["running"]["startedAt"] == "2026-09-27T08:00:30Z"
    cluster.advance(5)
    assert condition(get(cluster, "a"), "Ready")["status"] == "True"


def test_crash_back_off_doubles_from_10_to_300_seconds_and_resets_after_10_minutes(cluster):
    cluster.create_pod(make_pod("a"))
    cluster.advance(30)
    cluster.inject_fault("crash", pod="a")
    waits, crashed_at = [], elapsed(cluster)
    while len(waits) < 7:
        now = step(cluster)
        state = container(cluster, "a")["state"]
        if "running" in state:
            waits.append(now - crashed_at)
        elif "CrashLoopBackOff" == state["waiting"]["reason"]:
            crashed_at = now
    assert waits == [10, 20, 40, 80, 160, 300, 300]
    assert container(cluster, "a")["restartCount"] == 7
    assert container(cluster, "a")["lastState"]["terminated"]["exitCode"] == 1
    cluster.inject_fault("crash", pod="a", clear=True)
    cluster.advance(600)  # ten quiet minutes
    cluster.inject_fault("crash", pod="a")
    crashed_at = elapsed(cluster)
    assert step(cluster) - crashed_at == 10


def test_an_unpullable_image_shows_errimagepull_then_backs_off(cluster):
    cluster.inject_fault("imagepull", image="registry/engine:missing")
    cluster.create_pod(make_pod("a", image="registry/engine:missing"))
    cluster.advance(0)
    assert container(cluster, "a")["state"]["waiting"]["reason"] == "ErrImagePull"
    cluster.advance(1)
    assert container(cluster, "a")["state"]["waiting"]["reason"] == "ImagePullBackOff"
    tries = []
    while len(tries) < 4:
        now = step(cluster)
        if container(cluster, "a")["state"]["waiting"]["reason"] == "ErrImagePull":
            tries.append(now)
    assert tries == [10, 30, 70, 150]
    cluster.inject_fault("imagepull", image="registry/engine:missing", clear=True)
    cluster.advance(160)  # the next try, at 310, pulls for 20 s
    assert container(cluster, "a")["state"]["waiting"]["reason"] == "ContainerCreating"
    cluster.advance(20)
    assert "running" in container(cluster, "a")["state"]


def test_patching_an_image_restarts_only_that_container(cluster):
    pod = make_pod("a", gates=False)
    pod["spec"]["containers"].append({"name": "sidecar", "image": "registry/side:v1"})
    cluster.create_pod(pod)
    cluster.advance(30)
    cluster.patch_pod_images(NS, "a", {"ome-container": "registry/engine:v2"})
    engine, sidecar = container(cluster, "a", 0), container(cluster, "a", 1)
    assert engine["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert engine["image"] == "registry/engine:v2"
    assert sidecar["restartCount"] == 0 and sidecar["ready"] is True
    assert condition(get(cluster, "a"), "Ready")["status"] == "False"
    cluster.advance(25)
    engine = container(cluster, "a", 0)
    assert engine["restartCount"] == 1 and engine["ready"] is True
    assert get(cluster, "a")["metadata"]["uid"] == cluster.list_pods()[0]["metadata"]["uid"]


def test_any_other_pod_spec_change_is_invalid(cluster):
    cluster.create_pod(make_pod("a"))
    pod = get(cluster, "a")
    pod["spec"]["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    with pytest.raises(Invalid, match="Pod/demo/a: spec: Forbidden"):
        cluster.replace_object(pod)
    with pytest.raises(Invalid, match="no container"):
        cluster.patch_pod_images(NS, "a", {"nope": "x"})


def _running(cluster, name, **annotations):
    pod = make_pod(name, annotations=annotations)
    pod["spec"]["terminationGracePeriodSeconds"] = 60
    if annotations.pop("prestop", None) is not None or "sim.omegitops.io/prestop-seconds" in (
            pod["metadata"]["annotations"]):
        pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["drain"]}}}
    cluster.create_pod(pod)
    cluster.advance(30)


def test_deletion_without_prestop_goes_after_two_seconds(cluster):
    _running(cluster, "a")
    cluster.delete_pod(NS, "a")
    pod = get(cluster, "a")
    assert pod["metadata"]["deletionTimestamp"] == "2026-09-27T08:01:30Z"
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 60
    with pytest.raises(AlreadyExists):
        cluster.create_pod(make_pod("a"))
    assert step(cluster) == 32
    assert get(cluster, "a") is None


def test_prestop_runs_before_exit_and_the_grace_period_caps_it(cluster):
    _running(cluster, "a", **{"sim.omegitops.io/prestop-seconds": "20"})
    cluster.delete_pod(NS, "a")
    cluster.advance(21)
    assert "running" in container(cluster, "a")["state"]
    cluster.advance(1)
    assert get(cluster, "a") is None
    _running(cluster, "b", **{"sim.omegitops.io/exit-seconds": "600"})
    cluster.delete_pod(NS, "b", grace_seconds=10)
    cluster.delete_pod(NS, "b", grace_seconds=50)  # never extends the first deadline
    assert get(cluster, "b")["metadata"]["deletionGracePeriodSeconds"] == 10
    cluster.advance(9)
    assert get(cluster, "b") is not None
    cluster.advance(1)
    assert get(cluster, "b") is None


def test_finalizers_keep_a_terminated_pod_listed_until_removed(cluster):
    pod = make_pod("a")
    pod["metadata"]["finalizers"] = ["example.com/hold"]
    cluster.create_pod(pod)
    cluster.advance(30)
    cluster.delete_pod(NS, "a")
    cluster.advance(30)
    held = get(cluster, "a")
    assert held["status"]["phase"] == "Succeeded"
    assert "terminated" in held["status"]["containerStatuses"][0]["state"]
    held["metadata"]["finalizers"] = []
    cluster.replace_object(held)
    assert get(cluster, "a") is None


def test_an_unscheduled_pod_is_deleted_at_once(cluster):
    cluster.create_pod(make_pod("a", gpus=99))
    cluster.advance(0)
    cluster.delete_pod(NS, "a")
    assert get(cluster, "a") is None
