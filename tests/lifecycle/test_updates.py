"""Updates (update-strategies.txt, min-ready-seconds.txt): the four strategies, their
budgets and holds, driven pass by pass with the budgets checked after every pass."""

from __future__ import annotations

import pytest

from omegitops.render import pods as P
from tests.fleet import strategy
from tests.scenario import converged

NAME = "svc-engine"


make = converged


def revision(scenario) -> str:
    return scenario.replica(NAME)["spec"]["revision"]


def rows(scenario) -> dict[int, dict]:
    return {row["index"]: row for row in scenario.rows(NAME)}


def serving_never_below(desired: int):
    def watch(scenario):
        assert scenario.status(NAME)["servingReplicas"] >= desired, scenario.rows(NAME)
    return watch


def unavailable_at_most(budget: int, desired: int):
    def watch(scenario):
        status = scenario.status(NAME)
        assert desired - status["servingReplicas"] <= budget, scenario.rows(NAME)
    return watch


def messages(scenario, reason):
    return [e["message"] for e in scenario.events(reason)]


# -- SurgeThenDrain ---------------------------------------------------------------


def test_surge_then_drain_single_pod_takes_the_other_ordinal(tmp_path):
    scenario, change = make(tmp_path, replicas=2,
                            lifecycle=strategy("SurgeThenDrain", maxSurge="25%",
                                               maxUnavailable="25%"))
    scenario.watches.append(serving_never_below(2))
    before = revision(scenario)
    change(image="sglang:v2")
    scenario.run_pass()
    after = revision(scenario)
    assert after != before
    # 25% of two Instances is one: one Instance surges at a time.
    moving = [r for r in rows(scenario).values() if r["operation"]]
    assert len(moving) == 1 and moving[0]["operation"]["strategy"] == "SurgeThenDrain"
    seen_steps = set()

    def steps(s):
        for row in s.rows(NAME):
            if row["operation"]:
                seen_steps.add(row["operation"]["step"])
    scenario.watches.append(steps)
    scenario.until_idle()
    # HandOver is taken in the pass that finds the new pod available (one step whose
    # precondition holds leads to the next), so no pass ends on it.
    assert {"SurgeCreate", "SurgeWaitReady", "SurgeWaitAvailable", "DrainOld",
            "WaitDrained"} <= seen_steps | {"SurgeCreate"}
    final = rows(scenario)
    assert {i: (r["revision"], r["incarnation"], r["phase"]) for i, r in final.items()} == {
        0: (after, 1, "Ready"), 1: (after, 1, "Ready")}
    assert sorted(p["metadata"]["name"] for p in scenario.pods()) == [
        "svc-engine-0-default-1", "svc-engine-1-default-1"]


def test_surge_then_drain_without_budgets_moves_everything_at_once(tmp_path):
    scenario, change = make(tmp_path, replicas=3)
    change(image="sglang:v2")
    scenario.run_pass()
    assert all(r["operation"]["mode"] == "Surge" for r in rows(scenario).values())


def test_surge_then_drain_gang_gets_a_replacement_at_a_new_index(tmp_path):
    scenario, change = make(tmp_path, replicas=2, workers=1,
                            lifecycle=strategy(maxSurge=1, maxUnavailable=0))
    scenario.watches.append(serving_never_below(2))
    change(image="sglang:v2")
    scenario.run_pass()
    current = rows(scenario)
    assert current[0]["operation"]["replacement"] == 2
    assert current[2]["phase"] == "Creating" and current[2]["incarnation"] == 1
    scenario.until_idle()
    final = rows(scenario)
    # Instance 1's replacement takes the lowest free index: 0, whose old pods are gone.
    assert sorted(final) == [0, 2]
    assert all(r["revision"] == revision(scenario) for r in final.values())
    assert sorted(p["metadata"]["name"] for p in scenario.pods()) == [
        "svc-engine-0-leader-0", "svc-engine-0-worker-0",
        "svc-engine-2-leader-0", "svc-engine-2-worker-0"]


def test_a_worker_only_change_rolls_the_whole_gang_once(tmp_path):
    scenario, change = make(tmp_path, replicas=1, workers=2)
    change(worker_env={"X": "1"})
    scenario.run_pass()
    scenario.until_idle()
    final = rows(scenario)
    assert sorted(final) == [1]
    assert sorted(p["metadata"]["name"] for p in scenario.pods()) == [
        "svc-engine-1-leader-0", "svc-engine-1-worker-0", "svc-engine-1-worker-1"]
    assert len(messages(scenario, "InstanceUpdating")) == 1


def test_drain_waits_for_the_min_ready_window(tmp_path):
    scenario, change = make(tmp_path, replicas=1, lifecycle={"minReadySeconds": 900})
    change(image="sglang:v2", lifecycle={"minReadySeconds": 900})
    scenario.until(lambda s: rows(s)[0]["operation"]
                   and rows(s)[0]["operation"]["step"] == "SurgeWaitAvailable")
    start = scenario.now()
    old = "svc-engine-0-default-0"
    in_rotation = []
    scenario.watches.append(lambda s: in_rotation.append(
        (s.now(), P.gate_set(s.pods(old)[0]))))
    scenario.until(lambda s: rows(s)[0]["operation"]
                   and rows(s)[0]["operation"]["step"] == "DrainOld")
    # The old pod keeps serving through the whole window; the pass that sees the window
    # end hands over (unroutes it) at once.
    assert (scenario.now() - start).total_seconds() >= 899
    assert all(serving for _, serving in in_rotation[:-1]), in_rotation
    assert not in_rotation[-1][1]


def test_failed_surge_keeps_the_old_pod_serving_and_retries(tmp_path):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s",
                            "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}}}
    scenario, change = make(tmp_path, replicas=1, values=values)
    scenario.watches.append(serving_never_below(1))
    scenario.fault("imagepull", image="sglang:bad")
    change(image="sglang:bad", values=values)
    scenario.until(lambda s: bool(messages(s, "UpdateFailed")))
    row = rows(scenario)[0]
    assert row["phase"] == "Ready" and row["operation"] is None
    assert row["lastFailure"]["reason"] in ("ImagePullBackOff", "ErrImagePull")
    retries = scenario.status(NAME)["revisionRetries"][revision(scenario)]
    assert retries["attempts"] == 1 and not retries["held"]
    # Three attempts, then the revision is held.
    scenario.until(lambda s: bool(messages(s, "RevisionHeld")), max_passes=400)
    assert scenario.status(NAME)["revisionRetries"][revision(scenario)]["held"]
    stalled = next(c for c in scenario.status(NAME)["conditions"]
                   if c["type"] == "RolloutStalled")
    assert stalled["status"] == "True" and stalled["reason"] == "RevisionHeld"


def test_failed_gang_replacement_is_abandoned_with_a_warning(tmp_path):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}
    scenario, change = make(tmp_path, replicas=1, workers=1, values=values)
    scenario.watches.append(serving_never_below(1))
    scenario.fault("imagepull", image="sglang:bad")
    change(image="sglang:bad")
    scenario.until(lambda s: bool(s.events("GangSurgeAbandoned")))
    (event,) = scenario.events("GangSurgeAbandoned")
    assert event["type"] == "Warning"
    assert event["message"].startswith(
        "OMENative component=engine instance=0 abandoned surge to svc-engine-")
    scenario.until(lambda s: sorted(rows(s)) == [0])
    assert rows(scenario)[0]["phase"] == "Ready"


# -- RecreatePod and the in-place strategies -------------------------------------


def test_recreate_pod_keeps_names_and_raises_the_incarnation(tmp_path):
    scenario, change = make(tmp_path, replicas=3,
                            lifecycle=strategy("RecreatePod", maxUnavailable=1))
    scenario.watches.append(unavailable_at_most(1, 3))
    change(image="sglang:v2", lifecycle=strategy("RecreatePod", maxUnavailable=1))
    scenario.run_pass()
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold["gate"] == "Budget"
    assert hold["reason"] == "per-Component unavailability budget 1 exhausted (would become 2)"
    assert hold["target"] == revision(scenario)
    scenario.until_idle()
    final = rows(scenario)
    assert {i: r["incarnation"] for i, r in final.items()} == {0: 2, 1: 2, 2: 2}
    assert sorted(p["metadata"]["name"] for p in scenario.pods()) == [
        "svc-engine-0-default-0", "svc-engine-1-default-0", "svc-engine-2-default-0"]
    assert scenario.status(NAME)["rolloutHold"] is None


def test_in_place_image_change_keeps_pod_name_node_and_incarnation(tmp_path):
    scenario, change = make(tmp_path, replicas=2,
                            lifecycle=strategy("InPlaceIfPossible", maxUnavailable=1))
    scenario.watches.append(unavailable_at_most(1, 2))
    before = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"])
              for p in scenario.pods()}
    change(image="sglang:v2", lifecycle=strategy("InPlaceIfPossible", maxUnavailable=1))
    scenario.run_pass()
    assert [r["operation"]["mode"] for r in rows(scenario).values() if r["operation"]] == [
        "InPlace"]
    scenario.until_idle()
    after = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"])
             for p in scenario.pods()}
    assert after == before
    assert all(r["incarnation"] == 1 and r["revision"] == revision(scenario)
               for r in rows(scenario).values())
    assert all(p["spec"]["containers"][0]["image"] == "sglang:v2" for p in scenario.pods())


@pytest.mark.parametrize("kind", ["InPlaceIfPossible", "InPlaceOnly"])
def test_in_place_update_moves_the_revision_label_with_the_images(tmp_path, kind):
    """The images and the ``ome.io/revision`` label change in one patch, so a pod never
    carries a revision label whose template it does not run (checked every pass)."""
    life = strategy(kind, maxUnavailable=1)
    scenario, change = make(tmp_path, replicas=2, lifecycle=life)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in scenario.pods()}
    change(image="sglang:v2", lifecycle=life)
    scenario.until_idle()
    target = revision(scenario)
    pods = scenario.pods()
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods} == uids
    assert {p["metadata"]["labels"]["ome.io/revision"] for p in pods} == {target}
    assert {p["metadata"]["labels"]["ome.io/instance-incarnation"] for p in pods} == {"1"}


@pytest.mark.parametrize("life, incarnation, names", [
    (strategy("InPlaceIfPossible", maxUnavailable=1), 1,
     ["svc-engine-0-default-0", "svc-engine-1-default-0"]),
    (strategy("RecreatePod", maxUnavailable=1), 2,
     ["svc-engine-0-default-0", "svc-engine-1-default-0"]),
    (strategy("SurgeThenDrain", maxSurge=1), 1,
     ["svc-engine-0-default-1", "svc-engine-1-default-1"]),
])
def test_rows_rebuilt_from_pods_after_a_rollout_start_no_second_update(
        tmp_path, life, incarnation, names):
    """An InferenceReplica deleted by hand: each row takes its revision and its
    incarnation from its pods' labels, so no updated Instance moves again."""
    from omegitops.cluster.sim import SimCluster

    scenario, change = make(tmp_path, replicas=2, lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    scenario.until_idle()
    target = revision(scenario)
    uids = sorted(p["metadata"]["uid"] for p in scenario.pods())
    updates = len(messages(scenario, "InstanceUpdating"))
    with SimCluster(scenario.path) as cluster:
        cluster.delete_object("InferenceReplica", "demo", NAME)
    scenario.until_idle()
    assert {i: (r["revision"], r["incarnation"], r["phase"]) for i, r in rows(scenario).items()
            } == {0: (target, incarnation, "Ready"), 1: (target, incarnation, "Ready")}
    assert len(messages(scenario, "InstanceUpdating")) == updates
    assert sorted(p["metadata"]["uid"] for p in scenario.pods()) == uids
    assert sorted(p["metadata"]["name"] for p in scenario.pods()) == names


def test_in_place_without_mark_not_ready_stays_in_rotation(tmp_path):
    life = {"updateStrategy": {"type": "InPlaceIfPossible",
                               "inPlaceUpdateStrategy": {"markNotReadyDuringLifecycle": False}}}
    scenario, change = make(tmp_path, replicas=1, lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    scenario.run_pass()
    scenario.run_pass()
    # The gate was never cleared.
    assert all(P.gate_set(p) for p in scenario.pods())
    scenario.until_idle()
    assert rows(scenario)[0]["revision"] == revision(scenario)


def test_in_place_if_possible_recreates_for_other_changes(tmp_path):
    life = strategy("InPlaceIfPossible")
    scenario, change = make(tmp_path, replicas=1, lifecycle=life)
    change(env={"LOG": "debug"}, lifecycle=life)
    scenario.run_pass()
    assert rows(scenario)[0]["operation"]["mode"] == "Drain"
    scenario.until_idle()
    assert rows(scenario)[0]["incarnation"] == 2


def test_in_place_only_refuses_other_changes(tmp_path):
    life = strategy("InPlaceOnly")
    scenario, change = make(tmp_path, replicas=2, lifecycle=life)
    before = revision(scenario)
    change(env={"LOG": "debug"}, lifecycle=life)
    scenario.until_idle()
    assert all(r["revision"] == before and r["operation"] is None
               for r in rows(scenario).values())
    refusals = scenario.events("InPlaceUpdateNotPossible")
    assert [e["message"] for e in refusals] == [
        ("OMENative component=engine instance=0 rejected update: InPlaceOnly strategy but diff "
        "exceeds container images"),
        ("OMENative component=engine instance=1 rejected update: InPlaceOnly strategy but diff "
        "exceeds container images")]
    assert all(e["type"] == "Warning" and e["count"] == 1 for e in refusals)
    stalled = next(c for c in scenario.status(NAME)["conditions"]
                   if c["type"] == "RolloutStalled")
    assert stalled["status"] == "True"
    # Changing the type lets it go ahead.
    change(env={"LOG": "debug"}, lifecycle=strategy("InPlaceIfPossible"))
    scenario.until_idle()
    assert all(r["revision"] != before for r in rows(scenario).values())


def test_partition_stages_the_rollout_as_the_document_shows(tmp_path):
    life = strategy("InPlaceIfPossible", partition=1, maxUnavailable=1)
    scenario, change = make(tmp_path, replicas=2, lifecycle=life)
    before = revision(scenario)
    change(image="sglang:v2", lifecycle=life)
    scenario.until_idle()
    target = revision(scenario)
    assert {i: r["revision"] for i, r in rows(scenario).items()} == {0: before, 1: target}
    ready = next(c for c in scenario.status(NAME)["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "Staged"
    assert ready["message"] == (f"Staged at partition 1: 1/2 Instances on {target}, "
                                "1 held on the prior revision")
    change(image="sglang:v2", lifecycle=strategy("InPlaceIfPossible", maxUnavailable=1))
    scenario.until_idle()
    assert {r["revision"] for r in rows(scenario).values()} == {target}


@pytest.mark.parametrize("what", [
    {"lifecycle": strategy("RecreatePod", maxUnavailable=1)},
    {"lifecycle": {"minReadySeconds": 60}},
    {"lifecycle": strategy(maxSurge=3, maxUnavailable=2)},
    # restart-policy.txt: changing the policy doesn't start a rollout.
    {"lifecycle": {"restartPolicy": "RecreateInstanceOnPodRestart"}},
])
def test_lifecycle_only_changes_start_no_rollout(tmp_path, what):
    scenario, change = make(tmp_path, replicas=2)
    before = revision(scenario)
    change(**what)
    result = scenario.run_pass()
    assert revision(scenario) == before
    assert all(r["operation"] is None for r in rows(scenario).values())
    assert not [a for _, plan in result.plans for a in plan.actions]


# -- extra pods and holds ----------------------------------------------------------


def test_terminating_pods_of_a_scaled_away_instance_hold_a_surge_slot(tmp_path):
    slow = {"sim.omegitops.io/exit-seconds": "100"}
    life = strategy(maxSurge=1, maxUnavailable=0)
    scenario, change = make(tmp_path, replicas=3, lifecycle=life, grace=120,
                            annotations=slow)
    change(replicas=2, image="sglang:v2", lifecycle=life, grace=120, annotations=slow)
    scenario.until(lambda s: any("Terminating pod" in (s.status(NAME)["rolloutHold"] or {})
                                 .get("reason", "") for _ in [0]))
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold["reason"].startswith("per-Component surge budget 1 exhausted (would become 2); ")
    assert ("Terminating pod svc-engine-2-default-0 still counts against the surge budget "
            "until its deletion grace elapses") in hold["reason"]
    scenario.until_idle()
    assert {r["revision"] for r in rows(scenario).values()} == {revision(scenario)}


def test_changing_the_strategy_mid_rollout(tmp_path):
    life = strategy("SurgeThenDrain", maxSurge=1)
    scenario, change = make(tmp_path, replicas=2, lifecycle=life, grace=30)
    change(image="sglang:v2", lifecycle=life, grace=30)
    scenario.run_pass()
    moving = [r for r in rows(scenario).values() if r["operation"]]
    assert len(moving) == 1
    change(image="sglang:v2", lifecycle=strategy("RecreatePod"), grace=30)
    scenario.until_idle()
    strategies = [m for m in messages(scenario, "InstanceUpdating")]
    assert "SurgeThenDrain: Surge" in strategies[0]
    assert "RecreatePod: Drain" in strategies[1]


# -- the template changing mid-surge -------------------------------------------------


def step_of(scenario, index=0):
    operation = rows(scenario)[index]["operation"] or {}
    return operation.get("step")


def test_superseded_surge_is_abandoned_and_resurges(tmp_path):
    scenario, change = make(tmp_path, replicas=1, grace=5)
    scenario.watches.append(serving_never_below(1))
    first = revision(scenario)
    change(image="sglang:v2", grace=5)
    scenario.until(lambda s: step_of(s) == "SurgeWaitAvailable")
    second = revision(scenario)
    change(image="sglang:v3", grace=5)
    scenario.run_pass()
    third = revision(scenario)
    (event,) = scenario.events("SurgeAbandoned")
    assert event["type"] == "Normal"
    assert event["message"] == (f"OMENative component=engine instance=0 abandoned superseded "
                                f"surge to {second}; re-surging toward {third}")
    scenario.until_idle()
    assert rows(scenario)[0]["revision"] == third and first != third


def test_reverting_mid_surge_keeps_the_running_revision(tmp_path):
    scenario, change = make(tmp_path, replicas=1, grace=5,
                            values={"lifecycle": {"abandonedReplacementGracePeriod": "30s"}})
    scenario.watches.append(serving_never_below(1))
    first = revision(scenario)
    change(image="sglang:v2", grace=5)
    scenario.until(lambda s: step_of(s) == "SurgeWaitReady")
    second = revision(scenario)
    change(image="sglang:v1", grace=5)
    scenario.until_idle()
    (event,) = scenario.events("SurgeAbandoned")
    assert event["message"] == (f"OMENative component=engine instance=0 abandoned surge to "
                                f"withdrawn revision {second}; the Instance stays on revision "
                                f"{first} instead")
    assert len(messages(scenario, "InstanceUpdating")) == 1  # no new update starts
    assert rows(scenario)[0]["revision"] == first
    assert [p["metadata"]["name"] for p in scenario.pods()] == ["svc-engine-0-default-0"]


def test_past_hand_over_the_surge_finishes_then_updates_again(tmp_path):
    scenario, change = make(tmp_path, replicas=1, grace=5)
    change(image="sglang:v2", grace=5)
    scenario.until(lambda s: step_of(s) == "DrainOld")
    second = revision(scenario)
    change(image="sglang:v3", grace=5)
    scenario.until_idle()
    third = revision(scenario)
    updated = messages(scenario, "InstanceUpdated")
    assert updated[0].startswith(f"OMENative component=engine instance=0 updated to {second}")
    assert updated[1].startswith(f"OMENative component=engine instance=0 updated to {third}")
    assert not scenario.events("SurgeAbandoned")


def test_replacement_lost_after_hand_over_returns_the_source(tmp_path):
    scenario, change = make(tmp_path, replicas=1, grace=5)
    first = revision(scenario)
    change(image="sglang:v2", grace=5)
    scenario.until(lambda s: step_of(s) == "DrainOld")
    second = revision(scenario)
    scenario.fault("evict", pod="svc-engine-0-default-1")
    change(image="sglang:v3", grace=5)
    scenario.run_pass()
    (event,) = scenario.events("SurgeAbandoned")
    assert event["message"] == (
        f"OMENative component=engine instance=0 abandoned superseded surge to {second}; the "
        "replacement was lost after it took over serving and nothing is rebuilt at it; the "
        f"source returns to rotation on revision {first}")
    row = rows(scenario)[0]
    assert row["phase"] == "Ready" and row["revision"] == first
    scenario.until_idle()
    assert rows(scenario)[0]["revision"] == revision(scenario)


def test_replacement_lost_with_no_source_standing_is_a_fresh_start(tmp_path):
    scenario, change = make(tmp_path, replicas=1, grace=5)
    change(image="sglang:v2", grace=5)
    scenario.until(lambda s: step_of(s) == "WaitDrained")
    second = revision(scenario)
    scenario.fault("evict", pod="svc-engine-0-default-1")
    change(image="sglang:v3", grace=5)
    third_repo_revision = None
    scenario.run_pass()
    third_repo_revision = revision(scenario)
    (event,) = scenario.events("SurgeAbandoned")
    assert event["message"] == (
        f"OMENative component=engine instance=0 abandoned superseded surge to {second}; no "
        "source pod stands, so the Instance re-enters as a fresh start at revision "
        f"{third_repo_revision}")
    assert rows(scenario)[0]["phase"] == "Failed"
    scenario.until_idle()
    row = rows(scenario)[0]
    assert row["phase"] == "Ready" and row["revision"] == third_repo_revision


def test_superseded_gang_surge_is_abandoned_with_a_normal_event(tmp_path):
    scenario, change = make(tmp_path, replicas=1, workers=1, grace=5)
    scenario.watches.append(serving_never_below(1))
    change(image="sglang:v2", grace=5)
    scenario.until(lambda s: step_of(s) == "SurgeWaitReady")
    second = revision(scenario)
    change(image="sglang:v3", grace=5)
    scenario.run_pass()
    (event,) = scenario.events("GangSurgeAbandoned")
    assert event["type"] == "Normal"
    assert event["message"] == (f"OMENative component=engine instance=0 abandoned superseded "
                                f"surge to {second}; re-surging toward {revision(scenario)}")
    scenario.until_idle()
    assert {r["revision"] for r in rows(scenario).values()} == {revision(scenario)}
    assert len(rows(scenario)) == 1


def test_unschedulable_surge_fails_after_the_grace_and_leaves_an_extra(tmp_path):
    values = {"lifecycle": {"unschedulableGracePeriod": "15m"}}
    life = strategy(maxSurge=1)
    scenario, change = make(tmp_path, replicas=2, values=values, lifecycle=life)
    scenario.watches.append(serving_never_below(2))
    scenario.fault("unschedulable")
    change(image="sglang:v2", values=values, lifecycle=life)
    scenario.until(lambda s: any((r["operation"] or {}).get("waiting")
                                 for r in rows(s).values()))
    moving = next(r for r in rows(scenario).values() if r["operation"])
    assert moving["operation"]["waiting"] == (
        f"pod svc-engine-{moving['index']}-default-1 is unschedulable: 0/10 nodes are "
        "available: 10 node(s) were unschedulable.")
    start = scenario.now()
    scenario.until(lambda s: bool(messages(s, "UpdateFailed")))
    assert (scenario.now() - start).total_seconds() >= 15 * 60 - 2
    failed = next(r for r in rows(scenario).values() if r["lastFailure"])
    assert failed["lastFailure"]["reason"] == "Unschedulable"
    scenario.run_pass()
    hold = scenario.status(NAME)["rolloutHold"]
    extra = f"svc-engine-{failed['index']}-default-1"
    assert hold["reason"] == (
        "per-Component surge budget 1 exhausted (would become 2); extra pod "
        f"{extra} holds a surge slot until a start on its Instance replaces it")
    scenario.fault("unschedulable", clear=True)
    scenario.until_idle()
    assert {r["revision"] for r in rows(scenario).values()} == {revision(scenario)}


def test_a_replacement_that_never_served_goes_with_the_abandon_grace(tmp_path):
    """update-strategies.txt: a pod that never served is deleted with
    abandonedReplacementGracePeriod instead of its own terminationGracePeriodSeconds."""
    from omegitops.app.passes import plan_all
    from omegitops.cluster.sim import SimCluster
    from omegitops.model.actions import DeletePod

    values = {"lifecycle": {"abandonedReplacementGracePeriod": "30s"}}
    scenario, change = make(tmp_path, replicas=1, grace=300, values=values)
    change(image="sglang:v2")
    scenario.until(lambda s: step_of(s) == "SurgeWaitReady")
    change(image="sglang:v3")
    with SimCluster(scenario.path) as cluster:  # the plan, without applying it
        result = plan_all(cluster, scenario.items())
    deletes = [a for _, plan in result.plans for a in plan.actions if isinstance(a, DeletePod)]
    assert deletes == [DeletePod("demo", "svc-engine-0-default-1", 30)]
