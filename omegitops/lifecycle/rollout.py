"""Rollout pacing: which Instances start moving this pass, and what holds the rest.

partition holds that many Instances on their revision, the lowest-indexed of
those the rollout has not reached (model/partition.py: it counts Instances in
index order, not index values, since the indices can have gaps); maxSurge and
maxUnavailable bound how many move at once, each a whole number or a percentage of the desired Instances rounded up. When nothing sets
the budget a strategy reads, every Instance may move at once.

The pass first decides (``decide_rollout``: reads only, returns a
``RolloutDecision``), then acts on the decision (``apply_rollout``: opens the
updates it names, refuses those InPlaceOnly refuses, records the hold), so a
decision can be tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegitops.lifecycle.availability import counted_pods, extras, surge_in_use, unavailable
from omegitops.lifecycle.canary import Canary, current_step, partition_of, steps_of, wake_of
from omegitops.lifecycle.pause import Pause, described, how_to_resume, pauses
from omegitops.lifecycle.retries import held, start_wait
from omegitops.lifecycle.updates import changes_no_container, open_update, update_mode
from omegitops.lifecycle.work import Work
from omegitops.model.budgets import scaled_value
from omegitops.model.groups import GroupView
from omegitops.model.partition import partition_held
from omegitops.model.state import Gate, Hold, Json, Mode, Phase, Row, Strategy
from omegitops.util.times import format_time


@dataclass(frozen=True)
class Move:
    """One candidate Instance the decision acts on: started in ``mode``, or refused
    (``mode`` None: InPlaceOnly, a change beyond images)."""

    index: int
    mode: Mode | None


@dataclass(frozen=True)
class RolloutDecision:
    """What one pass's rollout does, decided before anything is opened.

    Every count is in Instances (a gang counts once) and is never negative.

    - ``target``: the desired revision the rollout moves Instances to.
    - ``partition``: how many Instances stay on their revision; ``held``: which
      (``partition_held``).
    - ``max_surge``, ``max_unavailable``: the budgets as whole numbers (a percentage
      of the desired Instances, rounded up); None when unset, and then unbounded.
    - ``surge_in_use``: surge slots held before this pass starts anything (extra pods,
      in-flight surges); ``surge_after``: held once the starts below are made.
    - ``unavailable``: desired places not served before this pass starts anything;
      ``unavailable_after``: once the disruptive starts below are made.
    - ``moves``: in order, the Instances started (lowest index first, those serving
      nothing before the others, since moving them costs no budget) and refused.
    - ``hold_reason``: the first budget that kept a candidate waiting, or None.
    - ``wakes``: when the pass should look again (a held slot frees, a backoff ends).
    - ``pending``: Instances remain to move, neither refused nor held by a revision
      hold nor by a pause, so the component stays busy.
    - ``paused``: what pauses the rollout (lifecycle/pause.py); while anything does,
      nothing starts.
    - ``canary``: the canary's current step (lifecycle/canary.py), whose count of
      Instances on the new revision replaces the partition while it holds.
    - ``group``: the rollout group as the pass observed it (lifecycle/groups.py): its
      count of Instances on the new revision caps the partition too; ``group_held``:
      the Instances only the group holds; ``group_reason``: the group's own budget
      that kept a candidate waiting.
    """

    target: str
    partition: int
    held: frozenset[int]
    max_surge: int | None
    max_unavailable: int | None
    surge_in_use: int
    surge_after: int
    unavailable: int
    unavailable_after: int
    moves: tuple[Move, ...]
    hold_reason: str | None
    wakes: tuple[float, ...]
    pending: bool
    paused: tuple[Pause, ...] = ()
    canary: Canary | None = None
    group: GroupView | None = None
    group_held: frozenset[int] = frozenset()
    group_reason: str | None = None

    @property
    def starts(self) -> tuple[Move, ...]:
        return tuple(move for move in self.moves if move.mode is not None)

    @property
    def refused(self) -> tuple[int, ...]:
        return tuple(move.index for move in self.moves if move.mode is None)


@dataclass(frozen=True)
class RolloutOutcome:
    """What the status reports about the rollout: the decision and its hold."""

    decision: RolloutDecision
    # While a budget holds the rollout.
    hold: Hold | None

    @property
    def partition(self) -> int:
        return self.decision.partition

    @property
    def refused(self) -> tuple[int, ...]:
        return self.decision.refused

    @property
    def pending(self) -> bool:
        return self.decision.pending


def plan_rollout(work: Work, previous_hold: Json | None) -> RolloutOutcome:
    """Start what the budgets allow; return what the status reports about the rollout."""
    decision = decide_rollout(work)
    return RolloutOutcome(decision, apply_rollout(work, decision, previous_hold))


def decide_rollout(work: Work) -> RolloutDecision:
    """Which outdated Instances start this pass, how, and what holds the others."""
    lifecycle = work.lifecycle
    target = work.desired.revision
    desired = lifecycle.replicas
    canary = _canary(work, target)
    # "A canary's current step replaces your partition" (update-strategies.txt).
    partition = partition_of(canary, desired, lifecycle.settings.partition)
    group = work.observed.group
    own_partition = partition
    if group is not None:
        # No member runs ahead of its group: the group's count caps this one's too.
        partition = max(partition, desired - group.allowed)
    strategy = lifecycle.strategy
    max_surge = scaled_value(lifecycle.settings.max_surge, desired)
    if work.observed.group is not None and work.observed.group.blue_green:
        max_surge = None  # blue-green: the whole new set comes up beside the old
    max_unavailable = scaled_value(lifecycle.settings.max_unavailable, desired)
    surge_slots, notes, frees = surge_in_use(work)
    surge_before = surge_slots
    down, down_rows = unavailable(work)
    down_before = down
    reasons: list[str] = []
    moves: list[Move] = []
    wakes: list[float] = []
    step_ends = wake_of(canary)
    if step_ends is not None:
        wakes.append(step_ends)
    holds = frozenset(partition_held(work.rows.values(), target, partition))
    group_held = frozenset() if group is None else holds - frozenset(
        partition_held(work.rows.values(), target, own_partition))
    group_reasons: list[str] = []
    group_surge = group_down = 0
    paused = _pauses(work)
    # A paused rollout starts nothing; what is already moving goes on (advance).
    candidates = [] if paused else [row for row in work.rows.values()
                                    if _outdated(work, row, target)]
    # Instances that serve nothing cost no budget to move: take them first.
    candidates.sort(key=lambda r: (r.index not in down_rows and r.phase != Phase.FAILED,
                                   r.index))
    for row in candidates:
        if row.index in holds:
            continue
        allowed, wake = start_wait(work, row, target)
        if wake is not None:
            wakes.append(wake)
        if not allowed:
            continue
        surge_ok = strategy != Strategy.SURGE_THEN_DRAIN or max_surge != 0
        mode = update_mode(work, row, strategy, surge_ok)
        if mode is None:
            moves.append(Move(row.index, None))
            continue
        if mode == Mode.SURGE:
            # A start evicts what an earlier attempt left on this Instance and takes
            # over the slot those pods held, so it is not charged twice.
            cost = 0 if _has_extras(work, row) else 1
            if max_surge is not None and surge_slots + cost > max_surge:
                reasons.append(f"per-Component surge budget {max_surge} exhausted "
                               f"(would become {surge_slots + 1})" + "".join(
                                   f"; {note}" for note in notes))
                continue
            if group is not None and group.surge_room is not None and cost \
                    and group_surge + 1 > group.surge_room:
                group_reasons.append(_group_budget(group, "surge"))
                continue
            surge_slots += cost
            group_surge += cost
        else:
            # A move that changes no container (a pod label alone) takes nothing out
            # of service, so it costs no unavailability budget.
            costs = (row.index not in down_rows and row.phase != Phase.FAILED
                     and not (mode == Mode.IN_PLACE and changes_no_container(work, row)))
            if costs and max_unavailable is not None and down + 1 > max_unavailable:
                reasons.append(f"per-Component unavailability budget {max_unavailable} "
                               f"exhausted (would become {down + 1})")
                continue
            if costs and group is not None and group.unavailable_room is not None \
                    and group_down + 1 > group.unavailable_room:
                group_reasons.append(_group_budget(group, "unavailability"))
                continue
            if costs:
                group_down += 1
                down += 1
                down_rows.add(row.index)
        moves.append(Move(row.index, mode))
    if reasons or group_reasons:
        wakes.extend(frees)
    refused = {move.index for move in moves if move.mode is None}
    # Instances still to move (not refused, not held) keep the component busy.
    outstanding = [r for r in work.rows.values()
                   if r.revision != target and r.index not in holds
                   and r.surge_of is None and r.phase != Phase.DELETING
                   and r.index not in refused and r.refused != target]
    # Held by the group while another member can still move: the rollout is under way.
    group_waits = group is not None and group.moving and any(
        r.revision != target and r.surge_of is None and r.phase != Phase.DELETING
        for r in work.rows.values() if r.index in group_held)
    return RolloutDecision(
        target=target, partition=partition, held=holds, max_surge=max_surge,
        max_unavailable=max_unavailable, surge_in_use=surge_before, surge_after=surge_slots,
        unavailable=down_before, unavailable_after=down, moves=tuple(moves),
        hold_reason=reasons[0] if reasons else None, wakes=tuple(wakes),
        # A timed canary pause ends by itself: the rollout is still under way.
        pending=(bool(outstanding) or step_ends is not None or group_waits)
        and not held(work, target) and not paused,
        paused=paused, canary=canary, group=group, group_held=group_held,
        group_reason=group_reasons[0] if group_reasons else None)


def _group_budget(group: GroupView, kind: str) -> str:
    return (f"rollout group {group.name}'s {kind} budget is used up across its members "
            f"({', '.join(group.members)})")


def _canary(work: Work, target: str) -> Canary | None:
    """The canary step this pass, from the step the status records, the promotion the
    InferenceReplica's annotation records and the pass's clock reading."""
    annotations = ((work.observed.replica or {}).get("metadata") or {}).get("annotations")
    return current_step(steps_of(work.lifecycle), work.lifecycle.replicas, target,
                        work.rows.values(), work.previous.get("canary"), annotations,
                        work.now, held(work, target))


def _pauses(work: Work) -> tuple[Pause, ...]:
    """What pauses the rollout: the desired lifecycle (Git) and the InferenceReplica's
    annotation as observed (the cluster)."""
    desired = work.desired
    annotations = ((work.observed.replica or {}).get("metadata") or {}).get("annotations")
    return pauses(desired.lifecycle, desired.namespace, desired.isvc, annotations,
                  desired.paused_at)


def apply_rollout(work: Work, decision: RolloutDecision,
                  previous_hold: Json | None) -> Hold | None:
    """Open and refuse what ``decision`` says, in its order; return the hold to record."""
    strategy = work.lifecycle.strategy
    for move in decision.moves:
        row = work.rows[move.index]
        if move.mode is None:
            work.put(_refuse(work, row, decision.target))
        else:
            work.put(open_update(work, row, strategy, move.mode))
    for moment in decision.wakes:
        work.wake(moment)
    gate_reason = _hold_gate(work, decision)
    if gate_reason is None:
        return None
    gate, reason = gate_reason
    since = format_time(work.now)
    if gate == Gate.PAUSED:
        return _pause_hold(decision, reason, since, previous_hold)
    if gate == Gate.CANARY_STEP and decision.canary and decision.canary.reached_at:
        # The step holds the rest since its Instances reached the new revision.
        return Hold(gate, reason, format_time(decision.canary.reached_at), decision.target)
    if previous_hold and previous_hold.get("gate") == gate \
            and previous_hold.get("target") == decision.target:
        since = previous_hold.get("since") or since
    return Hold(gate, reason, since, decision.target)


def _pause_hold(decision: RolloutDecision, reason: str, now: str,
                previous_hold: Json | None) -> Hold:
    """A pause holds since the cluster's annotation says, else since the pass that
    first saw it: a new revision committed while paused does not restart the clock."""
    since = next((p.since for p in decision.paused if p.since), None)
    if since is None and previous_hold and previous_hold.get("gate") == Gate.PAUSED.value:
        since = previous_hold.get("since")
    return Hold(Gate.PAUSED, reason, since or now, decision.target,
                by=described(decision.paused))


def _hold_gate(work: Work, decision: RolloutDecision) -> tuple[Gate, str] | None:
    """The gate that stops the rollout, and why (update-strategies.txt: "While no
    Instance of a component can move, the component's rollout hold names the gate that
    stops it"): a budget; else, with nothing started and nothing moving toward the
    target, a held revision or InPlaceOnly's refusal."""
    if decision.paused:
        return Gate.PAUSED, _pause_reason(work, decision)
    if decision.hold_reason is not None:
        return Gate.BUDGET, decision.hold_reason
    if decision.group_reason is not None:
        return Gate.GROUP, decision.group_reason
    if decision.starts or _moving(work, decision.target):
        return None
    if held(work, decision.target) and any(
            _outdated(work, row, decision.target) and row.index not in decision.held
            for row in work.rows.values()):
        entry = work.retries.get(decision.target) or {}
        attempts = int(entry.get("attempts") or 0)
        return Gate.HELD, (f"revision {decision.target} is held after {attempts} failed "
                           f"attempt{'' if attempts == 1 else 's'}")
    if decision.refused:
        indices = ", ".join(str(i) for i in decision.refused)
        return Gate.IN_PLACE_ONLY, (f"InPlaceOnly strategy but diff exceeds container "
                                    f"images (Instances {indices})")
    waiting = [r for r in work.rows.values() if r.index in decision.group_held
               and r.revision != decision.target and r.surge_of is None
               and r.phase != Phase.DELETING]
    if decision.group is not None and waiting:
        return Gate.GROUP, _group_reason(decision.group, len(waiting), decision.target)
    canary = decision.canary
    if canary is not None and canary.waits_on_pause and decision.held:
        return Gate.CANARY_STEP, _canary_reason(work, canary, len(decision.held))
    return None


def _group_reason(group: GroupView, waiting: int, target: str) -> str:
    """Which group holds the component, how many of its Instances wait, for whom."""
    text = (f"rollout group {group.name} ({', '.join(group.members)}) lets {group.allowed} "
            f"Instance{'' if group.allowed == 1 else 's'} onto {target}; {waiting} "
            f"wait{'s' if waiting == 1 else ''}")
    if group.waits_for:
        text += f" for {group.waits_for}"
    return f"{text}: {group.why}" if group.why else text


def _canary_reason(work: Work, canary: Canary, waiting: int) -> str:
    """The step, what it waits for, and how to go on at once."""
    desired = work.desired
    text = (f"canary step {canary.step}/{canary.steps}: {canary.allowed} Instance"
            f"{'' if canary.allowed == 1 else 's'} on {canary.target}, {waiting} "
            f"wait{'s' if waiting == 1 else ''} for {canary.waiting_for}")
    return (f"{text}; to go on now: omegitops rollout promote {desired.isvc} "
            f"-c {desired.component} -n {desired.namespace}")


def _pause_reason(work: Work, decision: RolloutDecision) -> str:
    """What the pause holds, and how to lift it."""
    desired = work.desired
    moving = [row.index for row in work.rows.values()
              if row.operation is not None and row.phase != Phase.FAILED
              and row.operation.target_revision == decision.target]
    waiting = sum(1 for row in work.rows.values()
                  if row.revision != decision.target and row.surge_of is None
                  and row.phase != Phase.DELETING and row.index not in decision.held
                  and row.index not in moving)
    text = (f"rollout paused by {described(decision.paused)}: no update starts; "
            f"{waiting} Instance{'' if waiting == 1 else 's'} wait on their revision")
    if moving:
        text += (f", {len(moving)} already moving "
                 f"finish{'es' if len(moving) == 1 else ''} first")
    resume = how_to_resume(decision.paused, desired.isvc, desired.namespace,
                           desired.component)
    return f"{text}; to resume: {resume}"


def _moving(work: Work, target: str) -> bool:
    """An update toward ``target`` is in flight: the rollout moves."""
    return any(row.operation is not None and row.phase != Phase.FAILED
               and row.operation.target_revision == target
               for row in work.rows.values())


def _has_extras(work: Work, row: Row) -> bool:
    pods = counted_pods(work, work.pods_of(row.index))
    return bool(extras(work, row, pods, work.needed_for(row)))


def _outdated(work: Work, row: Row, target: str) -> bool:
    if row.index in work.moved:
        return False  # one step per pass: it moves again next pass
    if row.revision == target or row.surge_of is not None:
        return False
    if row.operation is not None and row.phase != Phase.FAILED:
        return False
    return row.phase != Phase.DELETING


def _refuse(work: Work, row: Row, target: str) -> Row:
    """InPlaceOnly refuses any change but images: the Instance stays, the rollout stalls."""
    if row.refused == target:
        return row
    work.event("Warning", "InPlaceUpdateNotPossible", row.index,
               "rejected update: InPlaceOnly strategy but diff exceeds container images")
    return row.but(refused=target)
