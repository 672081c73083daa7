"""update-strategies.txt: how OME replaces an Instance's pods, and how many move at once.

The rules of ``update-strategies.txt``, one scenario each: those where the product once differed from
the document. A test that takes the ``backend`` fixture is written once against a
driver (``tests/backends.py``) and runs on both backends: on the simulated cluster,
where ``advance`` jumps the clock, and on the real control plane (marked
``controlplane``), each pass as the job's ServiceAccount on KWOK's pod timings and the
wall clock. A test that takes ``tmp_path`` needs the simulated clock or its faults and
runs on ``sim:`` only. The invariants of ``tests/scenario.py`` hold after every pass.

More of the document: pass by pass on ``sim:``, ``tests/lifecycle/test_updates.py``,
``tests/lifecycle/test_gang_size.py``, ``tests/lifecycle/test_update_properties.py``;
the decision alone, ``tests/lifecycle/test_rollout_decision.py``; its settings,
``tests/render/test_resolve.py``, ``tests/manifests/test_validate.py`` and
``tests/model/test_budgets_durations.py``.
"""

from __future__ import annotations

import json

import pytest

from omegitops.lifecycle.status import current_revision
from omegitops.manifests.load import load
from omegitops.model.state import Phase, Row
from omegitops.render import pods as P
from omegitops.report.status import build_report, render_markdown, validate_report
from tests.backends import NAME, rows, serving_gangs, settled, step
from tests.fleet import strategy
from tests.scenario import converged

RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}
SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


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

# -- a partition holds Instances, counted in index order, not index values ------------------

def _at_rest(s) -> bool:
    found = rows(s)
    return (len(found) == s.replica(NAME)["spec"]["replicas"]
            and all(r["phase"] == "Ready" and not r.get("operation") for r in found.values())
            and not s.results[-1].busy)


def _ready_condition(s) -> dict:
    (ready,) = [c for c in s.status(NAME)["conditions"] if c["type"] == "Ready"]
    return ready


@pytest.mark.parametrize("drift", ["gang-surge", "scale-down"])
def test_a_partition_holds_instances_whatever_their_indices(backend, drift):
    """update-strategies.txt: rollingUpdate "can hold some on the old revision"; "With
    the settings above and two Instances, the next change to the pod template moves
    one Instance and holds the other", and the Ready condition reads Staged. The
    indices can have gaps: a gang's surge starts each replacement at the lowest free
    index, so a rollout of two gangs leaves them at [2, 3]; a scale-down that keeps
    the Ready Instances can leave [1, 2]. Partition 1 still holds one Instance, the
    lowest-indexed (it moved both, since none had an index below 1)."""
    life = strategy("SurgeThenDrain", maxSurge=2, maxUnavailable=0)
    if drift == "gang-surge":
        service = {"replicas": 2, "workers": 1}
        scenario, change = backend.converged(**service, grace=2, lifecycle=life)
        change(image="sglang:v2")
        scenario.until(settled, seconds=180)
        drifted = [2, 3]
    else:
        service = {"replicas": 3}
        scenario, change = backend.converged(**service, grace=2, lifecycle=life)
        scenario.fault("hang", f"{NAME}-0-default-0")
        scenario.until(lambda s: s.status(NAME)["readyReplicas"] == 2)
        service = {"replicas": 2}
        change(replicas=2)
        scenario.until(settled, seconds=180)
        drifted = [1, 2]
    assert sorted(rows(scenario)) == drifted
    prior = scenario.replica(NAME)["spec"]["revision"]
    staged = strategy("SurgeThenDrain", maxSurge=2, maxUnavailable=0, partition=1)
    change(**service, image="sglang:v3", lifecycle=staged)
    scenario.run_pass()
    target = scenario.replica(NAME)["spec"]["revision"]
    assert target != prior
    scenario.until(_at_rest, seconds=180)
    found = rows(scenario)
    held = [i for i, r in found.items() if r["revision"] == prior]
    moved = [i for i, r in found.items() if r["revision"] == target]
    assert (held, len(moved)) == ([drifted[0]], 1), found
    ready = _ready_condition(scenario)
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "True", "Staged",
        f"Staged at partition 1: 1/2 Instances on {target}, 1 held on the prior revision")
    # The status report names the same Instance held.
    (engine,) = _report(scenario)["services"][0]["components"]
    assert (engine["staged"]["heldInstances"], engine["staged"]["updatedInstances"]) == (
        [drifted[0]], 1)
    # To finish the rollout, set partition to 0.
    change(**service, image="sglang:v3", lifecycle=life)
    scenario.until(settled, seconds=180)
    assert _ready_condition(scenario)["reason"] == "AllInstancesServing"

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


# -- a surge abandoned while both its pods sit on a silent node ---------------------------

def test_a_surge_abandoned_with_its_source_gone_rebuilds_the_instance(tmp_path):
    """update-strategies.txt: "With the old pod gone too, nothing is left to serve. The
    Instance re-enters Failed with no operation, and OME rebuilds it at the newest
    revision from scratch". A single pod's surge is withdrawn (the change reverted) while
    its new pod and the old one sit on a node that stopped reporting; when the node
    reports again both go in one moment. The Instance was left Ready with no pod, and
    every later pass found nothing to do: the service was down for good. (sim: only: the
    node reports again, and the taint manager's 340 s are the simulated clock's.)"""
    from omegitops.cluster.sim import SimCluster
    from tests.scenario import converged

    values = {"lifecycle": {"instanceReadyTimeout": "30m"}}
    scenario, change = converged(tmp_path, replicas=1, grace=5, lifecycle=SURGE,
                                 values=values)
    change(image="sglang:v2")
    scenario.until(lambda s: len([p for p in s.pods() if P.node_of(p)]) == 2)
    nodes = {P.node_of(p) for p in scenario.pods()}
    assert len(nodes) == 1, nodes  # the scheduler fills the first node first
    (node,) = nodes
    with SimCluster(scenario.path) as cluster:
        cluster.inject_fault("node-down", node=node)
    change()  # reverted: the surge's revision is withdrawn
    scenario.until(lambda s: step(s) == "Abandon")
    scenario.advance(400)  # the taint manager deletes the old pod too
    scenario.run_pass()
    assert all(P.is_terminating(p) for p in scenario.pods())
    with SimCluster(scenario.path) as cluster:
        cluster.inject_fault("node-down", node=node, clear=True)
    # The invariants (tests/scenario.py): no Ready row stands with fewer pods than it needs.
    scenario.until_idle()
    row = rows(scenario)[0]
    assert (row["phase"], row["operation"]) == ("Ready", None), row
    assert row["revision"] == scenario.replica(NAME)["spec"]["revision"]
    assert [P.is_ready(p) for p in scenario.pods()] == [True]
    message = scenario.events("SurgeAbandoned")[-1]["message"]
    assert message.endswith("no source pod stands, so the Instance re-enters as a fresh "
                            f"start at revision {row['revision']}"), message


# -- 8. a staged canary, as the status report and the plan read it -----------------------

CANARY = strategy("SurgeThenDrain", partition=1, maxSurge=1, maxUnavailable=0)


def _staged(s) -> bool:
    """The rollout has moved what the partition lets move, and the pass was quiet."""
    ready = next((c for c in s.status(NAME)["conditions"] if c["type"] == "Ready"), {})
    return ready.get("reason") == "Staged" and not s.results[-1].busy


def _report(scenario) -> dict:
    """The status report of the live cluster, as the job builds it, checked by its schema."""
    report = build_report(load(scenario.repo), [scenario.replica(NAME)], scenario.events(),
                          scenario.now())
    validate_report(report)
    return report


def test_a_staged_canary_is_reported_staged_with_what_finishes_it(backend):
    """update-strategies.txt: with partition 1 and two Instances, the next change moves
    one Instance and holds the other; the InferenceReplica reports Staged in its Ready
    condition; "To finish the rollout, set partition to 0 or remove it". The report says
    so: the component Staged, not Progressing, the held Instance on the current revision
    and the update revision beside it, the Ready condition as the InferenceReplica has
    it, and what a person must do, first in STATUS.md."""
    scenario, change = backend.converged(replicas=2, grace=2, lifecycle=CANARY)
    old = scenario.replica(NAME)["spec"]["revision"]
    change(image="sglang:v2", lifecycle=CANARY)
    scenario.until(_staged)
    new = scenario.replica(NAME)["spec"]["revision"]
    assert {i: r["revision"] for i, r in rows(scenario).items()} == {0: old, 1: new}
    assert scenario.status(NAME)["currentRevision"] == old
    report = _report(scenario)
    (service,) = report["services"]
    (engine,) = service["components"]
    assert (service["health"], engine["health"]) == ("Staged", "Staged"), engine["healthReason"]
    assert (engine["revision"], engine["currentRevision"]) == (new, old)
    staged = engine["staged"]
    assert (staged["partition"], staged["heldInstances"], staged["heldRevision"],
            staged["updateRevision"]) == (1, [0], old, new)
    live = next(c for c in scenario.status(NAME)["conditions"] if c["type"] == "Ready")
    ready = next(c for c in engine["conditions"] if c["type"] == "Ready")
    assert ready == {k: live[k] for k in ready}
    assert (ready["status"], ready["reason"]) == ("True", "Staged")
    (need,) = engine["needsPerson"]
    assert need["reason"] == "Staged"
    assert need["action"] == ("set spec.engine.lifecycle.updateStrategy.rollingUpdate.partition"
                              " in services/svc.yaml to 0, or remove it, to finish the rollout")
    assert report["summary"]["health"]["Staged"] == 1
    markdown = render_markdown(report)
    assert markdown.index("## Needs a person") < markdown.index("| Service | Health |")
    assert f"Instance 0 held on {old}; 1/2 Instances on {new}" in markdown
    assert f"| `{new}` | `{old}` |" in markdown


@pytest.mark.parametrize("update", ["svc-engine-00000000", "svc-engine-ffffffff"])
def test_a_canary_staged_at_half_keeps_its_current_revision(update):
    """update-strategies.txt: a partition holds Instances "on the prior revision": with
    one of two Instances moved, the InferenceReplica's current revision is still the one
    the held Instance runs, whichever name sorts first (a tie never goes to the update
    revision, as a StatefulSet's current revision stays until its rollout ends)."""
    prior = "svc-engine-7b4c2e19"
    staged = [Row(0, 1, Phase.READY, prior), Row(1, 1, Phase.READY, update)]
    assert current_revision(staged, update, 2) == prior
    # Once more Instances run it, the update revision is the current one.
    moved = [*staged, Row(2, 1, Phase.READY, update)]
    assert current_revision(moved, update, 3) == update


def test_a_held_revision_says_how_to_release_it(tmp_path):
    """instances.txt: a revision that keeps failing for a reason of its own is held
    "until a new revision replaces it or you release it"; the report names the
    InferenceReplica's annotation that releases it (docs/troubleshooting.md), first."""
    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}
    scenario, change = converged(tmp_path, replicas=1, values=values, lifecycle=SURGE)
    scenario.fault("imagepull", image="sglang:unpullable")
    change(image="sglang:unpullable")
    scenario.until(lambda s: bool(s.events("RevisionHeld")))
    target = scenario.replica(NAME)["spec"]["revision"]
    (engine,) = _report(scenario)["services"][0]["components"]
    (need,) = engine["needsPerson"]
    assert need["reason"] == "RevisionHeld"
    assert need["action"].endswith(
        f"kubectl annotate inferencereplica {NAME} -n demo ome.io/release-revision={target}")
    markdown = render_markdown(_report(scenario))
    assert "## Needs a person" in markdown and "release-revision" in markdown


def test_the_plan_counts_only_the_instances_the_partition_lets_move(tmp_path, cli):
    """update-strategies.txt: "With the settings above and two Instances, the next change
    to the pod template moves one Instance and holds the other": the plan says one
    Instance moves, and which the partition holds."""
    scenario, change = converged(tmp_path, replicas=2, grace=2, lifecycle=CANARY)
    change(image="sglang:v2", lifecycle=CANARY)
    args = ("plan", "--repo", str(scenario.repo), "--cluster", f"sim:{scenario.path}")
    code, out, err = cli(*args, "-o", "json")
    assert code in (0, 2), err
    (engine,) = json.loads(out)["components"]
    assert (engine["toMove"], engine["heldByPartition"]) == (1, 1)
    code, out, err = cli(*args)
    assert code in (0, 2), err
    assert "\n1 Instance to move to " in out, out
    assert "1 held on its revision by `partition: 1`: set it to 0 to move it too." in out


def test_the_plan_counts_the_instances_a_partition_holds_whatever_their_indices(
        tmp_path, cli):
    """update-strategies.txt: partition 1 and two Instances: one moves, one is held. A
    rollout of two gangs leaves them at [2, 3]; the plan of the next change still says
    one Instance moves and one is held (it said both move)."""
    life = strategy("SurgeThenDrain", maxSurge=2, maxUnavailable=0)
    scenario, change = converged(tmp_path, replicas=2, workers=1, grace=2, lifecycle=life)
    change(image="sglang:v2")
    scenario.until_idle()
    assert sorted(rows(scenario)) == [2, 3]
    change(image="sglang:v3",
           lifecycle=strategy("SurgeThenDrain", maxSurge=2, maxUnavailable=0, partition=1))
    args = ("plan", "--repo", str(scenario.repo), "--cluster", f"sim:{scenario.path}")
    code, out, err = cli(*args, "-o", "json")
    assert code in (0, 2), err
    (engine,) = json.loads(out)["components"]
    assert (engine["toMove"], engine["heldByPartition"]) == (1, 1)


# -- the rollout hold names the gate while nothing can move -------------------------------

def test_in_place_only_refusing_every_instance_holds_the_rollout(backend):
    """update-strategies.txt: "While no Instance of a component can move, the
    component's rollout hold names the gate that stops it." InPlaceOnly refusing every
    Instance stalls the rollout: the hold was empty while RolloutStalled was True."""
    life = strategy("InPlaceOnly")
    scenario, change = backend.converged(replicas=2, grace=2, lifecycle=life)
    change(env={"LOG": "debug"}, lifecycle=life)
    scenario.until(lambda s: bool(s.events("InPlaceUpdateNotPossible")))
    scenario.until(lambda s: not s.results[-1].applied)
    stalled = next(c for c in scenario.status(NAME)["conditions"]
                   if c["type"] == "RolloutStalled")
    assert stalled["status"] == "True"
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold is not None
    assert hold["gate"] == "InPlaceOnly"
    assert hold["reason"] == ("InPlaceOnly strategy but diff exceeds container images "
                              "(Instances 0, 1)")
    assert hold["target"] == scenario.replica(NAME)["spec"]["revision"]
    since = hold["since"]
    scenario.advance(60)
    scenario.run_pass()
    assert scenario.status(NAME)["rolloutHold"]["since"] == since
    # Changing the type lets it go ahead, and the hold goes.
    change(env={"LOG": "debug"}, lifecycle=strategy("InPlaceIfPossible"))
    scenario.until(settled, seconds=180)
    assert scenario.status(NAME)["rolloutHold"] is None


def test_a_held_revision_holds_the_rollout(tmp_path):
    """update-strategies.txt: the rollout hold names the gate while no Instance can move;
    instances.txt: after its attempts the revision is held until a new revision replaces
    it. (sim: only: the image that cannot be pulled is the simulator's fault.)"""
    from tests.scenario import converged

    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}  # no updateRetry: held at once
    scenario, change = converged(tmp_path, replicas=2, grace=2, lifecycle=SURGE,
                                 values=values)
    scenario.fault("imagepull", image="sglang:bad")
    change(image="sglang:bad")
    scenario.until(lambda s: bool(s.events("RevisionHeld")))
    scenario.until_idle()
    target = scenario.replica(NAME)["spec"]["revision"]
    stalled = next(c for c in scenario.status(NAME)["conditions"]
                   if c["type"] == "RolloutStalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "RevisionHeld")
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold is not None
    assert (hold["gate"], hold["target"]) == ("Held", target)
    assert hold["reason"] == f"revision {target} is held after 1 failed attempt"
    assert all(r["revision"] != target for r in rows(scenario).values())
    change(image="sglang:v1")
    scenario.until(lambda s: s.status(NAME)["rolloutHold"] is None)


# -- 3. a label is no reason to recreate --------------------------------------------------

TEAM = {"team": "search"}


def _pod(s) -> dict:
    (pod,) = [p for p in s.pods(f"{NAME}-0-") if not P.is_terminating(p)]
    return pod


def _restarts(pod: dict) -> int:
    return sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or [])


def test_an_image_change_with_a_new_label_is_made_in_place(backend):
    """update-strategies.txt: "When only the images of regular containers change,
    InPlaceIfPossible and InPlaceOnly update a single-pod Instance in place ... A label
    that you add to the pod template reaches the pod only when OME recreates it." An
    image change that also adds a pod label was made by recreating the pod (incarnation
    2): the label is no change that needs a new pod."""
    life = strategy("InPlaceIfPossible")
    scenario, change = backend.converged(replicas=1, grace=2, lifecycle=life)
    before = _pod(scenario)
    change(image="sglang:v2", labels=TEAM)
    scenario.until(settled, seconds=180)
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 1), row
    pod = _pod(scenario)
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    assert pod["spec"]["containers"][0]["image"] == "sglang:v2"
    assert "team" not in pod["metadata"]["labels"]  # until OME recreates it
    assert pod["metadata"]["labels"]["ome.io/revision"] == row["revision"]


def test_in_place_only_moves_a_label_only_change_without_refusing_it(backend):
    """update-strategies.txt: "InPlaceOnly refuses any other change" than images; a
    label that the pod gets only when it is recreated is no change to refuse. A new
    pod label alone was refused with InPlaceUpdateNotPossible and stalled the rollout."""
    life = strategy("InPlaceOnly")
    scenario, change = backend.converged(replicas=2, grace=2, lifecycle=life)
    uids = {p["metadata"]["uid"] for p in scenario.pods(NAME)}
    change(labels=TEAM)
    scenario.until(settled, seconds=180)
    assert not scenario.events("InPlaceUpdateNotPossible")
    assert scenario.status(NAME)["rolloutHold"] is None
    assert {r["incarnation"] for r in rows(scenario).values()} == {1}
    assert {p["metadata"]["uid"] for p in scenario.pods(NAME)} == uids


def test_a_label_only_change_moves_in_place_without_leaving_rotation(backend):
    """update-strategies.txt: a label reaches the pod only when OME recreates it, and
    only images are changed in place: a label-only change leaves the pod as it is
    (same pod, same incarnation, no container restarted) and the Instance moves to the
    new revision. It changes no container, so the pod stays in rotation throughout.
    InPlaceIfPossible recreated the pod (incarnation 2)."""
    life = strategy("InPlaceIfPossible", maxUnavailable=0)
    scenario, change = backend.converged(replicas=1, grace=2, lifecycle=life)
    before = _pod(scenario)
    out: list[int] = []
    scenario.watches.append(
        lambda s: all(P.is_ready(p) and P.gate_set(p) for p in s.pods(NAME))
        or out.append(s.passes))
    change(labels=TEAM)
    # maxUnavailable 0: a move that took the pod out of rotation would be held for good.
    scenario.until(settled, seconds=180)
    assert not out, f"out of rotation after passes {out}"
    row = rows(scenario)[0]
    assert (row["phase"], row["incarnation"]) == ("Ready", 1), row
    assert row["revision"] == scenario.replica(NAME)["spec"]["revision"]
    pod = _pod(scenario)
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    assert _restarts(pod) == _restarts(before)
    assert pod["metadata"]["labels"]["ome.io/revision"] == row["revision"]
    assert scenario.status(NAME)["rolloutHold"] is None


@pytest.mark.parametrize("kind", ["RecreatePod", "SurgeThenDrain"])
def test_a_label_only_change_recreates_under_the_recreating_strategies(backend, kind):
    """update-strategies.txt: RecreatePod and SurgeThenDrain replace the pods for any new
    revision; a label-only change among them."""
    life = strategy(kind, maxSurge=1, maxUnavailable=1)
    scenario, change = backend.converged(replicas=1, grace=2, lifecycle=life)
    before = _pod(scenario)
    change(labels=TEAM)
    scenario.until(settled, seconds=180)
    pod = _pod(scenario)
    assert pod["metadata"]["uid"] != before["metadata"]["uid"]
    assert pod["metadata"]["labels"]["team"] == "search"


# -- 7. a wait past the deadline names what it waits for ----------------------------------

HOLD = "example.com/hold"
DEADLINE = {"lifecycle": {"instanceReadyTimeout": "5m"}}


def _hold(scenario, name: str, finalizers: list[str] | None) -> None:
    """Set (or with None remove) ``name``'s finalizers, as another controller would."""
    from omegitops.cluster.sim import SimCluster

    with SimCluster(scenario.path) as cluster:
        (pod,) = [p for p in cluster.list_pods() if p["metadata"]["name"] == name]
        pod["metadata"]["finalizers"] = finalizers
        cluster.replace_object(pod)


def _listed(cli, scenario) -> str:
    code, out, err = cli("instance", "list", "svc", "-n", "demo", "--cluster",
                         f"sim:{scenario.path}")
    assert code == 0, err
    return out


def test_drained_pods_that_never_go_are_named_past_the_deadline(tmp_path, cli):
    """update-strategies.txt: "The update isn't finished, and the Instance's surge slot
    isn't free, until the drained pods are gone"; instances.txt: "OME never fails an
    Instance whose pods all serve". The wait is allowed, but it has a name: a drained pod
    a finalizer holds stood at WaitDrained past the deadline with ``waiting`` empty."""
    scenario, change = converged(tmp_path, replicas=1, grace=5, lifecycle=SURGE,
                                 values=DEADLINE)
    old = f"{NAME}-0-default-0"
    _hold(scenario, old, [HOLD])
    change(image="sglang:v2")
    scenario.until(lambda s: step(s) == "WaitDrained")
    scenario.advance(600)  # past the operation's deadline
    scenario.run_pass()
    row = rows(scenario)[0]
    assert (row["phase"], row["operation"]["step"]) == ("Updating", "WaitDrained"), row
    waiting = row["operation"]["waiting"]
    assert waiting and old in waiting and HOLD in waiting, waiting
    assert f"(waiting: {waiting})" in _listed(cli, scenario)
    _hold(scenario, old, None)
    scenario.until(settled)
    assert rows(scenario)[0]["operation"] is None


def test_an_abandoned_surge_whose_pod_never_goes_is_named(tmp_path, cli):
    """update-strategies.txt: a surge whose target is withdrawn before the hand-over
    deletes its new pod and the old one keeps serving. A new pod a finalizer holds kept
    the Instance at Abandon past the deadline with ``waiting`` empty: it is named."""
    scenario, change = converged(tmp_path, replicas=1, grace=5, lifecycle=SURGE,
                                 values=DEADLINE)
    change(image="sglang:v2")
    new = f"{NAME}-0-default-1"
    scenario.until(lambda s: bool(s.pods(new)))
    _hold(scenario, new, [HOLD])
    change()  # reverted: the surge's revision is withdrawn
    scenario.until(lambda s: step(s) == "Abandon")
    scenario.advance(600)
    scenario.run_pass()
    row = rows(scenario)[0]
    assert (row["phase"], row["operation"]["step"]) == ("Updating", "Abandon"), row
    waiting = row["operation"]["waiting"]
    assert waiting and new in waiting and HOLD in waiting, waiting
    assert f"(waiting: {waiting})" in _listed(cli, scenario)
    _hold(scenario, new, None)
    scenario.until(settled)
