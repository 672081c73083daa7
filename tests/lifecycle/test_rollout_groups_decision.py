"""Rollout groups on their own: the pure pre-pass over the members' observed rows
(lifecycle/groups.py), and one member's rollout decision given its view of the group.
No simulator; tests/rules/test_rollout_groups.py drives the same rules pass by pass."""

from __future__ import annotations

from dataclasses import replace

from omegitops.lifecycle.canary import CanaryStep
from omegitops.lifecycle.groups import Member, group_views
from omegitops.lifecycle.rollout import apply_rollout, decide_rollout
from omegitops.model.groups import GroupView
from omegitops.model.state import Gate, Mode, Operation, OperationType, Phase, Row, Step
from tests.lifecycle.test_rollout_decision import NEW, OLD, Component

PD = {"name": "pd", "components": ["engine", "decoder"]}


def member(component: str, replicas: int, done: int = 0, moving: int = 0,
           canary: dict | None = None, surge: bool = True) -> Member:
    """``done`` Instances Ready on NEW, ``moving`` more updating toward it, the rest on
    OLD."""
    rows = []
    for index in range(replicas):
        if index < done:
            rows.append(Row(index, 1, Phase.READY, NEW))
        elif index < done + moving:
            operation = Operation(OperationType.UPDATE, Step.SURGE_WAIT_READY,
                                  "SurgeThenDrain", mode=Mode.SURGE if surge else Mode.DRAIN,
                                  target_revision=NEW)
            rows.append(Row(index, 1, Phase.UPDATING, OLD, operation=operation))
        else:
            rows.append(Row(index, 1, Phase.READY, OLD))
    return Member(component, replicas, NEW, tuple(rows), canary)


def test_a_group_moves_at_the_pace_of_its_slowest_member():
    """Four engines, two decoders, nothing moved: the next wave is the engines' first
    quarter, so one engine and a quarter of two decoders rounded up, one; once both are
    Ready, half of each; then three quarters."""
    views = group_views(PD, [member("engine", 4), member("decoder", 2)])
    assert (views["engine"].allowed, views["decoder"].allowed) == (1, 1)
    assert views["engine"].waits_for == "decoder"
    assert views["engine"].why == "decoder has 0/2 Instances Ready on its new revision"
    views = group_views(PD, [member("engine", 4, done=1), member("decoder", 2, done=1)])
    assert (views["engine"].allowed, views["decoder"].allowed) == (2, 1)
    views = group_views(PD, [member("engine", 4, done=2), member("decoder", 2, done=1)])
    assert (views["engine"].allowed, views["decoder"].allowed) == (3, 2)


def test_the_decoder_never_runs_ahead_of_the_engine():
    """One engine of four Ready on the new revision: the decoder (of four) may have two
    there at most, whatever its own budgets."""
    views = group_views(PD, [member("engine", 4, done=1), member("decoder", 4, done=1)])
    assert views["decoder"].allowed == 2
    views = group_views(PD, [member("engine", 4, done=1), member("decoder", 4, done=2)])
    assert views["decoder"].allowed == 2 and views["decoder"].waits_for == "engine"


def test_a_group_canary_takes_the_lowest_step_of_its_members():
    """The engine records step 2, the decoder step 1: both hold to step 1's count."""
    steps = (CanaryStep("25%"), CanaryStep("50%", promote=True), CanaryStep("100%"))
    engine = member("engine", 4, done=2, canary={"target": NEW, "step": 2})
    decoder = member("decoder", 2, done=1, canary={"target": NEW, "step": 1})
    views = group_views(PD, [engine, decoder], steps)
    assert (views["engine"].allowed, views["decoder"].allowed) == (1, 1)
    assert "the group is at canary step 1/3" in views["engine"].why
    decoder = replace(decoder, canary={"target": NEW, "step": 2})
    views = group_views(PD, [engine, decoder], steps)
    assert (views["engine"].allowed, views["decoder"].allowed) == (2, 1)


def test_the_groups_budget_goes_to_the_member_furthest_behind():
    """A group maxSurge of 2 with one surge in flight (the engine's): the one slot left
    goes to the decoder, which is behind; the engine gets none."""
    group = {**PD, "maxSurge": 2}
    views = group_views(group, [member("engine", 4, done=1, moving=1),
                                member("decoder", 2)])
    assert (views["decoder"].surge_room, views["engine"].surge_room) == (1, 0)
    assert views["engine"].unavailable_room is None


def view(allowed: int, surge_room: int | None = None, waits_for: str = "decoder") -> GroupView:
    return GroupView("pd", ("engine", "decoder"), allowed, waits_for,
                     "decoder has 0/2 Instances Ready on its new revision", surge_room,
                     None, True)


def grouped(component: Component, group: GroupView):
    work = component.work()
    work.observed.group = group
    return work


def test_the_group_caps_a_member_and_names_the_member_it_waits_for():
    """The engine alone would surge four at once; the group lets one move, and the hold
    names the group and the decoder. The rollout stays under way."""
    work = grouped(Component(4), view(1))
    decision = decide_rollout(work)
    assert [m.index for m in decision.starts] == [3]
    assert decision.group_held == frozenset({0, 1, 2}) and decision.pending
    # Once the one is moving, the rest wait for the group.
    work = grouped(Component(4), view(1))
    operation = work.operation(OperationType.UPDATE, Step.SURGE_WAIT_READY,
                               "SurgeThenDrain", NEW, Mode.SURGE)
    work.rows[3] = work.rows[3].but(phase=Phase.UPDATING, operation=replace(operation,
                                                                               ordinal=1))
    work.moved.add(3)
    decision = decide_rollout(work)
    assert decision.starts == ()
    hold = apply_rollout(work, decision, None)
    assert hold is None  # an Instance moves: nothing holds the rollout yet


def test_a_member_with_nothing_moving_holds_at_the_group_gate():
    component = Component(4)
    component.instance(3, NEW)
    work = grouped(component, view(1))
    decision = decide_rollout(work)
    assert decision.starts == ()
    hold = apply_rollout(work, decision, None)
    assert hold is not None and hold.gate == Gate.GROUP
    assert hold.reason == ("rollout group pd (engine, decoder) lets 1 Instance onto "
                           f"{NEW}; 3 wait for decoder: decoder has 0/2 Instances Ready "
                           "on its new revision"), hold.reason


def test_the_groups_budget_applies_on_top_of_the_members():
    """The engine's own maxSurge 2 would start two; the group's room of one starts one,
    and the hold names the group's budget."""
    work = grouped(Component(4, max_surge=2), view(4, surge_room=1))
    decision = decide_rollout(work)
    assert [m.index for m in decision.starts] == [0]
    assert decision.group_reason is not None and "rollout group pd's surge budget" in (
        decision.group_reason)
    hold = apply_rollout(work, decision, None)
    assert hold is not None and hold.gate == Gate.GROUP


def test_without_a_group_nothing_changes():
    decision = decide_rollout(Component(4).work())
    assert len(decision.starts) == 4 and decision.group is None


def test_each_member_moves_its_own_batch_in_step():
    """Engines that surge two at a time beside decoders that surge one: the wave is the
    decoders' next one (one of two, half), so two of four engines; a member whose
    budgets are unset moves its whole count."""
    engine = replace(member("engine", 4), batch=2)
    views = group_views(PD, [engine, member("decoder", 2)])
    assert (views["engine"].allowed, views["decoder"].allowed) == (2, 1)
    views = group_views(PD, [replace(engine, batch=4), replace(member("decoder", 2),
                                                               batch=2)])
    assert (views["engine"].allowed, views["decoder"].allowed) == (4, 2)


def test_a_members_own_canary_step_does_not_hold_it_back():
    """The engine's status still records step 1 as it is promoted: its own plan moves it
    to step 2; only the other members' steps cap it."""
    steps = (CanaryStep("50%", promote=True), CanaryStep("100%"))
    engine = member("engine", 2, done=1, canary={"target": NEW, "step": 1})
    views = group_views(PD, [engine, member("decoder", 1, done=1)], steps)
    assert views["engine"].allowed == 2


def test_a_blue_green_group_switches_once_every_new_set_waits_for_it():
    """Every Instance of every member may move at once; the switch comes when each one
    not on its new revision waits at the hand-over."""
    blue = {**PD, "strategy": "blueGreen"}
    engine = member("engine", 2, moving=2)
    decoder = member("decoder", 2, moving=2)
    views = group_views(blue, [engine, decoder])
    assert views["engine"].allowed == 2 and views["engine"].blue_green
    assert not views["engine"].switch and views["engine"].waits_for == "engine"

    def at_hand_over(m: Member) -> Member:
        return replace(m, rows=tuple(
            r.but(operation=replace(r.op, step=Step.HAND_OVER)) for r in m.rows))
    views = group_views(blue, [at_hand_over(engine), decoder])
    assert not views["engine"].switch and views["engine"].waits_for == "decoder"
    views = group_views(blue, [at_hand_over(engine), at_hand_over(decoder)])
    assert views["engine"].switch and views["decoder"].switch
