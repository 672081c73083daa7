"""Rules of the documents the product once differed from, one scenario each, written
once and run on both backends (``tests/backends.py``): on the simulated cluster, where
``advance`` jumps the clock, and on the real control plane, each pass as the job's
ServiceAccount on KWOK's pod timings and the wall clock. The invariants of
``tests/scenario.py`` hold after every pass on both. The rules that run on one backend
only are in ``tests/test_spec_rules.py`` (sim:) and
``tests/controlplane/test_documented_rules.py``."""

from __future__ import annotations

import pytest
import yaml

from omegitops.render import pods as P
from tests.backends import NAME, messages, rows, serving_gangs, settled, step
from tests.fleet import strategy

RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}
SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


# -- 1. an ended pod is recycled during a restart, as during a create ------------------

def test_a_pod_evicted_during_a_restart_is_recycled_not_failed(backend):
    """instances.txt: while OME creates or restarts an Instance, it deletes and
    recreates any pod that has ended, such as one the kubelet evicted, until the
    operation's deadline, with a TerminalPodRecycled warning each time."""
    # minReadySeconds keeps the restart open a while once its pod is Ready, which on
    # the control plane may be before a pass sees it not Ready.
    scenario, _ = backend.converged(replicas=1, grace=2,
                                    lifecycle={**RECREATE, "minReadySeconds": 30})
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


# -- 2, 3. scale-down keeps what a multi-pod surge hands over, then Ready Instances -----

def test_scale_down_after_a_gang_surge_handed_over_keeps_the_replacement(backend):
    """instances.txt: on scale-down, OME first keeps the Instances that a migration or a
    multi-pod surge is handing over, with their replacements."""
    scenario, change = backend.converged(replicas=3, workers=1, grace=20, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) in ("DrainOld", "WaitDrained"))
    replacement = rows(scenario)[0]["operation"]["replacement"]
    target = scenario.replica(NAME)["spec"]["revision"]
    change(image="sglang:v2", replicas=1)
    seen: set[int] = set()
    scenario.watches.append(lambda s: seen.update(rows(s)))
    scenario.run_pass()
    deleting = {i for i, row in rows(scenario).items() if row["phase"] == "Deleting"}
    assert replacement not in deleting and {1, 2} <= deleting, rows(scenario)
    scenario.until(settled, seconds=180)
    (row,) = rows(scenario).values()
    assert (row["index"], row["revision"], row["phase"]) == (replacement, target, "Ready")
    assert seen <= {0, 1, 2, replacement}  # no second surge


def test_scale_down_keeps_ready_instances_before_a_single_pod_mid_surge(backend):
    """instances.txt: the surge priority covers a migration or a multi-pod surge; then
    Ready Instances before the others, lowest indices first."""
    scenario, change = backend.converged(replicas=3, grace=2, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) in ("SurgeWaitReady", "SurgeWaitAvailable"))
    assert [rows(scenario)[i]["phase"] for i in (1, 2)] == ["Ready", "Ready"]
    change(image="sglang:v2", replicas=2)
    scenario.run_pass()
    assert rows(scenario)[0]["phase"] == "Deleting", rows(scenario)
    assert [rows(scenario)[i]["phase"] for i in (1, 2)] != ["Deleting", "Deleting"]
    scenario.until(settled, seconds=180)
    assert sorted(rows(scenario)) == [1, 2]


# -- 5, 9. incarnations -----------------------------------------------------------------

def test_a_restarting_instance_shows_its_new_incarnation_from_the_start(backend):
    """restart-policy.txt: PHASE is Restarting and IDX/INC shows the new incarnation,
    such as 0/2, as the RestartTriggered event says."""
    scenario, _ = backend.converged(replicas=1, grace=5, lifecycle=RECREATE)
    seen: list[int] = []

    def watch(s):
        row = rows(s)[0]
        if row["phase"] == "Restarting":
            seen.append(row["incarnation"])

    scenario.watches.append(watch)
    scenario.fault("oom", f"{NAME}-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    scenario.until(settled, seconds=180)
    assert len(seen) >= 3 and set(seen) == {2}, seen
    assert "(incarnation=2)" in messages(scenario, "RestartTriggered")[0]


def test_under_none_a_replaced_gang_worker_is_a_restart_one_incarnation_higher(backend):
    """Decided from instances.txt ("A restart raises the incarnation by one", and the
    label "tells a recreated pod from the one it replaced"): replacing one pod under
    restartPolicy None is a restart of that pod. The Instance's incarnation rises and
    the recreated pod carries it; the leader, which served on, keeps its label."""
    scenario, _ = backend.converged(replicas=1, workers=1, grace=2,
                                    lifecycle={"restartPolicy": "None"})
    scenario.fault("evict", f"{NAME}-0-worker-0")
    # The eviction lands a moment later on the control plane: at rest again after it.
    scenario.until(lambda s: bool(s.events("RestartTriggered")) and settled(s), seconds=180)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2), row
    labels = {p["metadata"]["name"]: p["metadata"]["labels"]["ome.io/instance-incarnation"]
              for p in scenario.pods()}
    assert labels == {f"{NAME}-0-leader-0": "1", f"{NAME}-0-worker-0": "2"}
    assert "(incarnation=2)" in messages(scenario, "RestartTriggered")[0]


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
    for _ in range(200):
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
        backend, change, lifecycle, target):
    """restart-policy.txt: OME takes the pods out of the Service, and deletes them once
    the Service stops routing to them. A pass killed after recording the step that
    deletes, before its unroute landed, must not have the next pass delete pods that
    still carry the gate."""
    replicas = 2 if change == "scale" else 1
    scenario, rewrite = backend.converged(replicas=replicas, lifecycle=lifecycle, grace=5)
    _never_deleted_in_rotation(scenario)
    index = 1 if change == "scale" else 0
    if change == "oom":
        scenario.fault("oom", f"{NAME}-0-default-0")
        scenario.advance(1)
    elif change == "image":
        rewrite(image="sglang:v2")
    else:
        rewrite(replicas=1)
    _cut_after_recording(scenario, target, index)
    scenario.until(settled, seconds=180)
    assert [row["phase"] for row in rows(scenario).values()] == ["Ready"]
    if change == "oom":
        assert rows(scenario)[0]["incarnation"] == 2


# -- 13. a pinned service keeps its runtime's lifecycle until the pin moves --------------

def _edit(path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def test_a_pinned_service_takes_the_runtimes_new_min_ready_seconds_only_when_the_pin_moves(
        backend):
    """min-ready-seconds.txt: a service that pins its runtime with spec.runtime.autoSync:
    false gets the change once you move the pin; meanwhile RuntimeDrifted is True."""
    scenario, _ = backend.converged(replicas=1, grace=2)
    service = next((scenario.repo / "services").glob("*.yaml"))
    runtime = next((scenario.repo / "runtimes").glob("*.yaml"))
    _edit(service, lambda d: d["spec"]["runtime"].update(autoSync=False))
    scenario.until(settled)
    _edit(runtime, lambda d: d["spec"]["engineConfig"].update(
        lifecycle={"minReadySeconds": 90}))
    scenario.until(settled)
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 0
    drifted = {c["type"]: c["status"] for c in scenario.status(NAME)["conditions"]}
    assert drifted.get("RuntimeDrifted") == "True", drifted
    _edit(service, lambda d: d["spec"]["runtime"].update(autoSync=True))  # the pin moves
    scenario.until(lambda s: s.replica(NAME)["spec"]["minReadySeconds"] == 90)
    scenario.until(settled)
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 90


# -- 14. a replacement lost after hand-over with no newer change is a failure ------------

@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_a_replacement_lost_after_hand_over_is_a_warning_not_a_superseded_surge(
        backend, workers):
    """update-strategies.txt: if the new pod is lost after the hand-over, OME doesn't
    rebuild it for the withdrawn revision... With nothing withdrawn, the loss of a
    serving replacement is reported as the failure it is."""
    scenario, change = backend.converged(replicas=1, workers=workers, lifecycle=SURGE,
                                         grace=30)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) in ("DrainOld", "WaitDrained"))
    row = rows(scenario)[0]
    if workers:
        new = f"{NAME}-{row['operation']['replacement']}-leader-0"
    else:
        new = f"{NAME}-0-default-{row['operation']['ordinal']}"
    scenario.fault("evict", new)
    reason = "GangSurgeAbandoned" if workers else "SurgeAbandoned"
    scenario.until(lambda s: bool(s.events(reason)))
    # The source, back in rotation, keeps the loss until its next update replaces it.
    assert rows(scenario)[0]["lastFailure"]["reason"] in ("Evicted", "PodLost")
    scenario.until(settled, seconds=180)
    (event,) = scenario.events(reason)
    assert event["type"] == "Warning", event
    assert "superseded" not in event["message"]
    assert "lost its replacement (Evicted" in event["message"], event["message"]


# -- 15. EngineReady during a restart: the operator default does not count ---------------

@pytest.mark.parametrize("own, expected", [
    (None, ("False", "InsufficientAvailable")),
    (1, ("True", "MinimumAvailable")),
], ids=["chart-default-only", "set-on-the-service"])
def test_engine_ready_during_a_restart_counts_only_a_budget_set_for_the_component(
        backend, own, expected):
    """restart-policy.txt, with the chart (maxUnavailable 25%): by default, while an
    engine Instance restarts, EngineReady is False with InsufficientAvailable; with
    maxUnavailable set, it stays True with MinimumAvailable."""
    chart = {"updateStrategy": {"engine": {"type": "SurgeThenDrain", "maxSurge": "25%",
                                           "maxUnavailable": "25%"}}}
    lifecycle = {**RECREATE, "minReadySeconds": 20}
    if own is not None:
        lifecycle.update(strategy(maxUnavailable=own))
    # Four Instances: the chart's 25% is one, so the default-only case tells.
    scenario, _ = backend.converged(replicas=4, grace=2, lifecycle=lifecycle,
                                    values={"lifecycle": {}, **chart})
    scenario.fault("oom", f"{NAME}-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    cond = next(c for c in scenario.status(NAME)["conditions"] if c["type"] == "EngineReady")
    assert (cond["status"], cond["reason"]) == expected


# -- update-strategies.txt: the hold of a stuck budget --------------------------------------

def test_the_documents_hold_at_max_unavailable_zero(backend):
    """update-strategies.txt: the hold of an InPlaceIfPossible engine with
    maxUnavailable 0, a legal (if stuck) budget in a service: the rollout holds with the
    documented reason, in the InferenceReplica and where ``get irep`` shows it."""
    life = strategy("InPlaceIfPossible", maxUnavailable=0)
    scenario, change = backend.converged(replicas=2, grace=2, lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    scenario.until(lambda s: bool(s.status(NAME).get("rolloutHold")))
    # Held for good: a pass has nothing left to write (on sim:, nothing left to happen).
    scenario.until(lambda s: not s.results[-1].applied)
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold["gate"] == "Budget"
    assert hold["reason"] == "per-Component unavailability budget 0 exhausted (would become 1)"
    target = scenario.replica(NAME)["spec"]["revision"]
    assert hold["target"] == target
    assert hold["since"]
    assert {r["revision"] for r in rows(scenario).values()} != {target}


# -- 10. a gang replacement that loses its leader after hand-over ------------------------

@pytest.mark.parametrize("withdrawn", [True, False], ids=["withdrawn", "same-revision"])
@pytest.mark.parametrize("lifecycle", [SURGE, {**SURGE, **RECREATE}], ids=["none", "recreate"])
def test_a_gang_replacement_that_loses_its_leader_after_hand_over_is_lost_whole(
        backend, withdrawn, lifecycle):
    """update-strategies.txt: if the new pod is lost after the hand-over, OME doesn't
    rebuild it for the withdrawn revision; an old pod that isn't already terminating
    returns to rotation. A multi-pod Instance follows the same rules with its whole
    replacement Instance: a replacement whose leader is lost stops serving, so it is
    lost whole, and the source that still stands serves again at once."""
    scenario, change = backend.converged(replicas=1, workers=1, lifecycle=lifecycle,
                                         grace=30)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "DrainOld")
    replacement = rows(scenario)[0]["operation"]["replacement"]
    if withdrawn:
        change(image="sglang:v3")
    leader = f"{NAME}-{replacement}-leader-0"
    scenario.fault("evict", leader)
    # KWOK evicts a moment later; the next pass must see the loss, as on sim:.
    scenario.wait(lambda s: any(P.has_ended(p) for p in s.pods(leader)),
                  what=f"{leader} evicted")
    scenario.run_pass()
    source = rows(scenario)[0]
    assert (source["phase"], source.get("operation")) == ("Ready", None), source
    # Back in rotation at once (KWOK makes the leader Ready a moment after its gate).
    scenario.wait(lambda s: serving_gangs(s) == 1, what="the source serving")
    outages: list[int] = []
    scenario.watches.append(lambda s: serving_gangs(s) or outages.append(s.passes))
    scenario.until(settled, seconds=180)
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
# Seconds between passes (and the operation's timeout), and how long before a pass the
# gate lifts: the shipped CronJob's 5 minutes on sim:; on the control plane, a period
# longer than KWOK's pod transitions.
TIMING = {"sim": (300, 30), "controlplane": (12, 3)}


@pytest.mark.parametrize("seen_passes", [1, 2], ids=["seen-once", "seen-twice"])
def test_a_gate_lifted_just_before_a_pass_gets_a_full_window(backend, seen_passes):
    """instances.txt: while something outside the Instance holds an operation, such as
    a scheduling gate that Kueue sets, OME stops the clock; when the hold ends, the
    operation gets a full window again. With passes every period and a timeout of the
    same length, a gate lifted shortly before a pass must not fail the Instance at that
    pass: the window counts from when the pod was let go, which its conditions record
    (on the control plane, the real scheduler's PodScheduled condition)."""
    period, lead = TIMING[backend.name]
    scenario = backend.scenario(replicas=1, grace=2, gates=[GATE],
                                values={"lifecycle": {"instanceReadyTimeout": f"{period}s"}})
    pod = f"{NAME}-0-default-0"
    scenario.run_pass()  # creates the gated pod
    for _ in range(seen_passes):
        scenario.advance(period)
        scenario.run_pass()
        operation = rows(scenario)[0]["operation"]
        assert operation["waiting"] == f"scheduling gate {GATE} on pod {pod}", operation
    scenario.advance(period - lead)
    scenario.lift_gate(pod)
    lifted = scenario.now()
    scenario.advance(lead)
    for _ in range(4):
        scenario.run_pass()
        row = rows(scenario)[0]
        assert row["phase"] != "Failed", row
        if row["phase"] == "Ready":
            break
        scenario.advance(period)
    assert rows(scenario)[0]["phase"] == "Ready"
    assert not scenario.events("InstanceFailed")
    assert (scenario.now() - lifted).total_seconds() >= lead


# -- 12. every step whose precondition holds, in the same pass --------------------------

# Seconds between passes: longer than any pod transition (of the simulator; of KWOK).
PASS_PERIOD = {"sim": 60, "controlplane": 5}


@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_a_rollout_at_one_pass_per_period_takes_every_step_that_can_be_taken(
        backend, workers):
    """A job that runs one pass per period spends a period only where the cluster has
    something to do: per Instance, create; route once ready; hand over once available;
    drain once unrouted; and the pass that sees the old pods gone starts the next
    (tests/bench/bench_rollout.py). The control plane moves 3 Instances, as it always
    has: a gang of 4 takes 18 passes (the ideal's 17 and one), the bound exactly, and
    KWOK's lag on a loaded machine would leave it no pass to spare."""
    instances = 4 if backend.name == "sim" else 3
    life = {**SURGE, "minReadySeconds": 0}
    scenario, change = backend.converged(replicas=instances, workers=workers, grace=1,
                                         lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    ideal = 4 * instances + 1
    for passes in range(1, 3 * ideal):
        scenario.run_pass()
        target = scenario.replica(NAME)["spec"]["revision"]
        found = rows(scenario)
        if len(found) == instances and all(
                r["phase"] == "Ready" and not r.get("operation") and r["revision"] == target
                for r in found.values()):
            break
        scenario.advance(PASS_PERIOD[backend.name])
    else:
        raise AssertionError(f"the rollout did not finish in {passes} passes")
    assert passes <= int(1.1 * ideal), (passes, ideal)
