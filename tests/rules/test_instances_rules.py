"""instances.txt: Instances created, restarted, scaled down and timed as one unit.

The rules of ``instances.txt``, one scenario each: those where the product once differed from
the document. A test that takes the ``backend`` fixture is written once against a
driver (``tests/backends.py``) and runs on both backends: on the simulated cluster,
where ``advance`` jumps the clock, and on the real control plane (marked
``controlplane``), each pass as the job's ServiceAccount on KWOK's pod timings and the
wall clock. A test that takes ``tmp_path`` needs the simulated clock or its faults and
runs on ``sim:`` only. The invariants of ``tests/scenario.py`` hold after every pass.

More of the document, pass by pass on ``sim:``: ``tests/lifecycle/test_instances.py``,
``tests/lifecycle/test_repairs.py``, ``tests/lifecycle/test_lost_nodes.py``; on the
control plane only: ``tests/controlplane/test_documented_rules.py``.
"""

from __future__ import annotations

import pytest

from omegitops.render import pods as P
from tests.backends import NAME, messages, rows, settled, step
from tests.fleet import strategy
from tests.scenario import converged

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


def _evicted_while_restarting(tmp_path, **shape):
    scenario, _ = converged(tmp_path, replicas=1, **shape)
    pod = f"{NAME}-0-" + ("worker-0" if shape.get("workers") else "default-0")
    scenario.fault("oom", pod=pod)
    scenario.until(lambda s: step(s) == "WaitReady" and rows(s)[0]["phase"] == "Restarting")
    scenario.fault("evict", pod=pod)
    scenario.until_idle()
    return scenario, pod


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

@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_scale_down_keeps_ready_instances_before_one_that_does_not_serve(backend, workers):
    """instances.txt: "It fills the remaining places with Ready Instances before the
    others, lowest indices first, and removes the rest." Instance 0 still rests in
    phase Ready, but its pod's readiness probe fails, so it is not counted in READY: a
    scale-down from 3 to 2 keeps Instances 1 and 2, and READY stays 2/2 (it kept 0 and
    1, and READY fell to 1/2)."""
    scenario, change = backend.converged(replicas=3, workers=workers, grace=2)
    scenario.fault("hang", f"{NAME}-0-" + ("worker-0" if workers else "default-0"))
    scenario.until(lambda s: s.status(NAME)["readyReplicas"] == 2)
    assert rows(scenario)[0]["phase"] == "Ready"
    change(replicas=2)
    scenario.until(settled, seconds=180)
    assert sorted(rows(scenario)) == [1, 2]
    status = scenario.status(NAME)
    assert (status["readyReplicas"], status["servingReplicas"]) == (2, 2), status

# -- 7, 9. incarnations -----------------------------------------------------------------

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

# -- 6. a held revision's leftover pod does not take the serving Instance's availability -

def test_a_held_revisions_leftover_surge_pod_leaves_the_old_pod_available(tmp_path, cli):
    """instances.txt: "An Instance counts toward a state when at least its desired number
    of pods do, so it still counts during a surge"; min-ready-seconds.txt: a pod is
    Available once it has stayed Ready for minReadySeconds. The old pod serves, Ready
    all along, while the revision's attempts fail and it is held, and the replacement
    the last attempt left stays in ImagePullBackOff: the Instance stays available, in
    the status and in ``get irep``."""
    values = {"lifecycle": {"stuckPodGracePeriod": "60s",
                            "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}}}
    life = {"minReadySeconds": 60, **SURGE}
    scenario, change = converged(tmp_path, replicas=1, values=values, lifecycle=life)
    counts: list[tuple] = []
    scenario.watches.append(lambda s: counts.append(
        (s.now(), s.status(NAME)["readyReplicas"], s.status(NAME)["availableReplicas"])))
    scenario.fault("imagepull", image="sglang:unpullable")
    change(image="sglang:unpullable", values=values, lifecycle=life)
    scenario.until(lambda s: bool(s.events("RevisionHeld")))
    for _ in range(10):  # 30 minutes with the revision held
        scenario.run_pass()
        scenario.advance(180)
    leftover = [p for p in scenario.pods(f"{NAME}-0-default-")
                if P.revision_of(p) != P.revision_of(scenario.pods(f"{NAME}-0-default-0")[0])]
    assert leftover, "the failed attempt's replacement is still there"
    waiting = leftover[0]["status"]["containerStatuses"][0]["state"].get("waiting") or {}
    assert waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull"), leftover[0]
    assert {(ready, available) for _, ready, available in counts} == {(1, 1)}, counts
    code, out, err = cli("get", "irep", "-n", "demo", "--cluster", f"sim:{scenario.path}")
    assert code == 0, err
    (line,) = [line.split() for line in out.splitlines() if line.startswith(NAME)]
    assert line[2:6] == ["1", "1", "1", "1"], out


# -- 5. the rebuild of a Failed Instance keeps its incarnation --------------------------

UNPULLABLE = "sglang:unpullable"


@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_a_failed_instance_rebuilt_by_a_new_revision_keeps_its_incarnation(
        backend, workers):
    """instances.txt: the incarnation "stays the same through ... the rebuild of a
    failed or Pending Instance", and "a restart raises the incarnation by one". An
    Instance whose Create failed (its image can't be pulled) is rebuilt by the next
    revision, here under RecreatePod, which deletes its pods and builds them again under
    the same names: a rebuild, so still incarnation 1. A restart then takes it to 2 (the
    rebuild had raised it to 2, and the restart to 3)."""
    from tests.fleet import write_service

    service = {"replicas": 1, "workers": workers, "grace": 2,
               "lifecycle": {**strategy("RecreatePod", maxUnavailable=1), **RECREATE},
               "values": {"lifecycle": {"instanceReadyTimeout": "3m",
                                        "stuckPodGracePeriod": "30s"}}}
    scenario = backend.scenario(**service, image=UNPULLABLE)
    scenario.fault("imagepull", image=UNPULLABLE)
    scenario.run_pass()
    scenario.until(lambda s: rows(s)[0]["phase"] == "Failed", seconds=240)
    assert rows(scenario)[0]["incarnation"] == 1
    write_service(scenario.repo, namespace=scenario.namespace, **service, image="sglang:v2")
    scenario.until(settled, seconds=180)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 1), row
    assert {p["metadata"]["labels"]["ome.io/instance-incarnation"]
            for p in scenario.pods(f"{NAME}-")} == {"1"}
    scenario.fault("oom", f"{NAME}-0-" + ("worker-0" if workers else "default-0"))
    scenario.until(lambda s: bool(s.events("RestartTriggered")) and settled(s), seconds=180)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 2), row
    assert "(incarnation=2)" in messages(scenario, "RestartTriggered")[0]

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

PERIOD = 300  # the shipped CronJob runs every 5 minutes


def _lift_gate(scenario, pod: str):
    from omegitops.cluster.sim import SimCluster

    with SimCluster(scenario.path) as cluster:
        body = cluster.get_object("Pod", "demo", pod)
        body["spec"]["schedulingGates"] = []
        cluster.replace_object(body)


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


# -- steering retries off a node never leaves an Instance nowhere to run -------------------

def _hang_the_attempt(scenario, target: str) -> str:
    """Hang the pod the Instance's current attempt made, once placed: its node."""
    from omegitops.cluster.sim import SimCluster

    scenario.until(lambda s: rows(s)[0]["phase"] == "Updating" and step(s) == "WaitReady"
                   and any(
        P.node_of(p) and P.revision_of(p) == target and not P.is_terminating(p)
        for p in s.pods()))
    (pod,) = [p for p in scenario.pods() if P.revision_of(p) == target
              and not P.is_terminating(p)]
    with SimCluster(scenario.path) as cluster:
        cluster.inject_fault("hang", pod=pod["metadata"]["name"])
    return P.node_of(pod)


@pytest.mark.parametrize("then", ["same-revision", "new-revision"])
def test_steering_drops_the_oldest_node_when_the_pod_fits_nowhere_else(tmp_path, then):
    """instances.txt: "When a failure didn't come from the revision, and the attempt's
    pods all ran on one node, OME steers the next attempt off that node", within
    autoMigrate.maxAttempts moves. A pod that fits on two nodes only failed on one, then
    on the other: its next attempt kept off both and fitted nowhere, for good, even
    after a new revision. An attempt that cannot be placed at all now gives the oldest
    exclusion back, and the steering ends with the revision it was for."""
    from tests.fleet import write_service
    from tests.scenario import Scenario

    values = {"lifecycle": {"instanceReadyTimeout": "3m", "unschedulableGracePeriod": "2m"},
              "autoMigrate": {"maxAttempts": 3}}
    repo = tmp_path / "repo"
    base = {"replicas": 1, "grace": 5, "lifecycle": strategy("RecreatePod"), "values": values}
    write_service(repo, **base)
    scenario = Scenario(tmp_path, repo, nodes=2, gpus=1)  # the pod fits on two nodes
    scenario.until_idle()
    write_service(repo, **base, image="sglang:v2")
    scenario.run_pass()
    target = scenario.replica(NAME)["spec"]["revision"]
    first = _hang_the_attempt(scenario, target)
    scenario.until(lambda s: rows(s)[0].get("avoidNodes") == [first])
    second = _hang_the_attempt(scenario, target)
    assert second != first
    scenario.until(lambda s: rows(s)[0].get("avoidNodes") == [first, second])
    if then == "new-revision":
        # The steering was for the revision a newer one replaces: it ends.
        write_service(repo, **base, image="sglang:v3")
        scenario.run_pass()
        target = scenario.replica(NAME)["spec"]["revision"]
    # Kept off both, the next attempt fits nowhere: it fails Unschedulable, and the
    # oldest exclusion goes, so the one after it runs on the first node again.
    scenario.until(lambda s: settled(s))
    row = rows(scenario)[0]
    assert (row["phase"], row["operation"], row["revision"]) == ("Ready", None, target), row
    assert "avoidNodes" not in row  # the steering ended with its revision
    (pod,) = scenario.pods()
    kept_off = [e["values"] for term in (((pod["spec"].get("affinity") or {}).get(
        "nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        ).get("nodeSelectorTerms") or [] for e in term.get("matchExpressions") or []
        if e["operator"] == "NotIn"]
    if then == "new-revision":
        assert kept_off == []
    else:
        assert (P.node_of(pod), kept_off) == (first, [[second]])
        assert [e for e in scenario.events("UpdateFailed") if "Unschedulable" in e["message"]]


def test_a_failed_surge_with_no_old_pod_serving_does_not_say_one_does(tmp_path):
    """update-strategies.txt: "If the new pod fails, the old one keeps serving": only
    while there is one. A Failed Instance whose pod never served is reached by a new
    revision; its surge fails, and the warning no longer says the old pod keeps
    serving."""
    values = {"lifecycle": {"instanceReadyTimeout": "3m", "unschedulableGracePeriod": "2m"}}
    scenario, change = converged(tmp_path, replicas=1, grace=5, values=values,
                                 lifecycle=strategy("SurgeThenDrain", maxSurge=1))
    scenario.fault("evict", pod=f"{NAME}-0-default-0")
    scenario.fault("unschedulable")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Failed")
    scenario.fault("unschedulable", clear=True)
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "SurgeWaitReady" and any(
        P.node_of(p) for p in s.pods(f"{NAME}-0-default-1")))
    scenario.fault("hang", pod=f"{NAME}-0-default-1")
    scenario.until(lambda s: bool(s.events("UpdateFailed")))
    (message,) = messages(scenario, "UpdateFailed")
    assert "the old pod keeps serving" not in message, message
    assert rows(scenario)[0]["phase"] == "Failed"


def test_a_failed_surge_steers_off_the_node_of_its_new_pod_only(tmp_path):
    """instances.txt: the next attempt is steered off the node "the attempt's pods all
    ran on": a single pod's surge whose new pod failed on one node, while the old pod
    serves on another, is steered off the new pod's node, and only that one (the old
    pod's node counted too, and nothing was steered)."""
    from tests.fleet import write_service
    from tests.scenario import Scenario

    values = {"lifecycle": {"instanceReadyTimeout": "3m"}, "autoMigrate": {"maxAttempts": 3}}
    repo = tmp_path / "repo"
    base = {"replicas": 1, "grace": 5, "values": values,
            "lifecycle": strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)}
    write_service(repo, **base)
    scenario = Scenario(tmp_path, repo, nodes=3, gpus=1)
    scenario.until_idle()
    write_service(repo, **base, image="sglang:v2")
    new = f"{NAME}-0-default-1"
    scenario.until(lambda s: step(s) == "SurgeWaitReady"
                   and any(P.node_of(p) for p in s.pods(new)))
    (pod,) = scenario.pods(new)
    (old,) = scenario.pods(f"{NAME}-0-default-0")
    assert P.node_of(pod) != P.node_of(old)
    scenario.fault("hang", pod=new)
    scenario.until(lambda s: bool(s.events("UpdateFailed")))
    assert rows(scenario)[0]["avoidNodes"] == [P.node_of(pod)]
