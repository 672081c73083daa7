"""The rules of ``tests/test_spec_rules.py`` on the real control plane: the same
scenarios, each pass as the job's ServiceAccount, with the invariants after every
pass, on KWOK's pod timings and the wall clock."""

from __future__ import annotations

import itertools
import time

import pytest
import yaml
from kubescenario import KubeScenario

from omegitops.lifecycle import pods as P
from tests.fleet import strategy, write_service

NAME = "svc-engine"
RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}
SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)
_namespaces = itertools.count()


@pytest.fixture
def converged(control_plane, tmp_path):
    """``converged(**service)``: the service brought to rest on the control plane, and
    a ``change(**more)`` that rewrites it, as ``tests.scenario.converged`` does."""
    made: list[KubeScenario] = []

    def make(**service):
        namespace = f"rule-{next(_namespaces)}"
        repo = tmp_path / f"repo-{namespace}"
        write_service(repo, namespace=namespace, **service)
        scenario = KubeScenario(control_plane, repo, {namespace})
        made.append(scenario)
        scenario.until(settled)

        def change(**more):
            write_service(repo, namespace=namespace, **{**service, **more})

        return scenario, change

    yield make
    for scenario in made:
        scenario.cleanup()


def settled(s) -> bool:
    replica = s.replica(NAME)
    found = s.rows(NAME)
    return (len(found) == replica["spec"]["replicas"]
            and all(r["phase"] == "Ready" and not r.get("operation")
                    and r["revision"] == replica["spec"]["revision"] for r in found)
            and not s.results[-1].busy)


def rows(s):
    return {row["index"]: row for row in s.rows(NAME)}


def step(s, index=0):
    return (rows(s).get(index, {}).get("operation") or {}).get("step")


def messages(s, reason):
    return [e["message"] for e in s.events(reason)]


def test_a_pod_evicted_during_a_restart_is_recycled_not_failed(converged):
    scenario, _ = converged(replicas=1, grace=2, lifecycle={**RECREATE, "minReadySeconds": 30})
    pod = f"{NAME}-0-default-0"
    scenario.fault("oom", pod)
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting"
                   and step(s) in ("WaitReady", "WaitAvailable") and s.pods(pod))
    scenario.fault("evict", pod)
    scenario.until(settled, seconds=180)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2), row
    assert messages(scenario, "TerminalPodRecycled") == [
        f"OMENative component=engine instance=0 recycling ended pod {pod}: Evicted"]
    assert not scenario.events("RestartFailed")


def test_a_restarting_instance_shows_its_new_incarnation_from_the_start(converged):
    scenario, _ = converged(replicas=1, grace=5, lifecycle=RECREATE)
    seen: list[int] = []
    scenario.watches.append(lambda s: seen.append(rows(s)[0]["incarnation"])
                            if rows(s)[0]["phase"] == "Restarting" else None)
    scenario.fault("oom", f"{NAME}-0-default-0")
    scenario.until(lambda s: bool(seen) and settled(s), seconds=180)
    assert seen and set(seen) == {2}, seen


def test_under_none_a_replaced_gang_worker_is_a_restart_one_incarnation_higher(converged):
    scenario, _ = converged(replicas=1, workers=1, grace=2, lifecycle={"restartPolicy": "None"})
    scenario.fault("evict", f"{NAME}-0-worker-0")
    scenario.until(lambda s: bool(s.events("RestartTriggered")) and settled(s), seconds=180)
    labels = {p["metadata"]["name"]: p["metadata"]["labels"]["ome.io/instance-incarnation"]
              for p in scenario.pods()}
    assert labels == {f"{NAME}-0-leader-0": "1", f"{NAME}-0-worker-0": "2"}
    assert rows(scenario)[0]["incarnation"] == 2


def test_a_restart_resumed_after_a_cut_pass_unroutes_before_it_deletes(converged):
    scenario, _ = converged(replicas=1, grace=5, lifecycle=RECREATE)
    gated = {p["metadata"]["uid"] for p in scenario.pods() if P.gate_set(p)}

    def never_deleted_in_rotation(s):
        for pod in s.pods():
            if pod["metadata"].get("deletionTimestamp"):
                assert pod["metadata"]["uid"] not in gated, pod["metadata"]["name"]
        gated.clear()
        gated.update(p["metadata"]["uid"] for p in s.pods()
                     if P.gate_set(p) and not p["metadata"].get("deletionTimestamp"))

    scenario.watches.append(never_deleted_in_rotation)
    scenario.fault("oom", f"{NAME}-0-default-0")
    for _ in range(200):
        scenario.run_pass(kill_after=2)  # the InferenceReplica, none of the pod writes
        if step(scenario) == "DeletePods":
            break
    else:
        raise AssertionError("the restart never opened")
    scenario.until(settled, seconds=180)
    assert rows(scenario)[0]["incarnation"] == 2


def test_scale_down_keeps_ready_instances_before_a_single_pod_mid_surge(converged):
    scenario, change = converged(replicas=3, grace=2, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) in ("SurgeWaitReady", "SurgeWaitAvailable"))
    change(image="sglang:v2", replicas=2)
    scenario.run_pass()
    assert rows(scenario)[0]["phase"] == "Deleting", rows(scenario)
    scenario.until(settled, seconds=180)
    assert sorted(rows(scenario)) == [1, 2]


def test_scale_down_after_a_gang_surge_handed_over_keeps_the_replacement(converged):
    scenario, change = converged(replicas=2, workers=1, grace=20, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "DrainOld" or step(s) == "WaitDrained")
    replacement = rows(scenario)[0]["operation"]["replacement"]
    change(image="sglang:v2", replicas=1)
    scenario.until(settled, seconds=180)
    (row,) = rows(scenario).values()
    assert row["index"] == replacement, row


def test_a_replacement_lost_after_hand_over_is_a_warning(converged):
    scenario, change = converged(replicas=1, grace=20, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) in ("DrainOld", "WaitDrained"))
    new = f"{NAME}-0-default-{rows(scenario)[0]['operation']['ordinal']}"
    scenario.fault("evict", new)
    scenario.until(lambda s: bool(s.events("SurgeAbandoned")), seconds=120)
    (event,) = scenario.events("SurgeAbandoned")
    assert event["type"] == "Warning", event
    assert "superseded" not in event["message"]
    assert "lost its replacement (Evicted" in event["message"], event["message"]


def test_engine_ready_during_a_restart_counts_only_a_budget_set_for_the_component(converged):
    chart = {"updateStrategy": {"engine": {"type": "SurgeThenDrain", "maxSurge": "25%",
                                           "maxUnavailable": "25%"}}}
    scenario, _ = converged(replicas=2, grace=2, lifecycle={**RECREATE, "minReadySeconds": 20},
                            values={"lifecycle": {}, **chart})
    scenario.fault("oom", f"{NAME}-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    cond = next(c for c in scenario.status(NAME)["conditions"] if c["type"] == "EngineReady")
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientAvailable")


def test_the_documents_hold_at_max_unavailable_zero(converged):
    life = strategy("InPlaceIfPossible", maxUnavailable=0)
    scenario, change = converged(replicas=2, grace=2, lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    scenario.until(lambda s: bool(s.status(NAME).get("rolloutHold")))
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold["gate"] == "Budget"
    assert hold["reason"] == "per-Component unavailability budget 0 exhausted (would become 1)"


def test_a_pinned_service_takes_the_runtimes_new_lifecycle_only_when_the_pin_moves(converged):
    scenario, _ = converged(replicas=1, grace=2)
    service = next((scenario.repo / "services").glob("*.yaml"))
    runtime = next((scenario.repo / "runtimes").glob("*.yaml"))

    def edit(path, change):
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data))

    edit(service, lambda d: d["spec"]["runtime"].update(autoSync=False))
    scenario.until(settled)
    edit(runtime, lambda d: d["spec"]["engineConfig"].update(lifecycle={"minReadySeconds": 90}))
    scenario.until(settled)
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 0
    edit(service, lambda d: d["spec"]["runtime"].update(autoSync=True))
    scenario.until(lambda s: s.replica(NAME)["spec"]["minReadySeconds"] == 90)


def _serving_gangs(s) -> int:
    return sum(1 for p in s.pods(f"{NAME}-")
               if P.runner_of(p) == "leader" and P.is_ready(p) and P.gate_set(p)
               and not P.has_ended(p))


def test_a_gang_replacement_that_loses_its_leader_after_hand_over_is_lost_whole(converged):
    scenario, change = converged(replicas=1, workers=1, grace=20, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "DrainOld")
    replacement = rows(scenario)[0]["operation"]["replacement"]
    change(image="sglang:v3")
    leader = f"{NAME}-{replacement}-leader-0"
    scenario.fault("evict", leader)
    # KWOK evicts a moment later; the next pass must see the loss, as on sim:.
    deadline = time.monotonic() + 30
    while not any(P.has_ended(p) for p in scenario.pods(leader)):
        assert time.monotonic() < deadline, "the leader was never evicted"
        time.sleep(0.2)
    scenario.run_pass()
    assert (rows(scenario)[0]["phase"], step(scenario)) == ("Ready", None), rows(scenario)
    # Back in rotation at once; from then on something always serves.
    scenario.until(lambda s: _serving_gangs(s) == 1, seconds=30)
    outages: list[int] = []
    scenario.watches.append(lambda s: _serving_gangs(s) or outages.append(s.passes))
    scenario.until(settled, seconds=180)
    assert not outages, f"nothing served after passes {outages}"
    (event,) = scenario.events("GangSurgeAbandoned")
    assert event["type"] == "Normal", event
    assert "the source returns to rotation" in event["message"], event["message"]


GATE = "kueue.x-k8s.io/admission"


def test_a_gate_lifted_just_before_a_pass_gets_a_full_window(control_plane, tmp_path):
    """Passes every ``period`` seconds and a timeout of the same length: a gate lifted
    shortly before a pass gets its full window from the lift, which the real
    scheduler's PodScheduled condition records."""
    from omegitops.cluster.base import POD
    from omegitops.cluster.kube import KubeCluster
    from omegitops.cluster.kube.resources import RESOURCES
    from omegitops.cluster.kube.rest import MERGE_PATCH

    period = 12
    namespace = f"rule-{next(_namespaces)}"
    repo = tmp_path / "repo"
    write_service(repo, namespace=namespace, replicas=1, grace=2, gates=[GATE],
                  values={"lifecycle": {"instanceReadyTimeout": f"{period}s"}})
    scenario = KubeScenario(control_plane, repo, {namespace})
    try:
        pod = f"{NAME}-0-default-0"
        scenario.run_pass()  # creates the gated pod
        time.sleep(period)
        scenario.run_pass()
        operation = rows(scenario)[0]["operation"]
        assert operation["waiting"] == f"scheduling gate {GATE} on pod {pod}", operation
        time.sleep(period - 3)
        admin = KubeCluster(api_client=control_plane.admin, lease=False)
        admin.rest.request("PATCH", RESOURCES[POD].path(namespace, pod), what="admit",
                           body={"spec": {"schedulingGates": None}}, content_type=MERGE_PATCH)
        time.sleep(3)
        for _ in range(4):
            scenario.run_pass()
            row = rows(scenario)[0]
            assert row["phase"] != "Failed", row
            if row["phase"] == "Ready":
                break
            time.sleep(period)
        assert rows(scenario)[0]["phase"] == "Ready"
        assert not scenario.events("InstanceFailed")
    finally:
        scenario.cleanup()


def test_a_rollout_takes_every_step_whose_precondition_holds(converged):
    """One pass per period, longer than KWOK's pod transitions: a single-pod
    SurgeThenDrain Instance moves in 4 passes (create; route; hand over; drain) and the
    pass that sees the old pod gone starts the next (tests/bench/bench_rollout.py)."""
    instances = 3
    life = {**SURGE, "minReadySeconds": 0}
    scenario, change = converged(replicas=instances, grace=1, lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    ideal = 4 * instances + 1
    for passes in range(1, 3 * ideal):
        scenario.run_pass()
        found, revision = scenario.rows(NAME), scenario.replica(NAME)["spec"]["revision"]
        if len(found) == instances and all(
                r["phase"] == "Ready" and not r.get("operation") and r["revision"] == revision
                for r in found):
            break
        time.sleep(5)
    else:
        raise AssertionError(f"the rollout did not finish in {passes} passes")
    assert passes <= int(1.1 * ideal), (passes, ideal)


def test_a_component_at_rest_is_recognised_without_planning_it(converged, monkeypatch):
    """tests/test_converged.py on the real API server: the fingerprint the job records
    survives the round trip through the InferenceReplica CRD, so a pass at rest plans
    nothing and writes nothing, and a lost pod is planned at once."""
    from omegitops import reconcile
    from omegitops.lifecycle.converged import CONVERGED_ANNOTATION

    scenario, _ = converged(replicas=2, grace=2)
    scenario.run_pass()  # records the fingerprint if the last pass did not
    assert CONVERGED_ANNOTATION in scenario.replica(NAME)["metadata"]["annotations"]
    calls: list[str] = []
    original = reconcile.plan_component
    monkeypatch.setattr(reconcile, "plan_component",
                        lambda d, o, now: calls.append(d.component) or original(d, o, now))
    result = scenario.run_pass()
    assert calls == [] and result.applied == 0, (calls, result.applied)
    scenario.fault("evict", f"{NAME}-0-default-0")
    scenario.until(lambda s: bool(calls), seconds=30)


def test_a_gang_whose_worker_node_stops_reporting_restarts_named_and_out_of_rotation(
        converged):
    """A KWOK node stops reporting; the real node lifecycle controller has the worker
    deleted, and it stays Terminating. The Ready gang has fewer pods than it needs from
    that moment: its restart opens at the deletion, its leader leaves rotation, and
    once the pod is past its grace the restart's waiting names it and its node (as on
    sim:, tests/test_lost_nodes.py)."""
    scenario, _ = converged(replicas=1, workers=1, grace=1,
                            lifecycle={**RECREATE, "instanceReadyTimeout": "30m"})
    worker = f"{NAME}-0-worker-0"
    scenario.fault("node-down", worker)
    try:
        scenario.until(lambda s: any(P.is_terminating(p) for p in s.pods(f"{NAME}-0-")),
                       seconds=150)
        scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting", seconds=30)
        triggered = messages(scenario, "RestartTriggered")
        assert any("is being deleted on node" in m for m in triggered), triggered

        def named(s) -> bool:
            waiting = (rows(s)[0].get("operation") or {}).get("waiting") or ""
            return "still terminating past its deletion grace" in waiting

        scenario.until(named, seconds=60)
        assert _serving_gangs(scenario) == 0, "a gang that lost a pod is out of rotation"
        assert rows(scenario)[0]["incarnation"] == 2
    finally:
        # The silent node's pods go only with its Node object: without this, its
        # namespace could never finish going, and later tests wait on it.
        scenario.fault("node-removed", worker)
