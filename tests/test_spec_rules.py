"""Rules of the documents the product once differed from, one scenario each, on the
simulated cluster with the invariants checked after every pass. The same scenarios
run on the real control plane in ``tests/controlplane/test_spec_rules.py``."""

from __future__ import annotations

from tests.fleet import strategy, write_service
from tests.scenario import Scenario, converged

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
    scenario, pod = _evicted_while_restarting(tmp_path, workers=1)
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
