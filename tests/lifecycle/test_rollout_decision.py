"""The rollout decision on its own: hand-built components, one pass's decision, no
simulator. Each case reads as update-strategies.txt states the rule ("maxSurge 25% of
2", "partition 1"); the scenario tests drive the same rules pass by pass."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from omegitops.lifecycle.rollout import Move, decide_rollout, plan_rollout
from omegitops.lifecycle.work import Work
from omegitops.model.settings import ComponentSettings
from omegitops.model.state import Mode, OperationType, Phase, Row, Step
from omegitops.render.component import DesiredComponent, ObservedComponent
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.resolve import ComponentLifecycle, Resolved
from omegitops.render.templates import DEFAULT, SERVING_GATE
from omegitops.util.times import format_time

NOW = 1_000_000.0
OLD, NEW = "svc-engine-old", "svc-engine-new"


def template(image: str, memory: str = "1Gi") -> dict[str, Any]:
    return {"metadata": {"labels": {}, "annotations": {}},
            "spec": {"containers": [{"name": "ome-container", "image": image,
                                     "resources": {"limits": {"memory": memory}}}]}}


@dataclass
class Component:
    """A single-pod component of ``replicas`` Instances, every one Ready on OLD."""

    replicas: int
    strategy: str = "SurgeThenDrain"
    max_surge: Any = None
    max_unavailable: Any = None
    partition: int | None = None
    # A change of images only (InPlace possible), or of more (memory).
    images_only: bool = False
    rows: dict[int, Row] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for index in range(self.replicas):
            self.instance(index)

    def instance(self, index: int, revision: str = OLD, serving: bool = True,
                 phase: Phase = Phase.READY) -> Row:
        self.rows[index] = Row(index, 1, phase, revision)
        self.pods = [p for p in self.pods if not p["metadata"]["name"].startswith(
            f"svc-engine-{index}-")]
        self.pods += [self._ready(pod, serving) for pod in instance_pods(
            PodSpecInput("ns", "svc", "engine", revision, self.templates(revision), 0, False),
            index, 1)]
        return self.rows[index]

    def templates(self, revision: str) -> dict[str, dict[str, Any]]:
        if revision == OLD:
            return {DEFAULT: template("engine:1")}
        return {DEFAULT: template("engine:2", "1Gi" if self.images_only else "2Gi")}

    @staticmethod
    def _ready(pod: dict[str, Any], serving: bool) -> dict[str, Any]:
        since = format_time(NOW - 3600)
        state = "True" if serving else "False"
        pod["status"] = {"phase": "Running", "conditions": [
            {"type": kind, "status": state, "lastTransitionTime": since}
            for kind in ("ContainersReady", "Ready", SERVING_GATE)]}
        return pod

    def work(self) -> Work:
        fields = {"updateStrategy.type": self.strategy,
                  "updateStrategy.rollingUpdate.maxSurge": self.max_surge,
                  "updateStrategy.rollingUpdate.maxUnavailable": self.max_unavailable,
                  "updateStrategy.rollingUpdate.partition": self.partition}
        lifecycle = ComponentLifecycle(
            "engine", Resolved("OMENative", "isvc"), "single", 0, self.replicas,
            {name: Resolved(value, "isvc") for name, value in fields.items()
             if value is not None},
            ComponentSettings(strategy=self.strategy, partition=self.partition or 0,
                              max_surge=self.max_surge, max_unavailable=self.max_unavailable))
        desired = DesiredComponent("ns", "svc", "engine", lifecycle, self.templates(NEW),
                                   NEW)
        revisions = [{"metadata": {"name": OLD}, "revision": 1,
                      "data": {"templates": self.templates(OLD)}}]
        work = Work(desired, ObservedComponent(pods=self.pods, revisions=revisions), NOW)
        work.rows = self.rows
        for pod in self.pods:
            index = int(pod["metadata"]["labels"]["ome.io/instance-index"])
            work.groups.setdefault(index, []).append(pod)
        return work


def starts(component: Component) -> list[tuple[int, str]]:
    return [(move.index, str(move.mode)) for move in decide_rollout(component.work()).starts]


@pytest.mark.parametrize(("replicas", "max_surge", "expected"), [
    # update-strategies.txt: a percentage of the desired Instances, rounded up.
    (2, "25%", [(0, "Surge")]),          # 25% of 2 is 0.5: one at a time
    (4, "50%", [(0, "Surge"), (1, "Surge")]),
    (3, 1, [(0, "Surge")]),
    (3, None, [(0, "Surge"), (1, "Surge"), (2, "Surge")]),  # unset: every Instance
])
def test_max_surge_bounds_the_surges_started(replicas, max_surge, expected):
    assert starts(Component(replicas, max_surge=max_surge)) == expected


def test_max_surge_zero_drains_within_max_unavailable():
    component = Component(3, max_surge=0, max_unavailable=1)
    decision = decide_rollout(component.work())
    assert [(m.index, m.mode) for m in decision.starts] == [(0, Mode.DRAIN)]
    assert (decision.unavailable, decision.unavailable_after) == (0, 1)
    assert decision.hold_reason == ("per-Component unavailability budget 1 exhausted "
                                    "(would become 2)")


def test_a_surge_in_flight_holds_its_slot():
    component = Component(3, max_surge=1)
    surge = component.work().operation(OperationType.UPDATE, Step.SURGE_WAIT_READY,
                                       "SurgeThenDrain", NEW, Mode.SURGE)
    component.rows[0] = component.rows[0].but(phase=Phase.UPDATING,
                                              operation=replace(surge, ordinal=1))
    decision = decide_rollout(component.work())
    assert decision.starts == ()
    assert (decision.surge_in_use, decision.surge_after) == (1, 1)
    assert decision.hold_reason == "per-Component surge budget 1 exhausted (would become 2)"
    assert decision.pending


def test_partition_keeps_lower_indices_and_stages():
    component = Component(3, partition=1)
    assert starts(component) == [(1, "Surge"), (2, "Surge")]
    component.instance(1, NEW)
    component.instance(2, NEW)
    decision = decide_rollout(component.work())
    assert decision.starts == () and not decision.pending  # Staged at partition 1


def test_partition_counts_instances_in_index_order_when_indices_have_gaps():
    """update-strategies.txt: partition 1 and two Instances: one moves, one is held,
    whatever their indices. At [2, 3], the lowest, 2, is held."""
    component = Component(0, partition=1)
    component.replicas = 2
    component.instance(2)
    component.instance(3)
    decision = decide_rollout(component.work())
    assert (starts(component), decision.held) == ([(3, "Surge")], frozenset({2}))
    # A replacement that takes a lower free index (a gang's surge, a migration) is on
    # the target: the Instance held stays held, and the partition holds no more.
    del component.rows[3]
    component.instance(0, NEW)
    decision = decide_rollout(component.work())
    assert decision.starts == () and not decision.pending
    assert decision.held == frozenset({2})


def test_an_instance_moving_to_the_target_is_not_held_by_a_partition():
    """An Instance already on its way to the target (its update in flight, or failed and
    retrying) has been reached: the partition holds the next one still to move."""
    component = Component(3, max_surge=1, partition=1)
    surge = component.work().operation(OperationType.UPDATE, Step.SURGE_WAIT_READY,
                                       "SurgeThenDrain", NEW, Mode.SURGE)
    component.rows[0] = component.rows[0].but(phase=Phase.UPDATING,
                                              operation=replace(surge, ordinal=1))
    assert decide_rollout(component.work()).held == frozenset({1})


@pytest.mark.parametrize(("max_unavailable", "moved", "after"), [
    (1, [2], 1),     # Instance 2 is the one out: it moves, no other may go
    (2, [2, 0], 2),  # one more may go, lowest index first
])
def test_instances_serving_nothing_move_first_and_cost_no_budget(max_unavailable, moved,
                                                                  after):
    component = Component(3, strategy="RecreatePod", max_unavailable=max_unavailable)
    component.instance(2, serving=False)
    decision = decide_rollout(component.work())
    assert [m.index for m in decision.starts] == moved
    assert (decision.unavailable, decision.unavailable_after) == (1, after)


def test_in_place_only_refuses_more_than_images_and_stalls():
    component = Component(2, strategy="InPlaceOnly")
    decision = decide_rollout(component.work())
    assert decision.moves == (Move(0, None), Move(1, None))
    assert decision.refused == (0, 1) and decision.starts == ()
    assert not decision.pending


def test_in_place_if_possible_patches_images_in_place():
    component = Component(2, strategy="InPlaceIfPossible", images_only=True)
    assert starts(component) == [(0, "InPlace"), (1, "InPlace")]
    component.images_only = False
    assert starts(component) == [(0, "Drain"), (1, "Drain")]


def test_a_held_revision_starts_nothing_and_keeps_nothing_pending():
    component = Component(2)
    work = component.work()
    work.retries = {NEW: {"attempts": 1, "held": True}}
    decision = decide_rollout(work)
    assert decision.starts == () and not decision.pending


def test_a_backoff_wakes_the_pass_when_it_ends():
    component = Component(1)
    component.rows[0] = component.rows[0].but(retry_at=format_time(NOW + 30))
    decision = decide_rollout(component.work())
    assert decision.starts == () and decision.wakes == (NOW + 30,)
    assert decision.pending


def test_deciding_changes_nothing_and_acting_opens_what_was_decided():
    component = Component(3, max_surge=1)
    work = component.work()
    before = [Row.for_storage(row) for row in work.rows.values()]
    decision = decide_rollout(work)
    assert [Row.for_storage(row) for row in work.rows.values()] == before
    assert not work.actions and not work.events and not work.wakes
    outcome = plan_rollout(work, None)
    assert outcome.decision == decision
    opened = [row.index for row in work.rows.values() if row.operation is not None]
    assert opened == [m.index for m in decision.starts] == [0]
    assert outcome.hold is not None and outcome.hold.reason == decision.hold_reason
    assert [e.reason for e in work.events] == ["InstanceUpdating"]


@pytest.mark.parametrize("where", ["git", "cluster"])
def test_a_paused_rollout_starts_nothing_and_names_who_paused_it(where):
    """update-strategies.txt "Pause and resume a rollout": the pause comes in with the
    desired lifecycle (Git) or the observed InferenceReplica's annotation (the cluster);
    nothing starts, nothing is pending, and the hold names Paused and who."""
    component = Component(3)
    work = component.work()
    if where == "git":
        lifecycle = replace(work.desired.lifecycle, settings=replace(
            work.desired.lifecycle.settings, paused=True))
        work.desired = replace(work.desired, lifecycle=lifecycle)
        by = "Git: spec.engine.lifecycle.paused of InferenceService ns/svc"
    else:
        since = format_time(NOW - 60)
        work.observed.replica = {"metadata": {"annotations": {
            "ome.io/rollout-paused": f'{{"by": "alice", "since": "{since}"}}'}}}
        by = "alice"
    decision = decide_rollout(work)
    assert decision.starts == () and not decision.pending
    assert [pause.by for pause in decision.paused] == [by]
    hold = plan_rollout(work, None).hold
    assert hold is not None and (hold.gate, hold.by) == ("Paused", by)
    assert "3 Instances wait on their revision" in hold.reason
    if where == "cluster":
        assert hold.since == format_time(NOW - 60)


# -- canary steps (update-strategies.txt: "a canary's current step replaces your
# partition"; lifecycle/canary.py) -------------------------------------------------------

CANARY = [{"replicas": 1, "pause": {"duration": "10m"}}, {"replicas": "50%", "pause": {}},
          {"replicas": "100%"}]


def canary_work(component: Component, steps: list | None = None,
                previous: dict | None = None, annotations: dict | None = None) -> Work:
    work = component.work()
    lifecycle = work.desired.lifecycle
    fields = {**lifecycle.fields, "canary.steps": Resolved(
        CANARY if steps is None else steps, "isvc", ("spec", "rollout", "canary", "steps"))}
    work.desired = replace(work.desired, lifecycle=replace(lifecycle, fields=fields))
    if previous is not None:
        work.previous = {"canary": previous}
    if annotations is not None:
        work.observed.replica = {"metadata": {"annotations": annotations}}
    return work


def stored(step: int, reached: float | None = None, definition: str | None = None) -> dict:
    written = {1: '[1, "10m"]', 2: '["50%", "promotion"]', 3: '["100%", null]'}
    return {"target": NEW, "step": step, "steps": 3, "startedAt": format_time(NOW - 900),
            "reachedAt": None if reached is None else format_time(reached),
            "definition": definition or written[step]}


def test_the_first_canary_step_replaces_the_partition():
    """Step 1 lets one of four Instances move, whatever the budgets allow; the step
    starts now and waits for that Instance."""
    decision = decide_rollout(canary_work(Component(4)))
    assert decision.partition == 3 and [m.index for m in decision.starts] == [3]
    canary = decision.canary
    assert canary is not None and (canary.step, canary.allowed, canary.started_at) == (
        1, 1, NOW)
    assert canary.reached_at is None and canary.waiting_for.startswith("1 more Instance")


def test_a_timed_step_ends_from_the_status_and_the_clock_alone():
    """Reached 5 minutes ago with a 10m pause: it waits 5 more minutes, wakes the pass
    then, and the rollout stays under way; reached 10 minutes ago: step 2 (50% of 4)."""
    component = Component(4)
    component.instance(3, NEW)
    waiting = decide_rollout(canary_work(component, previous=stored(1, NOW - 300)))
    assert waiting.canary is not None and waiting.canary.ends_at == NOW + 300
    assert waiting.starts == () and NOW + 300 in waiting.wakes and waiting.pending
    hold = plan_rollout(canary_work(component, previous=stored(1, NOW - 300)), None).hold
    assert hold is not None and hold.gate == "CanaryStep"
    assert hold.since == format_time(NOW - 300)
    assert hold.reason.startswith(f"canary step 1/3: 1 Instance on {NEW}, 3 wait for its "
                                  f"pause of 10m to end at {format_time(NOW + 300)}")
    over = decide_rollout(canary_work(component, previous=stored(1, NOW - 600)))
    assert over.canary is not None and (over.canary.step, over.canary.allowed) == (2, 2)
    assert over.partition == 2 and [m.index for m in over.starts] == [2]


def test_an_indefinite_step_waits_for_its_promotion_only():
    component = Component(4)
    component.instance(3, NEW)
    component.instance(2, NEW)
    work = canary_work(component, previous=stored(2, NOW - 3600))
    decision = decide_rollout(work)
    assert decision.starts == () and not decision.pending and decision.wakes == ()
    assert decision.canary is not None and "promotion" in decision.canary.waiting_for
    # A promotion of another step, or of another revision, promotes nothing.
    stale = '{"by": "bob", "step": 1, "target": "svc-engine-new", "at": "x"}'
    decision = decide_rollout(canary_work(component, previous=stored(2, NOW - 3600),
                                          annotations={"ome.io/rollout-promote": stale}))
    assert decision.canary is not None and decision.canary.step == 2
    promoted = stale.replace('"step": 1', '"step": 2')
    decision = decide_rollout(canary_work(component, previous=stored(2, NOW - 3600),
                                          annotations={"ome.io/rollout-promote": promoted}))
    # Step 3 lets every Instance move.
    assert decision.canary is not None and (decision.canary.step, decision.canary.allowed,
                                            decision.canary.promoted_by) == (3, 4, "bob")
    assert decision.partition == 0 and [m.index for m in decision.starts] == [0, 1]


def test_git_moves_a_step_by_changing_it():
    """The step the status records was written otherwise: it starts again as Git now
    writes it (here without its pause, so the next step follows)."""
    component = Component(4)
    component.instance(3, NEW)
    component.instance(2, NEW)
    steps = [CANARY[0], {"replicas": "50%"}, CANARY[2]]
    decision = decide_rollout(canary_work(component, steps, previous=stored(2, NOW - 60)))
    assert decision.canary is not None and decision.canary.step == 3
    assert [m.index for m in decision.starts] == [0, 1]
    # A list that now ends before the recorded step ends the canary.
    decision = decide_rollout(canary_work(component, CANARY[:1], previous=stored(2)))
    assert decision.canary is not None and decision.canary.done
    assert decision.partition == 0


def test_a_held_revision_stops_the_canary_at_its_step():
    component = Component(4)
    component.instance(3, NEW)
    work = canary_work(component, previous=stored(1, NOW - 3600))
    work.retries = {NEW: {"attempts": 1, "held": True}}
    decision = decide_rollout(work)
    assert decision.canary is not None and decision.canary.stopped
    assert decision.canary.step == 1 and decision.starts == () and not decision.pending


def test_no_canary_without_an_instance_to_move():
    component = Component(2)
    for index in range(2):
        component.instance(index, NEW)
    assert decide_rollout(canary_work(component)).canary is None
