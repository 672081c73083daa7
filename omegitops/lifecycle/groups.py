"""Rollout groups: components of one service that move as one.

update-strategies.txt: "rollout groups in spec.rollout coordinate several components";
"Rollout groups: roll the engine and the decoder out as one"; "In a rollout group, the
group's limits apply too, and a canary's current step replaces your partition". The
group is ``spec.rollout.groups[]`` (render/resolve.py resolves it for each member).

Each member is still planned on its own by the pure planner. What it needs of the
group comes from this pure pre-pass over what the pass observed of every member (the
members' InferenceReplicas: their Instances' rows and canary steps) and what Git asks
of each (its count and target revision). For each member it computes:

- ``allowed``: how many of the member's Instances may run its new revision. The group
  moves in waves at the pace of its slowest member: the next wave is the share each
  member reaches once its next batch (what its own maxSurge or maxUnavailable moves at
  once) is Ready on the new revision, the lowest of them, that is
  ``min over members of min(1, (done + batch) / count)``, and each member may have
  that share of its own count, rounded up like a budget. Under a canary the group's
  step is the lowest step the other members record, and its count (a percentage of
  each member's count, rounded up) caps it too (a member's own step caps it in its
  own plan). No member runs ahead of the group: the one ahead waits for the slowest,
  which the rollout hold names (gate ``Group``).
- ``surge_room``, ``unavailable_room``: how many more surges and disruptive moves the
  member may start under the group's own ``maxSurge`` and ``maxUnavailable`` (counted
  in Instances across every member, a percentage of all their Instances rounded up),
  on top of its own budgets. What the group's budget has left is handed out to the
  members furthest behind first, never more than a member may use, so two members
  planned in one pass never take the same slot.

Under ``strategy: blueGreen`` there are no waves: every member brings up its whole new
set beside the old (the members' surges, out of rotation), and ``switch`` turns true
once every Instance of every member not yet on its new revision waits at the hand-over
with its new pods Available; in that pass every member hands over at once, and the old
sets drain (lifecycle/updates.py).

Repairs never wait for the group (restart-policy.txt: "no repair waits for its rollout
group"): the planner applies the group's view to the rollout alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from omegitops.lifecycle.canary import CanaryStep, allowed_at
from omegitops.model.budgets import scaled_value
from omegitops.model.groups import BLUE_GREEN, GroupView
from omegitops.model.settings import SURGE_THEN_DRAIN, ComponentSettings
from omegitops.model.state import Json, Mode, Phase, Row, Step


@dataclass(frozen=True)
class Member:
    """What the pass knows of one member: its desired count and target revision (Git),
    its Instances' rows and its recorded canary step (observed)."""

    component: str
    replicas: int
    target: str
    rows: tuple[Row, ...]
    canary: Json | None = None
    # How many of its Instances its own budgets move at once (at least one).
    batch: int = 1

    def live(self) -> list[Row]:
        return [r for r in self.rows if r.surge_of is None and r.phase != Phase.DELETING]

    @property
    def done(self) -> int:
        """Instances Ready on the target, at rest."""
        return sum(1 for r in self.live() if r.revision == self.target
                   and r.phase == Phase.READY and r.operation is None)

    @property
    def moved(self) -> int:
        """Instances on the target or moving to it."""
        return sum(1 for r in self.live() if r.revision == self.target or _toward(r, self))

    def in_flight(self, surge: bool) -> int:
        """Updates toward the target under way: surges, or the others."""
        return sum(1 for r in self.live() if _toward(r, self)
                   and (r.operation is not None and r.operation.mode == Mode.SURGE) == surge)

    def share(self) -> Fraction:
        return Fraction(self.done, self.replicas) if self.replicas else Fraction(1)


def _toward(row: Row, member: Member) -> bool:
    return (row.operation is not None and row.phase != Phase.FAILED
            and row.operation.target_revision == member.target)


def batch_of(settings: ComponentSettings, replicas: int) -> int:
    """How many Instances a member's own budgets move at once: its maxSurge under
    SurgeThenDrain (its maxUnavailable when that is 0), else its maxUnavailable; all of
    them when unset; at least one."""
    surge = scaled_value(settings.max_surge, replicas)
    down = scaled_value(settings.max_unavailable, replicas)
    budget = surge if settings.strategy == SURGE_THEN_DRAIN and surge != 0 else down
    return max(1, replicas if budget is None else budget)


def group_views(group: Json, members: list[Member],
                steps: tuple[CanaryStep, ...] = ()) -> dict[str, GroupView]:
    """Each member's view of the group ``group`` (its ``spec.rollout.groups`` entry)."""
    if group.get("strategy") == BLUE_GREEN:
        return _blue_green(group, members)
    counted = [m for m in members if m.replicas > 0]
    wave = min((min(Fraction(1), Fraction(m.done + max(1, m.batch), m.replicas))
                for m in counted), default=Fraction(1))
    allowed = {m.component: _allowed(m, wave, _group_step(
        [o for o in members if o is not m], steps), steps) for m in members}
    total = sum(m.replicas for m in members)
    surge = _rooms(members, allowed, scaled_value(group.get("maxSurge"), total), surge=True)
    down = _rooms(members, allowed, scaled_value(group.get("maxUnavailable"), total),
                  surge=False)
    name = str(group.get("name") or "")
    names = tuple(m.component for m in members)
    views = {}
    for member in members:
        others = [m for m in counted if m is not member]
        slowest = min(others, key=lambda m: (m.share(), names.index(m.component)),
                      default=None)
        why = "" if slowest is None else (
            f"{slowest.component} has {slowest.done}/{slowest.replicas} Instances Ready "
            f"on its new revision")
        step = _group_step(others, steps)
        if step is not None:
            why += f"{'; ' if why else ''}the group is at canary step {step}/{len(steps)}"
        moving = any(m.in_flight(True) + m.in_flight(False) > 0
                     or allowed[m.component] > m.moved for m in others)
        views[member.component] = GroupView(
            name, names, allowed[member.component],
            None if slowest is None else slowest.component, why,
            surge.get(member.component), down.get(member.component), moving)
    return views


# An Instance past these steps of its surge serves from its new pods.
SWITCHED = (Step.DRAIN_OLD, Step.WAIT_DRAINED)


def _blue_green(group: Json, members: list[Member]) -> dict[str, GroupView]:
    """Every member's full new set at once; the switch once all of it waits for it."""
    names = tuple(m.component for m in members)
    waiting = {m.component: _not_at_switch(m) for m in members}
    switch = not any(waiting.values())
    behind = next((m for m in members if waiting[m.component]), None)
    why = "every member's new set is Available: serving switches to it"
    if behind is not None:
        count = waiting[behind.component]
        why = (f"{behind.component} has {count} Instance{'' if count == 1 else 's'} whose "
               "new pods are not Available yet")
    return {m.component: GroupView(
        str(group.get("name") or ""), names, m.replicas,
        None if switch or behind is None else behind.component, why, None, None,
        not switch, blue_green=True, switch=switch) for m in members}


def _not_at_switch(member: Member) -> int:
    """Instances of ``member`` not yet waiting at the hand-over (nor past it)."""
    waiting = 0
    for row in member.live():
        if row.revision == member.target and row.operation is None:
            continue
        operation = row.operation
        if operation is None or operation.target_revision != member.target \
                or row.phase == Phase.FAILED \
                or operation.step not in (Step.HAND_OVER, *SWITCHED):
            waiting += 1
    return waiting


def _group_step(members: list[Member], steps: tuple[CanaryStep, ...]) -> int | None:
    """The group's canary step as ``members`` record it: the lowest any of them with
    Instances left to move records (a member yet to record one is at step 1); None when the canary is done or
    none moves the group."""
    if not steps:
        return None
    recorded = []
    for member in members:
        if member.moved >= len(member.live()):
            continue  # nothing left to move: it does not hold the group back
        canary = member.canary if isinstance(member.canary, dict) else {}
        if canary.get("target") != member.target:
            recorded.append(1)
        elif not canary.get("done"):
            step = canary.get("step")
            recorded.append(step if isinstance(step, int) and step >= 1 else 1)
    step = min(recorded, default=None)
    return step if step is not None and step <= len(steps) else None


def _allowed(member: Member, wave: Fraction, step: int | None,
             steps: tuple[CanaryStep, ...]) -> int:
    by_wave = math.ceil(wave * member.replicas)
    if step is None:
        return by_wave
    return min(by_wave, allowed_at(steps[step - 1], member.replicas))


def _rooms(members: list[Member], allowed: dict[str, int], budget: int | None,
           surge: bool) -> dict[str, int]:
    """What the group's budget has left, handed to the members furthest behind first."""
    if budget is None:
        return {}
    left = max(0, budget - sum(m.in_flight(surge) for m in members))
    rooms = {}
    order = sorted(members, key=lambda m: (m.share(), members.index(m)))
    for member in order:
        room = min(left, max(0, allowed[member.component] - member.moved))
        rooms[member.component] = room
        left -= room
    return rooms
