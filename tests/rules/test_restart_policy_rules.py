"""restart-policy.txt: what OME repairs when a pod of a ready Instance fails.

The rules of ``restart-policy.txt``, one scenario each: those where the product once differed from
the document. A test that takes the ``backend`` fixture is written once against a
driver (``tests/backends.py``) and runs on both backends: on the simulated cluster,
where ``advance`` jumps the clock, and on the real control plane (marked
``controlplane``), each pass as the job's ServiceAccount on KWOK's pod timings and the
wall clock. A test that takes ``tmp_path`` needs the simulated clock or its faults and
runs on ``sim:`` only. The invariants of ``tests/scenario.py`` hold after every pass.

More of the document, pass by pass on ``sim:``: ``tests/lifecycle/test_repairs.py``,
``tests/lifecycle/test_lost_nodes.py``, ``tests/lifecycle/test_updates.py``.
"""

from __future__ import annotations

import pytest

from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.backends import NAME, messages, rows, settled
from tests.fleet import strategy
from tests.scenario import converged

RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}
SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


# -- 5. incarnations ------------------------------------------------------------------------

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


# -- a new revision reaching a Failed Instance that has no pod ---------------------------

@pytest.mark.parametrize("kind", ["InPlaceIfPossible", "InPlaceOnly", "SurgeThenDrain"])
def test_a_new_revision_rebuilds_a_failed_instance_that_has_no_pod(tmp_path, kind):
    """restart-policy.txt: "OME keeps a Failed Instance and its pods for you to inspect
    until you reset it or a new revision reaches it". With no pod left, an images-only
    revision under InPlaceIfPossible started an in-place update of a pod that did not
    exist (0/0 at PatchImages), waited out the 30-minute deadline and failed with
    DeadlineExceeded; only a later run rebuilt it. It is rebuilt at once now, on its
    incarnation (instances.txt: the rebuild of a failed Instance keeps it)."""
    values = {"lifecycle": {"instanceReadyTimeout": "30m", "unschedulableGracePeriod": "5m"}}
    scenario, change = converged(tmp_path, replicas=1, grace=5, lifecycle=strategy(kind),
                                 values=values)
    scenario.fault("evict", pod=f"{NAME}-0-default-0")
    scenario.fault("unschedulable")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Failed")
    incarnation = rows(scenario)[0]["incarnation"]
    with SimCluster(scenario.path) as cluster:
        for pod in cluster.list_pods():  # what is left goes, as by `kubectl delete`
            cluster.delete_pod("demo", pod["metadata"]["name"], grace_seconds=0)
    scenario.fault("unschedulable", clear=True)
    started = scenario.now()
    change(image="sglang:v2")
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["operation"]) == ("Ready", None), row
    assert row["revision"] == scenario.replica(NAME)["spec"]["revision"]
    assert row["incarnation"] == incarnation
    assert (scenario.now() - started).total_seconds() < 300
    assert not scenario.events("InPlaceUpdateNotPossible")
    assert not [m for m in messages(scenario, "UpdateFailed") if "DeadlineExceeded" in m]
