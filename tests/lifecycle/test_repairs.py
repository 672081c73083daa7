"""Failures and repairs (restart-policy.txt, instances.txt): restart policies, crash-loop
repair, deadlines, retries, held revisions, recovery by hand. Faults come from the
simulated cluster; the invariants are checked after every pass."""

from __future__ import annotations

import pytest

from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.fleet import strategy, write_service
from tests.scenario import Scenario, converged

NAME = "svc-engine"
RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}


make = converged


def rows(scenario):
    return {row["index"]: row for row in scenario.rows(NAME)}


def messages(scenario, reason):
    return [e["message"] for e in scenario.events(reason)]


def condition(scenario, kind):
    return next(c for c in scenario.status(NAME)["conditions"] if c["type"] == kind)


def annotate(scenario, key, value):
    with SimCluster(scenario.path) as cluster:
        replica = cluster.get_object("InferenceReplica", "demo", NAME)
        replica["metadata"].setdefault("annotations", {})[key] = value
        cluster.replace_object(replica)


def test_oom_restarts_the_instance_under_recreate_policy(tmp_path):
    scenario, _ = make(tmp_path, replicas=1, lifecycle=RECREATE)
    scenario.fault("oom", pod="svc-engine-0-default-0")
    scenario.until(lambda s: bool(s.events("RestartTriggered")))
    assert rows(scenario)[0]["phase"] == "Restarting"
    assert condition(scenario, "EngineReady")["reason"] == "InsufficientAvailable"
    assert messages(scenario, "RestartTriggered") == [
        ("OMENative component=engine instance=0 restart triggered: pod svc-engine-0-default-0 "
        "container ome-container restarted after Ready: OOMKilled (exit 137) (incarnation=2)")]
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2)
    # lastFailure is kept after the Instance recovers.
    failure = row["lastFailure"]
    assert (failure["pod"], failure["container"], failure["reason"], failure["exitCode"]) == (
        "svc-engine-0-default-0", "ome-container", "OOMKilled", 137)
    assert failure["time"]
    pod = scenario.pods()[0]
    assert pod["metadata"]["labels"]["ome.io/instance-incarnation"] == "2"


def test_with_max_unavailable_the_component_stays_minimum_available(tmp_path):
    life = {**RECREATE, **strategy(maxUnavailable=1)}
    scenario, _ = make(tmp_path, replicas=2, lifecycle=life)
    scenario.fault("oom", pod="svc-engine-0-default-0")
    scenario.until(lambda s: bool(s.events("RestartTriggered")))
    ready = condition(scenario, "EngineReady")
    assert (ready["status"], ready["reason"]) == ("True", "MinimumAvailable")


def test_single_pod_default_policy_leaves_a_restarted_container_to_the_kubelet(tmp_path):
    scenario, _ = make(tmp_path, replicas=1)
    scenario.fault("oom", pod="svc-engine-0-default-0")
    scenario.advance(1)
    scenario.until_idle()
    assert not scenario.events("RestartTriggered")
    assert rows(scenario)[0]["incarnation"] == 1


def test_gang_worker_crash_restarts_the_whole_gang_by_default(tmp_path):
    scenario, _ = make(tmp_path, replicas=1, workers=2)
    scenario.fault("oom", pod="svc-engine-0-worker-1")
    scenario.until(lambda s: bool(s.events("RestartTriggered")))
    scenario.until_idle()
    (message,) = messages(scenario, "RestartTriggered")
    assert "pod svc-engine-0-worker-1 container ome-container restarted after Ready" in message
    pods = scenario.pods()
    assert {p["metadata"]["labels"]["ome.io/instance-incarnation"] for p in pods} == {"2"}
    assert len({P.revision_of(p) for p in pods}) == 1


def test_sidecar_restarts_do_not_count(tmp_path):
    scenario, _ = make(tmp_path, replicas=1, lifecycle=RECREATE)
    row = rows(scenario)[0]
    assert all(p["restarts"] == 0 for p in row["pods"])
    scenario.until_idle()
    assert not scenario.events("RestartTriggered")


def test_evicted_pod_none_policy_replaces_only_that_pod(tmp_path):
    scenario, _ = make(tmp_path, replicas=1)
    scenario.fault("evict", pod="svc-engine-0-default-0")
    scenario.until_idle()
    (message,) = messages(scenario, "RestartTriggered")
    assert "pod svc-engine-0-default-0 is in phase Failed: Evicted (incarnation=2)" in message
    row = rows(scenario)[0]
    # A restart raises the incarnation by one, of one pod as of a whole Instance, and the
    # recreated pod carries it (instances.txt).
    assert (row["phase"], row["incarnation"]) == ("Ready", 2)
    (pod,) = scenario.pods()
    assert pod["metadata"]["labels"]["ome.io/instance-incarnation"] == "2"


def test_an_evicted_pod_at_the_surge_ordinal_is_replaced_at_that_ordinal(tmp_path):
    """After a SurgeThenDrain update the Instance runs ordinal 1: under the None policy
    the lost pod comes back under its own name, not at ordinal 0 beside the row."""
    scenario, change = make(tmp_path, replicas=1, grace=5)
    change(image="sglang:v2", grace=5)
    scenario.until_idle()
    scenario.fault("evict", pod="svc-engine-0-default-1")
    scenario.until_idle(max_passes=60)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"], row["ordinal"]) == ("Ready", 2, 1)
    assert [p["metadata"]["name"] for p in scenario.pods()] == ["svc-engine-0-default-1"]


def test_evicted_pod_recreate_policy_restarts_the_instance(tmp_path):
    scenario, _ = make(tmp_path, replicas=1, lifecycle=RECREATE)
    scenario.fault("evict", pod="svc-engine-0-default-0")
    scenario.until_idle()
    assert rows(scenario)[0]["incarnation"] == 2


def test_a_deleted_pod_restarts_a_gang(tmp_path):
    scenario, _ = make(tmp_path, replicas=1, workers=1, grace=1)
    scenario.strict_gangs = False
    with SimCluster(scenario.path) as cluster:
        cluster.delete_pod("demo", "svc-engine-0-worker-0", 0)
    scenario.advance(1)
    scenario.until_idle()
    (message,) = messages(scenario, "RestartTriggered")
    assert "1/2 pods remain (pod svc-engine-0-worker-0 is gone)" in message
    assert rows(scenario)[0]["incarnation"] == 2


def test_crash_loop_repair_after_the_stuck_pod_grace(tmp_path):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}
    scenario, _ = make(tmp_path, replicas=1, values=values)
    scenario.fault("crash", pod="svc-engine-0-default-0")
    scenario.until(lambda s: bool(s.events("RestartTriggered")))
    (message,) = messages(scenario, "RestartTriggered")
    assert message == ("OMENative component=engine instance=0 restart triggered: pod "
                       "svc-engine-0-default-0 wedged in CrashLoopBackOff past the stuck-pod "
                       "grace (incarnation=2)")
    scenario.until_idle()
    assert rows(scenario)[0]["phase"] == "Ready"


def test_no_crash_loop_repair_without_the_setting(tmp_path):
    scenario, _ = make(tmp_path, replicas=1)
    scenario.fault("crash", pod="svc-engine-0-default-0")
    for _ in range(30):
        scenario.advance(60)
        scenario.run_pass()
    assert not scenario.events("RestartTriggered")


def test_repair_batch_size_bounds_fresh_repairs_per_pass(tmp_path):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s", "repairBatchSize": 1}}
    scenario, _ = make(tmp_path, replicas=3, values=values)
    for index in range(3):
        scenario.fault("crash", pod=f"svc-engine-{index}-default-0")
    scenario.until(lambda s: bool(s.events("RestartTriggered")))
    assert len(scenario.events("RestartTriggered")) == 1
    scenario.run_pass()
    assert len(scenario.events("RestartTriggered")) == 2
    scenario.run_pass()
    assert len(scenario.events("RestartTriggered")) == 3
    assert not scenario.events("RepairHeld")  # waiting for the batch is not a hold


def test_max_unavailable_holds_a_repair_that_takes_a_serving_instance_offline(tmp_path):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}
    life = {"restartPolicy": "None", **strategy(maxUnavailable=1)}
    scenario, _ = make(tmp_path, replicas=3, workers=1, lifecycle=life, values=values)
    scenario.fault("hang", pod="svc-engine-2-leader-0")  # Instance 2 serves nothing
    scenario.fault("crash", pod="svc-engine-0-worker-0")  # Instance 0 serves via its leader
    scenario.until(lambda s: bool(s.events("RepairHeld")))
    (event,) = scenario.events("RepairHeld")
    assert event["type"] == "Warning"
    assert event["message"] == ("OMENative component=engine instance=0 repair held: "
                                "per-Component unavailability budget 1 exhausted "
                                "(would become 2)")
    assert not scenario.events("RestartTriggered")
    scenario.fault("hang", pod="svc-engine-2-leader-0", clear=True)
    scenario.until(lambda s: bool(s.events("RestartTriggered")))


def test_creation_past_its_deadline_fails_the_instance(tmp_path):
    values = {"lifecycle": {"instanceReadyTimeout": "10m"}}
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, values=values)
    scenario = Scenario(tmp_path, repo)
    scenario.fault("unschedulable")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Failed")
    row = rows(scenario)[0]
    assert row["lastFailure"]["reason"] == "DeadlineExceeded"
    assert row["operation"]["type"] == "Create"  # a Failed Instance keeps its operation
    ready = condition(scenario, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InstanceFailed")
    # Recovery by hand: fix the cause, then reset.
    scenario.fault("unschedulable", clear=True)
    annotate(scenario, "ome.io/reset-instances", "all")
    scenario.until_idle()
    # A reset rebuilds the failed Instance: the incarnation stays (instances.txt).
    assert (rows(scenario)[0]["phase"], rows(scenario)[0]["incarnation"]) == ("Ready", 1)
    assert messages(scenario, "InstanceReset") == [
        "OMENative component=engine instance=0 reset: starting over"]
    annotations = scenario.replica(NAME)["metadata"].get("annotations") or {}
    assert "ome.io/reset-instances" not in annotations


def test_a_scheduling_gate_stops_the_clock(tmp_path):
    values = {"lifecycle": {"instanceReadyTimeout": "10m"}}
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, values=values, gates=["kueue.x-k8s.io/admission"])
    scenario = Scenario(tmp_path, repo)
    scenario.run_pass()
    scenario.advance(1)
    scenario.run_pass()
    scenario.run_pass()
    operation = rows(scenario)[0]["operation"]
    assert operation["waiting"] == ("scheduling gate kueue.x-k8s.io/admission on pod "
                                    "svc-engine-0-default-0")
    for _ in range(5):
        scenario.advance(300)
        scenario.run_pass()
    assert rows(scenario)[0]["phase"] != "Failed"  # 25 minutes held, never failed
    with SimCluster(scenario.path) as cluster:
        pod = cluster.get_object("Pod", "demo", "svc-engine-0-default-0")
        pod["spec"]["schedulingGates"] = []
        cluster.replace_object(pod)
        lifted = cluster.now()
    scenario.until_idle()
    assert rows(scenario)[0]["phase"] == "Ready"
    assert (scenario.now() - lifted).total_seconds() < 600


def test_no_deadline_without_a_timeout(tmp_path):
    repo = tmp_path / "repo"
    write_service(repo, replicas=1)
    scenario = Scenario(tmp_path, repo)
    scenario.fault("unschedulable")
    for _ in range(10):
        scenario.advance(3600)
        scenario.run_pass()
    assert rows(scenario)[0]["phase"] == "Creating"
    assert condition(scenario, "InstanceReadyTimeoutUnconfigured")["status"] == "True"


def test_a_held_revision_is_released_by_annotation(tmp_path):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}
    scenario, change = make(tmp_path, replicas=1, values=values)
    scenario.fault("imagepull", image="sglang:bad")
    change(image="sglang:bad")
    scenario.until(lambda s: bool(s.events("RevisionHeld")))
    target = scenario.replica(NAME)["spec"]["revision"]
    # Without updateRetry, the first revision-caused failure holds it.
    assert scenario.status(NAME)["revisionRetries"][target] == {"attempts": 1, "held": True}
    scenario.fault("imagepull", image="sglang:bad", clear=True)
    annotate(scenario, "ome.io/release-revision", target)
    scenario.until_idle()
    assert rows(scenario)[0]["revision"] == target
    assert messages(scenario, "RevisionReleased") == [
        f"OMENative component=engine released revision {target}"]


def test_drain_past_its_deadline_is_overdue_not_failed(tmp_path):
    values = {"lifecycle": {"instanceReadyTimeout": "1m"}}
    slow = {"sim.omegitops.io/exit-seconds": "600"}
    scenario, change = make(tmp_path, replicas=2, values=values, grace=900, annotations=slow)
    change(replicas=1)
    scenario.until(lambda s: bool(s.events("DrainOverdue")))
    assert condition(scenario, "DrainOverdue")["status"] == "True"
    assert all(r["phase"] != "Failed" for r in rows(scenario).values())
    scenario.until_idle()
    assert len(scenario.events("DrainOverdue")) == 1
    assert sorted(rows(scenario)) == [0]
    assert condition(scenario, "DrainOverdue")["status"] == "False"


def test_a_failed_attempt_steers_the_next_one_off_its_node(tmp_path):
    values = {"lifecycle": {"instanceReadyTimeout": "5m"}, "autoMigrate": {"maxAttempts": 3}}
    scenario, change = make(tmp_path, replicas=1, values=values)
    change(image="sglang:v2")
    scenario.until(lambda s: (rows(s)[0]["operation"] or {}).get("step") == "SurgeWaitReady")
    new_pod = next(p for p in scenario.pods() if p["metadata"]["name"].endswith("-1"))
    scenario.fault("hang", pod=new_pod["metadata"]["name"])
    scenario.until(lambda s: bool(s.events("UpdateFailed")))
    row = rows(scenario)[0]
    assert row["lastFailure"]["reason"] == "DeadlineExceeded"
    assert row["avoidNodes"] == [new_pod["spec"]["nodeName"]]
    scenario.until_idle()
    pod = next(p for p in scenario.pods())
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [new_pod["spec"]["nodeName"]]
    assert pod["spec"]["nodeName"] != new_pod["spec"]["nodeName"]



def test_migration_policy_never_turns_the_steering_off(tmp_path):
    """restart-policy.txt: the moves off a failed attempt's node "need
    autoMigrate.maxAttempts ... A component's lifecycle.migrationPolicy.mode: Never turns
    them off": the same failure as above, and the next attempt may land anywhere."""
    values = {"lifecycle": {"instanceReadyTimeout": "5m"}, "autoMigrate": {"maxAttempts": 3}}
    scenario, change = make(tmp_path, replicas=1, values=values,
                            lifecycle={"migrationPolicy": {"mode": "Never"}})
    change(image="sglang:v2", lifecycle={"migrationPolicy": {"mode": "Never"}})
    scenario.until(lambda s: (rows(s)[0]["operation"] or {}).get("step") == "SurgeWaitReady")
    new_pod = next(p for p in scenario.pods() if p["metadata"]["name"].endswith("-1"))
    scenario.fault("hang", pod=new_pod["metadata"]["name"])
    scenario.until(lambda s: bool(s.events("UpdateFailed")))
    row = rows(scenario)[0]
    assert row["lastFailure"]["reason"] == "DeadlineExceeded"
    assert "avoidNodes" not in row
    scenario.until_idle()
    for pod in scenario.pods():
        assert "nodeAffinity" not in (pod["spec"].get("affinity") or {}), pod["metadata"]["name"]

def test_an_ended_pod_is_recycled_while_creating(tmp_path):
    repo = tmp_path / "repo"
    write_service(repo, replicas=1)
    scenario = Scenario(tmp_path, repo)
    scenario.until(lambda s: (rows(s)[0]["operation"] or {}).get("step") == "WaitReady")
    scenario.fault("evict", pod="svc-engine-0-default-0")
    scenario.until_idle()
    (event,) = scenario.events("TerminalPodRecycled")
    assert event["type"] == "Warning"
    assert event["message"] == ("OMENative component=engine instance=0 recycling ended pod "
                                "svc-engine-0-default-0: Evicted")
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 1)
    assert row["lastFailure"]["reason"] == "Evicted"


def test_a_gang_restarting_mid_rollout_stays_on_one_revision(tmp_path):
    life = strategy(maxSurge=1, maxUnavailable=0)
    scenario, change = make(tmp_path, replicas=2, workers=1, lifecycle=life)
    change(image="sglang:v2")
    scenario.run_pass()
    waiting = next(r for r in rows(scenario).values() if not r["operation"]
                   and r.get("surgeOf") is None)
    scenario.fault("oom", pod=f"svc-engine-{waiting['index']}-worker-0")
    scenario.until_idle()
    assert len(scenario.events("RestartTriggered")) >= 1
    target = scenario.replica(NAME)["spec"]["revision"]
    assert {r["revision"] for r in rows(scenario).values()} == {target}


def test_crashing_instances_back_off_between_attempts():
    from omegitops.lifecycle.retries import record_failure
    from omegitops.lifecycle.work import Work
    from omegitops.model.settings import ComponentSettings
    from omegitops.model.state import Phase, Row

    class Lifecycle:
        settings = ComponentSettings()

    class Desired:
        lifecycle = Lifecycle()
        component = "engine"

    work = Work(desired=Desired(), observed=None, now=1000.0)
    row = Row(0, 1, Phase.FAILED, "rev")
    crash = {"reason": "CrashLoopBackOff", "message": "", "pod": "p"}
    pauses = []
    for _ in range(6):
        row = record_failure(work, row, "rev", crash, [])
        pauses.append(row.retry_at)
    # 30 s, 60 s, 120 s, 240 s, then capped at 300 s: never a tight loop.
    assert pauses == ["1970-01-01T00:17:10Z", "1970-01-01T00:17:40Z", "1970-01-01T00:18:40Z",
                      "1970-01-01T00:20:40Z", "1970-01-01T00:21:40Z", "1970-01-01T00:21:40Z"]
    assert not work.retries  # a crash never counts toward a hold


def test_an_instance_whose_pods_all_serve_is_never_failed(tmp_path):
    """instances.txt: a deadline shorter than the minReadySeconds window does not fail
    an Instance that serves at the desired count; it only waits for its window."""
    values = {"lifecycle": {"instanceReadyTimeout": "2m"}}
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, values=values, lifecycle={"minReadySeconds": 600})
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["lastFailure"]) == ("Ready", None)
    assert not scenario.events("InstanceFailed")


def test_a_restart_under_way_finishes_when_the_policy_changes(tmp_path):
    """restart-policy.txt: changing the policy starts no rollout, and a restart already
    under way still finishes."""
    scenario, change = make(tmp_path, replicas=1, lifecycle=RECREATE)
    before = scenario.replica(NAME)["spec"]["revision"]
    scenario.fault("oom", pod="svc-engine-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    change(lifecycle={"restartPolicy": "None"})
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"], row["revision"]) == ("Ready", 2, before)


# -- a lost node -------------------------------------------------------------------

LOST = "svc-engine-0-default-0"


def _spread(tmp_path, lifecycle):
    """Two single-pod Instances on nodes of one GPU each, so a lost node takes one."""
    repo = tmp_path / "repo"
    write_service(repo, replicas=2, lifecycle=lifecycle, grace=5)
    scenario = Scenario(tmp_path, repo, gpus=1)
    scenario.until_idle()
    return scenario


def _pods_of(scenario, index):
    return [p for p in scenario.pods() if P.index_of(p) == index]


@pytest.mark.parametrize("lifecycle, incarnation", [({}, 2), (RECREATE, 2)],
                         ids=["default-policy", "recreate-instance"])
def test_a_pod_stuck_terminating_on_a_lost_node_holds_its_instance_until_the_node_goes(
        tmp_path, lifecycle, incarnation):
    """The taint manager deletes the pod of a silent node, but nobody confirms that it
    stopped, so the API server keeps it, Terminating, and its name stays taken. The
    Instance has fewer pods than it needs from the deletion: its restart opens then,
    one incarnation higher, and waits for the name, saying which pod on which node holds
    it (with no instanceReadyTimeout, as long as it takes). Once the Node object is
    deleted, PodGC removes the pod and the Instance is rebuilt elsewhere."""
    scenario = _spread(tmp_path, lifecycle)
    [lost] = _pods_of(scenario, 0)
    node = P.node_of(lost)
    assert {P.node_of(p) for p in _pods_of(scenario, 1)} != {node}
    scenario.fault("node-down", pod=LOST)
    scenario.until(lambda s: s.status(NAME)["servingReplicas"] == 1)
    assert not P.is_ready(_pods_of(scenario, 0)[0])  # Ready revoked at 40 s
    scenario.until(lambda s: P.is_terminating(_pods_of(s, 0)[0]))
    scenario.run_pass()
    (message,) = messages(scenario, "RestartTriggered")
    assert f"restart triggered: 0/1 pods remain (pod {LOST} is being deleted on node {node})" \
        in message
    assert message.endswith(f"(incarnation={incarnation})")

    def held(s):
        [pod] = _pods_of(s, 0)  # the lost pod alone: nothing was created beside it
        assert pod["metadata"]["uid"] == lost["metadata"]["uid"] and P.is_terminating(pod)
        row = rows(s)[0]
        assert (row["phase"], row["incarnation"], row["operation"]["step"]) == (
            "Restarting", incarnation, "WaitGone"), row
        assert s.status(NAME)["servingReplicas"] == 1

    scenario.watches.append(held)
    scenario.until_idle()
    for _ in range(6):  # an hour of passes: the pod stands while its node is silent
        scenario.advance(600)
        scenario.run_pass()
    assert P.deletion_deadline(_pods_of(scenario, 0)[0]) < scenario.now().timestamp() - 3000
    waiting = rows(scenario)[0]["operation"]["waiting"]
    assert f"pod {LOST} on node {node} is still terminating past its deletion grace" in waiting
    scenario.watches.remove(held)

    scenario.fault("node-removed", pod=LOST)
    scenario.until(lambda s: s.status(NAME)["servingReplicas"] == 2)
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["operation"], row["incarnation"]) == ("Ready", None, incarnation)
    assert row["lastFailure"]["reason"] == "PodLost"
    [pod] = _pods_of(scenario, 0)
    assert pod["metadata"]["uid"] != lost["metadata"]["uid"]
    assert P.node_of(pod) != node and P.is_ready(pod)
    assert pod["metadata"]["labels"]["ome.io/instance-incarnation"] == str(incarnation)
