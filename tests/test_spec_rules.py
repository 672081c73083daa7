"""Rules of the documents the product once differed from, one scenario each, on the
simulated cluster with the invariants checked after every pass. The same scenarios
run on the real control plane in ``tests/controlplane/test_documented_rules.py``."""

from __future__ import annotations

import pytest

from omegitops.cluster.sim import SimCluster
from omegitops.lifecycle import pods as P
from tests.fleet import strategy
from tests.scenario import converged

NAME = "svc-engine"
RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}


def rows(scenario):
    return {row["index"]: row for row in scenario.rows(NAME)}


def step(scenario, index=0):
    return (rows(scenario)[index].get("operation") or {}).get("step")


def messages(scenario, reason):
    return [e["message"] for e in scenario.events(reason)]


# -- 1. an ended pod is recycled during a restart, as during a create ------------------

def _evicted_while_restarting(tmp_path, **shape):
    scenario, _ = converged(tmp_path, replicas=1, **shape)
    pod = f"{NAME}-0-" + ("worker-0" if shape.get("workers") else "default-0")
    scenario.fault("oom", pod=pod)
    scenario.until(lambda s: step(s) == "WaitReady" and rows(s)[0]["phase"] == "Restarting")
    scenario.fault("evict", pod=pod)
    scenario.until_idle()
    return scenario, pod


def test_a_pod_evicted_during_a_restart_is_recycled_not_failed(tmp_path):
    """instances.txt: while OME creates or restarts an Instance, it deletes and
    recreates any pod that has ended, such as one the kubelet evicted, until the
    operation's deadline, with a TerminalPodRecycled warning each time."""
    scenario, pod = _evicted_while_restarting(tmp_path, lifecycle=RECREATE)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2), row
    assert messages(scenario, "TerminalPodRecycled") == [
        f"OMENative component=engine instance=0 recycling ended pod {pod}: Evicted"]
    assert not scenario.events("RestartFailed")


def test_a_gang_worker_evicted_during_a_restart_is_recycled_not_failed(tmp_path):
    scenario, _ = _evicted_while_restarting(tmp_path, workers=1)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2), row
    assert len(messages(scenario, "TerminalPodRecycled")) == 1
    assert not scenario.events("RestartFailed")


def test_a_pod_that_keeps_ending_fails_the_restart_at_its_deadline(tmp_path):
    values = {"lifecycle": {"instanceReadyTimeout": "3m"}}
    scenario, _ = converged(tmp_path, replicas=1, lifecycle=RECREATE, values=values)
    pod = f"{NAME}-0-default-0"
    scenario.fault("oom", pod=pod)
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    for _ in range(200):
        if any(p["status"].get("phase") == "Running" for p in scenario.pods(pod)):
            scenario.fault("evict", pod=pod)  # every new pod is evicted once it runs
        scenario.run_pass()
        if rows(scenario)[0]["phase"] == "Failed":
            break
        scenario.advance(20)
    row = rows(scenario)[0]
    assert row["phase"] == "Failed", row
    assert row["lastFailure"]["reason"] == "Evicted"
    (recycled,) = scenario.events("TerminalPodRecycled")  # one event, counted
    assert recycled["count"] >= 2, recycled


# -- 2, 3. scale-down keeps what a multi-pod surge hands over, then Ready Instances -----

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


def test_scale_down_after_a_gang_surge_handed_over_keeps_the_replacement(tmp_path):
    """instances.txt: on scale-down, OME first keeps the Instances that a migration or a
    multi-pod surge is handing over, with their replacements."""
    scenario, change = converged(tmp_path, replicas=3, workers=1, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "DrainOld")
    replacement = rows(scenario)[0]["operation"]["replacement"]
    target = scenario.replica(NAME)["spec"]["revision"]
    change(image="sglang:v2", replicas=1)
    seen: set[int] = set()
    scenario.watches.append(lambda s: seen.update(rows(s)))
    scenario.run_pass()
    deleting = {i for i, row in rows(scenario).items() if row["phase"] == "Deleting"}
    assert replacement not in deleting and {1, 2} <= deleting, rows(scenario)
    scenario.until_idle()
    (row,) = rows(scenario).values()
    assert (row["index"], row["revision"], row["phase"]) == (replacement, target, "Ready")
    assert seen <= {0, 1, 2, replacement}  # no second surge


def test_scale_down_keeps_ready_instances_before_a_single_pod_mid_surge(tmp_path):
    """instances.txt: the surge priority covers a migration or a multi-pod surge; then
    Ready Instances before the others, lowest indices first."""
    scenario, change = converged(tmp_path, replicas=3, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "SurgeWaitReady")
    assert [rows(scenario)[i]["phase"] for i in (1, 2)] == ["Ready", "Ready"]
    change(image="sglang:v2", replicas=2)
    scenario.run_pass()
    assert rows(scenario)[0]["phase"] == "Deleting", rows(scenario)
    assert [rows(scenario)[i]["phase"] for i in (1, 2)] != ["Deleting", "Deleting"]
    scenario.until_idle()
    assert sorted(rows(scenario)) == [1, 2]


# -- 8. lastFailure of a lost pod names it and says when ---------------------------------

def test_the_last_failure_of_a_lost_pod_names_the_pod_and_when(tmp_path):
    """restart-policy.txt: when a pod failed, the Instance's lastFailure keeps ... its
    time. A pod lost with its node is deleted by the taint manager and never goes while
    the node is silent: the record is made by the pass that sees it deleted, and names
    it, its node and when."""
    scenario, _ = converged(tmp_path, replicas=1, grace=5)
    lost = f"{NAME}-0-default-0"
    scenario.fault("node-down", pod=lost)
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    assert all(p["metadata"].get("deletionTimestamp") for p in scenario.pods(lost))
    failure = rows(scenario)[0]["lastFailure"]
    assert (failure["pod"], failure["reason"]) == (lost, "PodLost"), failure
    assert failure["time"] == scenario.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"(pod {lost} is being deleted on node node-0)" in failure["message"]


def test_the_last_failure_of_a_pod_gone_between_passes_says_it_is_gone(tmp_path):
    """A pod force-deleted between two passes is gone from the API by the next: the
    record keeps its name and when a pass found it missing."""
    scenario, _ = converged(tmp_path, replicas=1, grace=5)
    lost = f"{NAME}-0-default-0"
    with SimCluster(scenario.path) as cluster:
        cluster.delete_pod("demo", lost, grace_seconds=0)
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    failure = rows(scenario)[0]["lastFailure"]
    assert (failure["pod"], failure["reason"]) == (lost, "PodLost"), failure
    assert failure["time"] == scenario.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"(pod {lost} is gone)" in failure["message"]


# -- 5, 7, 9. incarnations --------------------------------------------------------------

def _incarnations_while(scenario, phase: str) -> list[int]:
    seen: list[int] = []

    def watch(s):
        row = rows(s)[0]
        if row["phase"] == phase:
            seen.append(row["incarnation"])

    scenario.watches.append(watch)
    return seen


def test_a_restarting_instance_shows_its_new_incarnation_from_the_start(tmp_path):
    """restart-policy.txt: PHASE is Restarting and IDX/INC shows the new incarnation,
    such as 0/2, as the RestartTriggered event says."""
    scenario, _ = converged(tmp_path, replicas=1, lifecycle=RECREATE, grace=5)
    seen = _incarnations_while(scenario, "Restarting")
    scenario.fault("oom", pod=f"{NAME}-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    scenario.until_idle()
    assert len(seen) >= 3 and set(seen) == {2}, seen
    assert "(incarnation=2)" in messages(scenario, "RestartTriggered")[0]


def test_under_none_a_replaced_gang_worker_is_a_restart_one_incarnation_higher(tmp_path):
    """Decided from instances.txt ("A restart raises the incarnation by one", and the
    label "tells a recreated pod from the one it replaced"): replacing one pod under
    restartPolicy None is a restart of that pod. The Instance's incarnation rises and
    the recreated pod carries it; the leader, which served on, keeps its label."""
    scenario, _ = converged(tmp_path, replicas=1, workers=1,
                            lifecycle={"restartPolicy": "None"})
    scenario.fault("evict", pod=f"{NAME}-0-worker-0")
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2)
    labels = {p["metadata"]["name"]: p["metadata"]["labels"]["ome.io/instance-incarnation"]
              for p in scenario.pods()}
    assert labels == {f"{NAME}-0-leader-0": "1", f"{NAME}-0-worker-0": "2"}
    assert "(incarnation=2)" in messages(scenario, "RestartTriggered")[0]


def test_a_retried_recreate_pod_update_keeps_the_incarnation_it_rose_to(tmp_path):
    """instances.txt: an update that deletes and recreates the pods raises the
    incarnation by one; it stays the same through the rebuild of a failed Instance,
    which is what each retry is."""
    values = {"lifecycle": {"stuckPodGracePeriod": "60s",
                            "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}}}
    scenario, change = converged(tmp_path, replicas=1, lifecycle=strategy("RecreatePod"),
                                 values=values, grace=5)
    incarnations: set[int] = set()
    scenario.watches.append(lambda s: incarnations.add(rows(s)[0]["incarnation"]))
    scenario.fault("imagepull", image="sglang:unpullable")
    change(image="sglang:unpullable")
    for _ in range(80):  # 40 minutes: the attempts and their backoff, until held
        scenario.run_pass()
        scenario.advance(30)
    assert scenario.status(NAME)["revisionRetries"][
        scenario.replica(NAME)["spec"]["revision"]]["held"]
    assert len(scenario.events("UpdateFailed")) == 1  # one event, counted per attempt
    assert scenario.events("UpdateFailed")[0]["count"] == 3
    assert incarnations == {1, 2}, incarnations


# -- 6. a resumed step deletes only pods the Service no longer routes to -------------------

def _never_deleted_in_rotation(scenario) -> None:
    """After every pass: no pod this pass deleted still had the gate when it began."""
    gated = {p["metadata"]["uid"] for p in scenario.pods() if P.gate_set(p)}

    def watch(s):
        for pod in s.pods():
            if pod["metadata"].get("deletionTimestamp"):
                assert pod["metadata"]["uid"] not in gated, (
                    f"{pod['metadata']['name']} deleted while in rotation")
        gated.clear()
        gated.update(p["metadata"]["uid"] for p in s.pods()
                     if P.gate_set(p) and not p["metadata"].get("deletionTimestamp"))

    scenario.watches.append(watch)


def _cut_after_recording(scenario, target: str, index: int = 0) -> None:
    """Passes until one records ``target``; that one is killed right after the
    InferenceReplica write, so none of the step's pod writes (the unroute) happened."""
    for _ in range(100):
        before = (rows(scenario).get(index) or {}).get("operation") or {}
        scenario.run_pass(kill_after=2)
        after = (rows(scenario).get(index) or {}).get("operation") or {}
        if after.get("step") == target and before.get("step") != target:
            return
        scenario.advance(1)
    raise AssertionError(f"never reached {target}")


@pytest.mark.parametrize("change, lifecycle, target", [
    ("oom", RECREATE, "DeletePods"),
    ("image", strategy("RecreatePod"), "DeletePods"),
    ("image", SURGE, "DrainOld"),
    ("scale", {}, "DeletePods"),
], ids=["restart", "recreate-pod-update", "surge-drain", "scale-down"])
def test_a_step_resumed_after_a_cut_pass_unroutes_before_it_deletes(
        tmp_path, change, lifecycle, target):
    """restart-policy.txt: OME takes the pods out of the Service, and deletes them once
    the Service stops routing to them. A pass killed after recording the step that
    deletes, before its unroute landed, must not have the next pass delete pods that
    still carry the gate."""
    replicas = 2 if change == "scale" else 1
    scenario, rewrite = converged(tmp_path, replicas=replicas, lifecycle=lifecycle, grace=5)
    _never_deleted_in_rotation(scenario)
    index = 1 if change == "scale" else 0
    if change == "oom":
        scenario.fault("oom", pod=f"{NAME}-0-default-0")
        scenario.advance(1)
    elif change == "image":
        rewrite(image="sglang:v2")
    else:
        rewrite(replicas=1)
    _cut_after_recording(scenario, target, index)
    scenario.until_idle()
    assert [row["phase"] for row in rows(scenario).values()] == ["Ready"]


# -- 13. a pinned service keeps its runtime's lifecycle until the pin moves --------------

def _edit(path, change) -> None:
    import yaml

    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def test_a_pinned_service_takes_the_runtimes_new_min_ready_seconds_only_when_the_pin_moves(
        tmp_path):
    """min-ready-seconds.txt: a service that pins its runtime with spec.runtime.autoSync:
    false gets the change once you move the pin; meanwhile RuntimeDrifted is True."""
    scenario, _ = converged(tmp_path, replicas=1)
    repo = scenario.repo
    service, runtime = repo / "services" / "svc.yaml", repo / "runtimes" / "svc.yaml"
    if not runtime.exists():
        runtime = next((repo / "runtimes").glob("*.yaml"))
    _edit(service, lambda d: d["spec"]["runtime"].update(autoSync=False))
    scenario.until_idle()
    _edit(runtime, lambda d: d["spec"]["engineConfig"].update(
        lifecycle={"minReadySeconds": 90}))
    scenario.until_idle()
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 0
    drifted = {c["type"]: c["status"] for c in scenario.status(NAME)["conditions"]}
    assert drifted.get("RuntimeDrifted") == "True", drifted
    _edit(service, lambda d: d["spec"]["runtime"].update(autoSync=True))  # the pin moves
    scenario.until_idle()
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 90


# -- 14. a replacement lost after hand-over with no newer change is a failure ------------

@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_a_replacement_lost_after_hand_over_is_a_warning_not_a_superseded_surge(
        tmp_path, workers):
    """update-strategies.txt: if the new pod is lost after the hand-over, OME doesn't
    rebuild it for the withdrawn revision... With nothing withdrawn, the loss of a
    serving replacement is reported as the failure it is."""
    scenario, change = converged(tmp_path, replicas=1, workers=workers, lifecycle=SURGE,
                                 grace=30)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "DrainOld")
    row = rows(scenario)[0]
    if workers:
        new = f"{NAME}-{row['operation']['replacement']}-leader-0"
    else:
        new = f"{NAME}-0-default-{row['operation']['ordinal']}"
    scenario.fault("evict", pod=new)
    reason = "GangSurgeAbandoned" if workers else "SurgeAbandoned"
    scenario.until(lambda s: s.events(reason))
    # The source, back in rotation, keeps the loss until its next update replaces it.
    assert rows(scenario)[0]["lastFailure"]["reason"] in ("Evicted", "PodLost")
    scenario.until_idle()
    (event,) = scenario.events(reason)
    assert event["type"] == "Warning", event
    assert "superseded" not in event["message"]
    assert "lost its replacement (Evicted" in event["message"], event["message"]


# -- 15. EngineReady during a restart: the operator default does not count ---------------

def _engine_ready(scenario) -> tuple[str, str]:
    cond = next(c for c in scenario.status(NAME)["conditions"] if c["type"] == "EngineReady")
    return cond["status"], cond["reason"]


@pytest.mark.parametrize("own, expected", [
    (None, ("False", "InsufficientAvailable")),
    (1, ("True", "MinimumAvailable")),
], ids=["chart-default-only", "set-on-the-service"])
def test_engine_ready_during_a_restart_counts_only_a_budget_set_for_the_component(
        tmp_path, own, expected):
    """restart-policy.txt, with the chart (maxUnavailable 25%): by default, while an
    engine Instance restarts, EngineReady is False with InsufficientAvailable; with
    maxUnavailable set, it stays True with MinimumAvailable."""
    chart = {"updateStrategy": {"engine": {"type": "SurgeThenDrain", "maxSurge": "25%",
                                           "maxUnavailable": "25%"}}}
    lifecycle = dict(RECREATE)
    if own is not None:
        lifecycle.update(strategy(maxUnavailable=own))
    scenario, _ = converged(tmp_path, replicas=4, lifecycle=lifecycle,
                            values={"lifecycle": {}, **chart})
    scenario.fault("oom", pod=f"{NAME}-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    assert _engine_ready(scenario) == expected


# -- 10. a gang replacement that loses its leader after hand-over ------------------------

def _serving_gangs(scenario) -> int:
    """Instances whose leader is Ready and in rotation: what the Service routes to."""
    return sum(1 for p in scenario.pods(f"{NAME}-")
               if P.runner_of(p) == "leader" and P.is_ready(p) and P.gate_set(p)
               and not P.has_ended(p))


@pytest.mark.parametrize("withdrawn", [True, False], ids=["withdrawn", "same-revision"])
@pytest.mark.parametrize("lifecycle", [SURGE, {**SURGE, **RECREATE}], ids=["none", "recreate"])
def test_a_gang_replacement_that_loses_its_leader_after_hand_over_is_lost_whole(
        tmp_path, withdrawn, lifecycle):
    """update-strategies.txt: if the new pod is lost after the hand-over, OME doesn't
    rebuild it for the withdrawn revision; an old pod that isn't already terminating
    returns to rotation. A multi-pod Instance follows the same rules with its whole
    replacement Instance: a replacement whose leader is lost stops serving, so it is
    lost whole, and the source that still stands serves again at once."""
    scenario, change = converged(tmp_path, replicas=1, workers=1, lifecycle=lifecycle,
                                 grace=30)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "DrainOld")
    replacement = rows(scenario)[0]["operation"]["replacement"]
    if withdrawn:
        change(image="sglang:v3")
    scenario.fault("evict", pod=f"{NAME}-{replacement}-leader-0")
    scenario.run_pass()
    source = rows(scenario)[0]
    assert (source["phase"], source.get("operation")) == ("Ready", None), source
    assert _serving_gangs(scenario) == 1
    outages: list[int] = []
    scenario.watches.append(lambda s: _serving_gangs(s) or outages.append(s.passes))
    scenario.until_idle()
    assert not outages, f"nothing served after passes {outages}"
    (event,) = scenario.events("GangSurgeAbandoned")
    assert event["type"] == ("Normal" if withdrawn else "Warning"), event
    assert event["message"].endswith("the source returns to rotation on revision "
                                     f"{source['revision']}"), event["message"]
    (row,) = rows(scenario).values()
    assert row["revision"] == scenario.replica(NAME)["spec"]["revision"]
    assert row["phase"] == "Ready"


# -- 4. a full window once a scheduling gate lifts, however the passes fall ------------

GATE = "kueue.x-k8s.io/admission"
PERIOD = 300  # the shipped CronJob runs every 5 minutes


def _lift_gate(scenario, pod: str):
    from omegitops.cluster.sim import SimCluster

    with SimCluster(scenario.path) as cluster:
        body = cluster.get_object("Pod", "demo", pod)
        body["spec"]["schedulingGates"] = []
        cluster.replace_object(body)


@pytest.mark.parametrize("seen_passes", [1, 2], ids=["seen-once", "seen-twice"])
def test_a_gate_lifted_just_before_a_pass_gets_a_full_window(tmp_path, seen_passes):
    """instances.txt: while something outside the Instance holds an operation, such as
    a scheduling gate that Kueue sets, OME stops the clock; when the hold ends, the
    operation gets a full window again. With passes every 5 minutes and a 5-minute
    timeout, a gate lifted 30 s before a pass must not fail the Instance at that pass:
    the window counts from when the pod was let go, which its conditions record."""
    from tests.fleet import write_service
    from tests.scenario import Scenario

    values = {"lifecycle": {"instanceReadyTimeout": "5m"}}
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, values=values, gates=[GATE])
    scenario = Scenario(tmp_path, repo)
    pod = f"{NAME}-0-default-0"
    scenario.run_pass()  # creates the gated pod
    for _ in range(seen_passes):
        scenario.advance(PERIOD)
        scenario.run_pass()
        operation = rows(scenario)[0]["operation"]
        assert operation["waiting"] == f"scheduling gate {GATE} on pod {pod}", operation
    scenario.advance(PERIOD - 30)
    _lift_gate(scenario, pod)
    lifted = scenario.now()
    scenario.advance(30)
    for _ in range(4):
        scenario.run_pass()
        row = rows(scenario)[0]
        assert row["phase"] != "Failed", row
        if row["phase"] == "Ready":
            break
        scenario.advance(PERIOD)
    assert rows(scenario)[0]["phase"] == "Ready"
    assert not scenario.events("InstanceFailed")
    assert (scenario.now() - lifted).total_seconds() >= 30


def test_a_gate_lifted_after_a_pass_saw_it_still_fails_a_pod_that_never_comes_up(tmp_path):
    """The full window after a hold is a window, not forever: a pod that never becomes
    ready after its gate lifts fails at the lift plus the timeout."""
    from tests.fleet import write_service
    from tests.scenario import Scenario

    values = {"lifecycle": {"instanceReadyTimeout": "5m"}}
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, values=values, gates=[GATE])
    scenario = Scenario(tmp_path, repo)
    pod = f"{NAME}-0-default-0"
    scenario.run_pass()
    scenario.advance(PERIOD)
    scenario.run_pass()
    scenario.fault("hang", pod=pod)
    _lift_gate(scenario, pod)
    lifted = scenario.now()
    failed_at = None
    for _ in range(6):
        scenario.advance(PERIOD / 5)
        scenario.run_pass()
        if rows(scenario)[0]["phase"] == "Failed":
            failed_at = scenario.now()
            break
    assert failed_at is not None
    assert 300 <= (failed_at - lifted).total_seconds() <= 300 + PERIOD / 5


# -- 12. every step whose precondition holds, in the same pass --------------------------

@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_a_rollout_at_one_pass_per_period_takes_every_step_that_can_be_taken(
        tmp_path, workers):
    """A job that runs one pass per period spends a period only where the cluster has
    something to do: per Instance, create; route once ready; hand over once available;
    drain once unrouted; and the pass that sees the old pods gone starts the next."""
    instances = 4
    life = {**SURGE, "minReadySeconds": 0}
    scenario, change = converged(tmp_path, replicas=instances, workers=workers, lifecycle=life)
    change(image="sglang:v2")
    ideal = 4 * instances + 1
    target = None
    for passes in range(1, 3 * ideal):
        scenario.run_pass()
        target = scenario.replica(NAME)["spec"]["revision"]
        found = rows(scenario)
        if len(found) == instances and all(
                r["phase"] == "Ready" and not r.get("operation") and r["revision"] == target
                for r in found.values()):
            break
        scenario.advance(60)  # longer than any pod transition of the simulator
    assert passes <= int(1.1 * ideal), (passes, ideal)
