"""Fault campaigns: random fleets under random faults over hundreds of passes.

Each example writes 1-3 services (single pods and gangs, the four strategies
with budgets and partitions) and drives them pass by pass while:

- the API fails about 10% of the calls, reads and writes (500s, timeouts that
  may have landed, 409 Conflicts on updates), and the job is killed between
  two writes in about 5% of the passes;
- templates change (image or environment), replicas change, a release brings
  an image that cannot be pulled;
- pods crash, are OOM-killed, hang, are evicted, lose their node, and every
  node is cordoned for a while; persistent faults are cleared after a while,
  and a silent node then either reports again or is removed (its pods, kept
  Terminating meanwhile, go by PodGC) and a new machine joins;
- the operator resets Failed Instances and releases held revisions, once
  during the campaign and again when the component has come to rest.

After every pass the invariants of ``tests/chaos.py`` hold; at the end, with
the faults cleared and the API healthy, every component runs its desired
Instances, all Ready on the target revision (below the partition, on theirs),
and one more pass writes nothing.

Sizes: ``OMEGITOPS_CAMPAIGN_EXAMPLES`` examples (default 30) of 100-300 passes
(``OMEGITOPS_CAMPAIGN_PASSES`` raises the upper bound). Examples are derandomized,
so CI runs the same campaigns every time; a nightly run sets a larger size and
``OMEGITOPS_CAMPAIGN_SEED`` to explore new ones.

The second property kills the job alone, with no deadline set (which would turn
an Instance waiting for a write that never came into a Failed one, and hide
it). The tests at the end are the campaigns' findings, each reduced to its
smallest reproduction.
"""

from __future__ import annotations

import copy
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from omegitops.app.passes import run_pass
from omegitops.cluster.errors import Transient
from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.chaos import Campaign, Service
from tests.fleet import strategy, write_service
from tests.scenario import KillAfter, Scenario

EXAMPLES = int(os.environ.get("OMEGITOPS_CAMPAIGN_EXAMPLES", "30"))
MAX_PASSES = int(os.environ.get("OMEGITOPS_CAMPAIGN_PASSES", "300"))
SEED = os.environ.get("OMEGITOPS_CAMPAIGN_SEED")
# Shrinking a campaign of hundreds of passes takes long; the failing example and its
# log are printed either way. OMEGITOPS_CAMPAIGN_SHRINK=1 turns it on.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + (
    [Phase.shrink] if os.environ.get("OMEGITOPS_CAMPAIGN_SHRINK") else [])

STRATEGIES = ["SurgeThenDrain", "RecreatePod", "InPlaceIfPossible", "InPlaceOnly"]
POD_FAULTS = ["crash", "oom", "evict", "hang", "node-down"]


@st.composite
def services(draw, index: int) -> Service:
    kind = draw(st.sampled_from(STRATEGIES))
    surge = draw(st.sampled_from([None, 0, 1, "50%"])) if kind == "SurgeThenDrain" else None
    unavailable = draw(st.sampled_from([None, 1, 2, "25%", "50%"]))
    if kind == "SurgeThenDrain" and surge == 0 and unavailable is None:
        unavailable = 1  # budgets with which nothing could move are refused by validation
    rolling = {k: v for k, v in (("maxSurge", surge), ("maxUnavailable", unavailable),
                                 ("partition", draw(st.sampled_from([0, 0, 0, 1])))) if v}
    lifecycle: dict = {"updateStrategy": {"type": kind}}
    if rolling:
        lifecycle["updateStrategy"]["rollingUpdate"] = rolling
    workers = draw(st.sampled_from([None, None, 1, 2]))
    if workers is None and draw(st.booleans()):
        lifecycle["restartPolicy"] = "RecreateInstanceOnPodRestart"
    if draw(st.booleans()):
        lifecycle["minReadySeconds"] = draw(st.sampled_from([5, 20]))
    return Service(name=f"svc{index}", replicas=draw(st.integers(1, 4)), workers=workers,
                   lifecycle=lifecycle)


@st.composite
def fleets(draw) -> list[Service]:
    return [draw(services(i)) for i in range(draw(st.integers(1, 3)))]


DURATIONS = st.integers(3, 60)  # passes a persistent fault lasts
EVENTS = st.one_of(
    st.tuples(st.just("template"), st.integers(0, 2), st.sampled_from(["image", "env"])),
    st.tuples(st.just("scale"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("bad-image"), st.integers(0, 2), DURATIONS),
    st.tuples(st.just("fault"), st.integers(0, 2), st.sampled_from(POD_FAULTS), DURATIONS),
    st.tuples(st.just("unschedulable"), DURATIONS),
    st.tuples(st.just("recover"), st.integers(0, 2)),
)


@st.composite
def campaigns(draw) -> dict:
    passes = draw(st.integers(100, max(100, MAX_PASSES)))
    chaos_until = passes * 4 // 5
    events = draw(st.lists(st.tuples(st.integers(0, chaos_until), EVENTS),
                           min_size=3, max_size=max(3, passes // 8)))
    return {
        "fleet": draw(fleets()),
        "passes": passes,
        "events": sorted(events, key=lambda e: e[0]),
        "repair_batch": draw(st.sampled_from([1, 2, 10])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def operator_values(repair_batch: int) -> dict:
    return {
        "lifecycle": {
            "stuckPodGracePeriod": "60s",
            "unschedulableGracePeriod": "5m",
            "instanceReadyTimeout": "10m",
            "repairBatchSize": repair_batch,
            "abandonedReplacementGracePeriod": "30s",
            "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"},
        },
        "autoMigrate": {"maxAttempts": 3},
    }


def _settings(test):
    test = settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None,
                    database=None, print_blob=True, phases=PHASES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])(test)
    return seed(int(SEED))(test) if SEED is not None else test


@_settings
@given(campaigns())
def test_fault_campaigns_keep_the_invariants_and_converge(plan):
    with tempfile.TemporaryDirectory() as tmp:
        run_campaign(Path(tmp), plan)


def run_campaign(tmp: Path, plan: dict, echo: bool = False) -> Campaign:
    rng = random.Random(plan["seed"])
    fleet = plan["fleet"]
    campaign = Campaign(tmp, fleet, operator_values(plan["repair_batch"]), rng)
    events = list(plan["events"])
    recovery_at = plan["passes"] * 9 // 10
    try:
        for number in range(plan["passes"]):
            while events and events[0][0] <= number:
                _apply(campaign, events.pop(0)[1])
            campaign.clear_due()
            if number == recovery_at:
                # The operator steps in while the API is still flaky.
                campaign.clear_due(everything=True)
                for svc in fleet:
                    campaign.recover(svc)
            result = campaign.run_pass()
            campaign.settle(result, cap=rng.choice((1.0, 5.0, 30.0, 90.0)))
        campaign.clear_due(everything=True)
        campaign.converge()
        campaign.assert_converged()
        assert campaign.api_failures, "the API never failed: the campaign tested nothing"
    except AssertionError:
        if echo:
            print("\n".join(campaign.log[-40:]))
        raise
    finally:
        if currently_in_test_context():
            note("\n".join(campaign.log))
            note(f"API failures: {dict(campaign.api_failures)}")
    return campaign


def _apply(campaign: Campaign, event: tuple) -> None:
    what, *args = event
    fleet = campaign.services
    if what == "unschedulable":
        campaign.unschedulable(args[0])
        return
    svc = fleet[args[0] % len(fleet)]
    if what == "template":
        campaign.change_template(svc, args[1])
    elif what == "scale":
        campaign.scale(svc, args[1])
    elif what == "bad-image":
        campaign.bad_image(svc, args[1])
    elif what == "fault":
        campaign.pod_fault(args[1], svc, args[2])
    elif what == "recover":
        campaign.recover(svc)


KILL_EXAMPLES = int(os.environ.get("OMEGITOPS_CAMPAIGN_KILL_EXAMPLES", str(max(10, EXAMPLES))))


@settings(max_examples=KILL_EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
          print_blob=True, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(services(0), st.lists(st.sampled_from(["image", "env", "scale"]), min_size=1,
                             max_size=3), st.integers(0, 2**32 - 1))
def test_a_job_killed_between_any_two_writes_never_wedges_an_instance(svc, changes, rng_seed):
    """Kills alone, with no deadline set: a deadline would turn an Instance that waits
    for a write that never came into a Failed one and a retry, and hide the wait."""
    with tempfile.TemporaryDirectory() as tmp:
        rng = random.Random(rng_seed)
        campaign = Campaign(Path(tmp), [svc], {}, rng, api_rate=0.0, kill_rate=0.5)
        try:
            drive_killed(campaign, svc, changes, rng)
        finally:
            note("\n".join(campaign.log))


def drive_killed(campaign: Campaign, svc: Service, changes: list[str],
                 rng: random.Random) -> None:
    """Bring ``svc`` up, make each change while the job is killed in half the passes,
    and converge."""
    campaign.converge(max_passes=300, recoveries=0)
    for what in changes:
        if what == "scale":
            campaign.scale(svc, rng.randint(1, 4))
        else:
            campaign.change_template(svc, what)
        for _ in range(60):
            result = campaign.run_pass()
            if not result.busy and campaign.settled():
                break
            campaign.settle(result, cap=rng.choice((1.0, 10.0)))
    campaign.converge(max_passes=300, recoveries=0)
    campaign.assert_converged()


# -- the campaigns' findings, reduced ---------------------------------------------------

NAME = "svc-engine"


def _step(scenario: Scenario) -> str | None:
    return (scenario.rows(NAME)[0].get("operation") or {}).get("step")


def _cut_short_at(scenario: Scenario, step: str) -> None:
    """Passes until the next one records ``step``; that one is killed right after the
    InferenceReplica (two writes), before any of the pod writes the step needs."""
    for _ in range(100):
        before = _step(scenario)
        scenario.run_pass(kill_after=2)
        if _step(scenario) == step and before != step:
            return
        scenario.advance(1)
    raise AssertionError(f"never reached {step}")


def _rolled_out(tmp_path, lifecycle: dict, step: str, **shape) -> Scenario:
    repo = tmp_path / "repo"
    base = {"replicas": 1, "lifecycle": lifecycle, "grace": 5, **shape}
    write_service(repo, **base)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    write_service(repo, **base, image="sglang:v2")
    _cut_short_at(scenario, step)
    scenario.until_idle(max_passes=100)
    return scenario


def _assert_on_target(scenario: Scenario) -> None:
    row = scenario.rows(NAME)[0]
    assert (row["phase"], row["operation"]) == ("Ready", None), row
    assert row["revision"] == scenario.replica(NAME)["spec"]["revision"]


@pytest.mark.parametrize("lifecycle, step, shape", [
    # Drain: WaitGone recorded, pods never deleted; the step only waited for them.
    (strategy("RecreatePod"), "WaitGone", {"workers": 2}),
    # Surge: WaitDrained recorded, old pod never deleted.
    (strategy("SurgeThenDrain"), "WaitDrained", {}),
    # In place: WaitReady recorded, images never patched.
    (strategy("InPlaceIfPossible"), "WaitReady", {}),
    # Surge: SurgeWaitAvailable recorded, the new pod never put into rotation.
    (strategy("SurgeThenDrain"), "SurgeWaitAvailable", {}),
], ids=["drain-wait-gone", "surge-wait-drained", "in-place-wait-ready",
        "surge-wait-available"])
def test_a_pass_cut_short_after_recording_a_step_does_not_wedge_the_update(
        tmp_path, lifecycle, step, shape):
    _assert_on_target(_rolled_out(tmp_path, lifecycle, step, **shape))


def test_a_newer_revision_reaches_an_instance_whose_update_failed(tmp_path):
    values = {"lifecycle": {"unschedulableGracePeriod": "5m", "instanceReadyTimeout": "10m"}}
    repo = tmp_path / "repo"
    base = {"replicas": 1, "lifecycle": strategy("RecreatePod"), "grace": 5, "values": values}
    write_service(repo, **base)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    scenario.fault("unschedulable")
    write_service(repo, **base, image="sglang:v2")
    scenario.until(lambda s: s.rows(NAME)[0]["phase"] == "Failed")
    assert scenario.rows(NAME)[0]["operation"]["type"] == "Update"  # a reset skips it
    scenario.fault("unschedulable", clear=True)
    write_service(repo, **base, image="sglang:v3")
    scenario.until_idle()
    _assert_on_target(scenario)


class _StatusWriteFails:
    def __init__(self, cluster):
        self._cluster = cluster

    def __getattr__(self, name):
        if name == "replace_status":
            def fail(*args, **kwargs):
                raise Transient("replace_status: 500 (injected)")
            return fail
        return getattr(self._cluster, name)


def test_a_reset_survives_a_failed_status_write(tmp_path):
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, values={"lifecycle": {"instanceReadyTimeout": "10m"}})
    scenario = Scenario(tmp_path, repo)
    scenario.fault("unschedulable")
    scenario.until(lambda s: s.rows(NAME)[0]["phase"] == "Failed")
    scenario.fault("unschedulable", clear=True)
    with SimCluster(scenario.path) as cluster:
        replica = cluster.get_object("InferenceReplica", "demo", NAME)
        replica["metadata"].setdefault("annotations", {})["ome.io/reset-instances"] = "all"
        cluster.replace_object(replica)
        result = run_pass(_StatusWriteFails(cluster), scenario.items())
    assert result.errors
    # The request stays until a pass records it done.
    assert "ome.io/reset-instances" in scenario.replica(NAME)["metadata"]["annotations"]
    scenario.until_idle()
    assert scenario.rows(NAME)[0]["phase"] == "Ready"
    assert len(scenario.events("InstanceReset")) == 1


class _ListFails:
    def __init__(self, cluster, kind):
        self._cluster = cluster
        self.kind = kind

    def __getattr__(self, name):
        attr = getattr(self._cluster, name)
        if name not in ("list_pods", "list_objects"):
            return attr

        def listing(*args, **kwargs):
            if name == "list_pods" or args[0] == self.kind:
                raise Transient(f"{name}: 500 (injected)")
            return attr(*args, **kwargs)

        return listing


@pytest.mark.parametrize("kind", ["Pod", "InferenceReplica", "Service"])
def test_a_failed_list_aborts_the_pass_before_any_write(tmp_path, kind):
    repo = tmp_path / "repo"
    write_service(repo, replicas=2)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    write_service(repo, replicas=3, image="sglang:v2")
    with SimCluster(scenario.path) as cluster:
        before = cluster.list_objects("InferenceReplica")[0]["metadata"]["resourceVersion"]
        pods = len(cluster.list_pods())
        result = run_pass(_ListFails(cluster, kind), scenario.items())
        assert cluster.list_objects("InferenceReplica")[0]["metadata"]["resourceVersion"] == before
        assert len(cluster.list_pods()) == pods
    assert (result.observed, result.applied, result.plans) == (False, 0, [])
    assert result.errors == ["observing the cluster: list_pods: 500 (injected)"] or (
        result.errors[0].startswith("observing the cluster: list_objects: 500"))
    assert result.busy  # --until-idle looks again rather than stopping as if done


def _at_step(scenario: Scenario, step: str) -> None:
    scenario.until(lambda s: _step(s) == step)


def _gates(scenario: Scenario) -> dict[str, bool]:
    return {p["metadata"]["name"]: P.gate_set(p) for p in scenario.pods(NAME)
            if not P.is_terminating(p) and not P.has_ended(p)}


def test_a_gang_recycling_a_pod_is_taken_out_of_rotation_even_when_that_pass_is_cut(tmp_path):
    """Campaign seed 3 at 80 examples: a gang in its Create's WaitAvailable loses a
    worker; the pass that recycles it is killed after the InferenceReplica write, and
    the leader kept its gate through CreatePods (the gang partly in rotation)."""
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, workers=1, lifecycle={"minReadySeconds": 600})
    scenario = Scenario(tmp_path, repo)
    _at_step(scenario, "WaitAvailable")
    assert set(_gates(scenario).values()) == {True}
    scenario.fault("evict", pod=f"{NAME}-0-worker-0")
    scenario.advance(1)
    scenario.run_pass(kill_after=2)
    assert _step(scenario) == "CreatePods"
    scenario.run_pass()
    assert set(_gates(scenario).values()) == {False}, _gates(scenario)
    scenario.until_idle()
    assert scenario.rows(NAME)[0]["phase"] == "Ready"
    assert set(_gates(scenario).values()) == {True}


def test_a_failed_gang_leaves_rotation_whole_even_when_the_failing_pass_is_cut(tmp_path):
    """A gang in its Create's WaitAvailable (in rotation) whose worker crash-loops
    past the readiness deadline fails; that pass is killed after the leader's gate
    write. The next pass takes the worker out too: a Failed Instance at rest is out
    of rotation whole, not only in the pass that failed it."""
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, workers=2, lifecycle={"minReadySeconds": 600},
                  values={"lifecycle": {"instanceReadyTimeout": "2m"}})
    scenario = Scenario(tmp_path, repo)
    _at_step(scenario, "WaitAvailable")
    assert set(_gates(scenario).values()) == {True}
    scenario.fault("crash", pod=f"{NAME}-0-worker-1")
    for _ in range(100):
        scenario.advance(15)
        with SimCluster(scenario.path) as cluster:
            # Killed after the InferenceReplica and one gate; the scenario's invariants
            # would (rightly) call the gang partly in rotation at this point.
            run_pass(KillAfter(cluster, 3), scenario.items())
        if scenario.rows(NAME)[0]["phase"] == "Failed":
            break
    else:
        raise AssertionError("the Instance never failed")
    assert len(set(_gates(scenario).values())) == 2, _gates(scenario)
    scenario.run_pass()
    assert set(_gates(scenario).values()) == {False}, _gates(scenario)
    assert scenario.rows(NAME)[0]["phase"] == "Failed"


def test_a_revision_is_stored_before_any_pod_is_built_from_it(tmp_path):
    """Campaign seed 0: the first pass is killed after the InferenceReplica and one
    more write. When that write was a gang's leader (the ControllerRevision came last),
    the revision then changed and the leader's revision could build nothing: the gang
    stayed half built, and had to restart whole. Now the revision comes first."""
    repo = tmp_path / "repo"
    write_service(repo, replicas=1, workers=1)
    scenario = Scenario(tmp_path, repo)
    scenario.run_pass(kill_after=3)
    with SimCluster(scenario.path) as cluster:
        stored = {r["metadata"]["name"] for r in cluster.list_objects("ControllerRevision")}
    assert {P.revision_of(p) for p in scenario.pods()} <= stored
    write_service(repo, replicas=1, workers=1, image="sglang:v2")
    scenario.run_pass()  # the invariants: a gang is whole after a clean pass
    scenario.until_idle()
    _assert_on_target(scenario)
    assert not scenario.events("RevisionMissing")


def _failed_gang(tmp_path, **more) -> Scenario:
    """A one-Instance gang whose Create failed (nowhere to schedule it, past its 2m
    deadline), with the cause cleared and the repository rewritten with ``more``."""
    repo = tmp_path / "repo"
    base = {"replicas": 1, "workers": 1, "grace": 5,
            "values": {"lifecycle": {"instanceReadyTimeout": "2m"}}}
    write_service(repo, **base)
    scenario = Scenario(tmp_path, repo)
    scenario.fault("unschedulable")
    scenario.until(lambda s: s.rows(NAME)[0]["phase"] == "Failed")
    scenario.fault("unschedulable", clear=True)
    write_service(repo, **base, **more)
    return scenario


def _reset_all(scenario: Scenario) -> None:
    """The operator's ``kubectl annotate inferencereplica ... ome.io/reset-instances=all``."""
    with SimCluster(scenario.path) as cluster:
        replica = cluster.get_object("InferenceReplica", "demo", NAME)
        replica["metadata"].setdefault("annotations", {})["ome.io/reset-instances"] = "all"
        cluster.replace_object(replica)


def test_a_fresh_start_cut_short_never_completes_a_gang_beside_its_old_pods(tmp_path):
    """Campaign seed 4: a reset rebuilds a Failed gang at a newer revision; the pass is
    killed after the InferenceReplica write, before it deleted the old pods, and one of
    them is lost meanwhile. The next pass created the lost pod at the new revision beside
    the survivor at the old one (a gang mixing revisions). Now the survivor goes first."""
    scenario = _failed_gang(tmp_path, image="sglang:v2")
    _reset_all(scenario)
    scenario.run_pass(kill_after=2)
    assert scenario.rows(NAME)[0]["operation"]["step"] == "CreatePods"
    with SimCluster(scenario.path) as cluster:
        cluster.delete_pod("demo", f"{NAME}-0-worker-0", grace_seconds=0)
    scenario.until_idle()  # the invariants: never a gang of two revisions
    _assert_on_target(scenario)


def test_policy_restarts_of_two_gangs_at_once_do_not_wait_for_max_unavailable(tmp_path):
    """Campaign seed 23: two workers of two gangs are OOM-killed at once and both gangs
    restart in one pass, past maxUnavailable 1. That is the documents' rule (restarts
    that the policy starts don't wait for maxUnavailable); the campaign had started a
    fresh budget window in the pass before the kills showed, and now waits a minute of
    simulated time after a fault before it does."""
    repo = tmp_path / "repo"
    write_service(repo, replicas=2, workers=2,
                  lifecycle=strategy("RecreatePod", maxUnavailable="25%"))
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    scenario.fault("oom", pod=f"{NAME}-0-worker-1")
    scenario.fault("oom", pod=f"{NAME}-1-worker-0")
    scenario.until(lambda s: any(r["phase"] == "Restarting" for r in s.rows(NAME)))
    assert [r["phase"] for r in scenario.rows(NAME)] == ["Restarting", "Restarting"]
    assert not scenario.events("RepairHeld")


def test_an_extra_pod_on_an_instance_that_needs_no_start_does_not_stall_the_rollout(tmp_path):
    """Campaign seed 26: a failed attempt's replacement stayed beside an Instance that
    later reached the target revision. It held the only surge slot "until a start on
    its Instance replaces it", and no start would ever come: every other Instance's
    update was held for good. An Instance at rest on the target now lets it go."""
    repo = tmp_path / "repo"
    base = {"replicas": 2, "grace": 5}
    write_service(repo, **base, lifecycle=strategy("SurgeThenDrain", maxSurge=1,
                                                   maxUnavailable=0, partition=1))
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    write_service(repo, **base, image="sglang:v2", lifecycle=strategy(
        "SurgeThenDrain", maxSurge=1, maxUnavailable=0, partition=1))
    scenario.until_idle()
    (own,) = [p for p in scenario.pods(f"{NAME}-1-")]
    extra = copy.deepcopy(own)
    ordinal = P.ordinal_of(own)
    extra["metadata"] = {k: v for k, v in own["metadata"].items()
                         if k in ("namespace", "labels", "annotations")}
    extra["metadata"]["name"] = f"{NAME}-1-default-{1 - ordinal}"
    extra.pop("status", None)
    with SimCluster(scenario.path) as cluster:
        cluster.create_pod(extra)  # as a failed surge attempt leaves it
    write_service(repo, **base, image="sglang:v2", lifecycle=strategy(
        "SurgeThenDrain", maxSurge=1, maxUnavailable=0))
    scenario.until_idle()
    target = scenario.replica(NAME)["spec"]["revision"]
    assert [r["revision"] for r in scenario.rows(NAME)] == [target, target]
    assert not scenario.status(NAME).get("rolloutHold")


def test_a_fresh_start_cut_short_rebuilds_the_whole_gang(tmp_path):
    """Campaign seed 80: the pass that fresh-starts a Failed gang (a reset) is killed
    after the InferenceReplica and one deletion. The pod left undeleted ran the newest
    revision already, so nothing removed it: the gang was rebuilt around a pod of the
    failed attempt, and partly live meanwhile. Now every old pod goes first."""
    scenario = _failed_gang(tmp_path)
    old = {p["metadata"]["uid"] for p in scenario.pods()}
    assert len(old) == 2
    _reset_all(scenario)
    scenario.run_pass(kill_after=3)  # the InferenceReplica, then one of the two deletions
    assert len(old & {p["metadata"]["uid"] for p in scenario.pods()}) == 1  # one survived
    scenario.until_idle()
    _assert_on_target(scenario)
    assert not old & {p["metadata"]["uid"] for p in scenario.pods()}


def _recorded_campaign(tmp_path, name: str) -> None:
    """A campaign the nightly run recorded (``tests/app/campaign_plans/``), run again."""
    import json

    from tests.chaos import Service

    plan = json.loads((Path(__file__).parent / "campaign_plans" / f"{name}.json").read_text())
    plan = {**plan, "fleet": [Service(**svc) for svc in plan["fleet"]],
            "events": [(at, tuple(event)) for at, event in plan["events"]]}
    run_campaign(tmp_path, plan)


def test_a_replacement_with_no_pods_is_recorded_deleting_before_it_leaves(tmp_path):
    """Nightly seed 34: a superseded gang surge whose replacement had no pods yet was
    abandoned, and with every step taken at once the replacement left the record in
    the same pass, never recorded Deleting: a pass cut after that record would not know
    what was left (its PodGroup). An Instance now leaves only on a later pass."""
    _recorded_campaign(tmp_path, "seed34-replacement-dropped-unrecorded")


def test_a_gang_surge_waiting_for_its_abandoned_replacement_keeps_its_slot(tmp_path):
    """Nightly seed 45: a gang source at SurgeCreate waited for an abandoned replacement
    to go and held no surge slot meanwhile; other Instances took the slots, and when it
    went on the component ran 7 Instances over a ceiling of 6. It holds its slot now."""
    _recorded_campaign(tmp_path, "seed45-gang-surge-waiting-holds-its-slot")


def test_a_gang_replacement_whose_source_went_away_is_rolled_like_any_instance(tmp_path):
    """Nightly seed 52: a gang surge's source was deleted before it handed over, and its
    replacement kept the mark of one; a replacement is never a rollout candidate, so it
    stayed on its revision for good. It is released to be an Instance like any other."""
    _recorded_campaign(tmp_path, "seed52-orphaned-gang-replacement")


def test_a_gang_scaled_down_and_straight_back_up_runs_no_extra_gang(tmp_path):
    """Nightly seed 301: an InPlaceIfPossible gang service scaled from 4 to 2 and at once
    to 3 created its third Instance while the two being deleted still held live pods:
    15 live pods over a ceiling of 4 gangs of 3. A place now waits for an Instance being
    deleted to let go of its pods."""
    _recorded_campaign(tmp_path, "seed301-scaled-down-and-up-runs-no-extra-gang")


def test_an_in_place_update_cut_short_finishes_on_a_stored_revision(tmp_path):
    """Nightly seed 430: an InPlaceOnly update was recorded (WaitReady on the new
    revision), then the InferenceReplica's object write failed twice, so neither the pod
    patch nor the new ControllerRevision (written after it) landed; the change was
    withdrawn meanwhile, and the Instance finished blind, Ready on a revision its pod
    never ran and no ControllerRevision held, which InPlaceOnly then refused for good. A
    new revision is now stored before the InferenceReplica that names it."""
    _recorded_campaign(tmp_path, "seed430-in-place-update-cut-before-its-revision-was-stored")


def test_a_new_instance_at_an_index_an_old_one_had_costs_no_budget(tmp_path):
    """Nightly seed 441: scaled 4 → 2 → 4, the new Instance 2 never served (a bad image)
    and failed with two updating Instances; all three moved to the next revision. The
    product kept the budget (an Instance that never served costs none to move); the
    campaign's own check took the old Instance 2's service for the new one's."""
    _recorded_campaign(tmp_path, "seed441-a-new-instance-at-an-old-index-never-served")
