"""Rules of the documents the product once differed from, one scenario each, on the
simulated cluster with the invariants checked after every pass: those that need the
simulated clock or its faults. The scenarios that run the same on the real control
plane are written once, for both backends, in ``tests/test_documented_rules_both.py``."""

from __future__ import annotations

from omegitops.cluster.sim import SimCluster
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


# -- 4. a full window once a scheduling gate lifts, however the passes fall ------------

GATE = "kueue.x-k8s.io/admission"
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
