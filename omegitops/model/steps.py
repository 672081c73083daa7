"""The step machine as data: the names of operations, their modes and steps, and for
each (type, mode) the steps its operation goes through and which may follow which.

``SEQUENCES`` is the one table. Reading a stored row refuses an operation whose
(type, mode, step) is not on it (``on_table``); every move of an operation from one
step to another goes through ``Row.step_to``, which refuses one the table does not
allow (``check_move``): the next step on the line, or one of the sequence's
documented exits (a side step such as Surge's Abandon, a step skipped, a step taken
again). The docs' tables (lifecycle/steps.py, docs/contributing/design.md) are
rendered from it (``markdown_table``, ``rst_table``), and a test holds them to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OperationType(StrEnum):
    """What an Instance is doing (DESIGN.md §4)."""

    CREATE = "Create"
    UPDATE = "Update"
    RESTART = "Restart"
    DELETE = "Delete"
    # Make-before-break off a node that is going away (lifecycle/migration.py).
    MIGRATE = "Migrate"


class Mode(StrEnum):
    """How an operation moves the Instance: an Update surges, drains or patches in
    place; a Restart rebuilds the whole Instance or only its failed pod."""

    SURGE = "Surge"
    DRAIN = "Drain"
    IN_PLACE = "InPlace"
    INSTANCE = "Instance"
    POD = "Pod"


class Step(StrEnum):
    """The steps operations go through; which follow which is ``SEQUENCES`` below."""

    # Bring-up, shared by Create, a Drain update and a Restart.
    CREATE_PODS = "CreatePods"
    WAIT_READY = "WaitReady"
    WAIT_AVAILABLE = "WaitAvailable"
    # Teardown, shared by Delete, a Drain update and a Restart.
    UNROUTE = "Unroute"
    DELETE_PODS = "DeletePods"
    WAIT_GONE = "WaitGone"
    # InPlace.
    PATCH_IMAGES = "PatchImages"
    # Surge.
    SURGE_CREATE = "SurgeCreate"
    SURGE_WAIT_READY = "SurgeWaitReady"
    SURGE_WAIT_AVAILABLE = "SurgeWaitAvailable"
    HAND_OVER = "HandOver"
    DRAIN_OLD = "DrainOld"
    WAIT_DRAINED = "WaitDrained"
    ABANDON = "Abandon"


@dataclass(frozen=True, slots=True)
class Exit:
    """A move besides the next step on the line: from ``source`` to ``target`` (in the
    sequence of ``mode`` when given, else in the same one), and why the code takes it."""

    source: tuple[Step, ...]
    target: Step
    why: str
    mode: Mode | None = None


@dataclass(frozen=True, slots=True)
class Sequence:
    """One operation's steps: the line it goes along in order, the side steps off it,
    and the other moves it may make."""

    line: tuple[Step, ...]
    side: tuple[Step, ...] = ()
    exits: tuple[Exit, ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.line + self.side

    def first(self) -> Step:
        return self.line[0]

    def following(self, step: Step) -> tuple[tuple[Mode | None, Step], ...]:
        """Where an operation at ``step`` may move: (a new mode or None, the step)."""
        moves: list[tuple[Mode | None, Step]] = []
        if step in self.line and step != self.line[-1]:
            moves.append((None, self.line[self.line.index(step) + 1]))
        moves.extend((e.mode, e.target) for e in self.exits if step in e.source)
        return tuple(moves)


_BRING_UP = (Step.CREATE_PODS, Step.WAIT_READY, Step.WAIT_AVAILABLE)
_TEARDOWN = (Step.UNROUTE, Step.DELETE_PODS, Step.WAIT_GONE)
_RECYCLE = Exit((Step.WAIT_READY, Step.WAIT_AVAILABLE), Step.CREATE_PODS,
                "a pod that ended is recycled: CreatePods waits for it to go and "
                "builds it again (TerminalPodRecycled)")

# Key: (operation type, mode; None for an operation that has no mode).
SEQUENCES: dict[tuple[OperationType, Mode | None], Sequence] = {
    (OperationType.CREATE, None): Sequence(_BRING_UP, exits=(_RECYCLE,)),
    (OperationType.DELETE, None): Sequence(_TEARDOWN),
    (OperationType.RESTART, Mode.INSTANCE): Sequence(_TEARDOWN + _BRING_UP,
                                                     exits=(_RECYCLE,)),
    (OperationType.RESTART, Mode.POD): Sequence(
        (Step.UNROUTE, Step.WAIT_GONE) + _BRING_UP, exits=(
            Exit((Step.UNROUTE,), Step.CREATE_PODS,
                 "no pod of the Instance ended or is terminating: nothing to wait for"),
            _RECYCLE)),
    (OperationType.UPDATE, Mode.DRAIN): Sequence(_TEARDOWN + _BRING_UP,
                                                 exits=(_RECYCLE,)),
    (OperationType.UPDATE, Mode.IN_PLACE): Sequence(
        (Step.UNROUTE, Step.PATCH_IMAGES, Step.WAIT_READY, Step.WAIT_AVAILABLE), exits=(
            Exit((Step.UNROUTE, Step.PATCH_IMAGES), Step.UNROUTE,
                 "the target's ControllerRevision is gone before the patch: the "
                 "Instance is recreated instead", mode=Mode.DRAIN),)),
    (OperationType.UPDATE, Mode.SURGE): Sequence(
        (Step.SURGE_CREATE, Step.SURGE_WAIT_READY, Step.SURGE_WAIT_AVAILABLE,
         Step.HAND_OVER, Step.DRAIN_OLD, Step.WAIT_DRAINED),
        side=(Step.ABANDON,), exits=(
            Exit((Step.SURGE_CREATE, Step.SURGE_WAIT_READY, Step.SURGE_WAIT_AVAILABLE,
                  Step.HAND_OVER), Step.ABANDON,
                 "a single pod's target is withdrawn before the hand-over: its new pod "
                 "goes and the Instance stays where it is"),
            Exit((Step.HAND_OVER,), Step.SURGE_WAIT_AVAILABLE,
                 "a gang's replacement stopped serving before the hand-over: the source "
                 "keeps serving while it recovers"))),
    # A migration builds its replacement as a gang's surge does, at a new index, for a
    # single pod too, and keeps it off the node it leaves.
    (OperationType.MIGRATE, Mode.SURGE): Sequence(
        (Step.SURGE_CREATE, Step.SURGE_WAIT_READY, Step.SURGE_WAIT_AVAILABLE,
         Step.HAND_OVER, Step.DRAIN_OLD, Step.WAIT_DRAINED), exits=(
            Exit((Step.HAND_OVER,), Step.SURGE_WAIT_AVAILABLE,
                 "the replacement stopped serving before the hand-over: the source "
                 "keeps serving while it recovers"),)),
}


def sequence(kind: OperationType, mode: Mode | None) -> Sequence | None:
    return SEQUENCES.get((kind, mode))


def on_table(kind: OperationType, mode: Mode | None, step: Step) -> bool:
    """Whether an operation of ``kind`` in ``mode`` ever stands at ``step``."""
    found = SEQUENCES.get((kind, mode))
    return found is not None and step in found.steps


class OffTable(ValueError):
    """A move the step table does not allow: a programming error, never the cluster's."""


def check_move(kind: OperationType, mode: Mode | None, step: Step, new_mode: Mode | None,
               new_step: Step) -> None:
    """Raise ``OffTable`` unless an operation at (kind, mode, step) may move to
    (kind, new_mode, new_step). Staying where it is is always allowed."""
    if new_mode == mode and new_step == step:
        return
    found = SEQUENCES.get((kind, mode))
    if found is not None and step in found.steps and (
            (None if new_mode == mode else new_mode, new_step) in found.following(step)):
        return
    raise OffTable(f"{kind} ({mode or '-'}) may not move from {step} to {new_step}"
                   + (f" in mode {new_mode}" if new_mode != mode else ""))


# -- the tables the docs show ---------------------------------------------------------


def _key(kind: OperationType, mode: Mode | None) -> str:
    return f"({kind}, {mode or '-'})"


def _steps_text(found: Sequence) -> str:
    text = ", ".join(found.line)
    if found.side:
        text += f"; side: {', '.join(found.side)}"
    return text


def _exit_text(exit_: Exit) -> str:
    target = f"{exit_.mode}'s {exit_.target}" if exit_.mode else str(exit_.target)
    return f"{' / '.join(exit_.source)} -> {target}: {exit_.why}"


def markdown_table() -> str:
    """The table as docs/contributing/design.md shows it."""
    lines = ["| (type, mode) | steps, in order | other moves |", "|---|---|---|"]
    for (kind, mode), found in SEQUENCES.items():
        exits = "<br>".join(_exit_text(e) for e in found.exits) or "-"
        lines.append(f"| {_key(kind, mode)} | {_steps_text(found)} | {exits} |")
    return "\n".join(lines) + "\n"


def rst_table(width: int = 86) -> str:
    """The table as lifecycle/steps.py's docstring shows it (steps only, wrapped)."""
    left = 1 + max(len(_key(kind, mode)) for kind, mode in SEQUENCES)
    rule = "=" * left + "  " + "=" * (width - left - 2)
    lines = [rule, f"{'(type, mode)':<{left}}  steps", rule]
    for (kind, mode), found in SEQUENCES.items():
        words, line = _steps_text(found).split(" "), ""
        head = _key(kind, mode)
        for word in words:
            if line and len(line) + 1 + len(word) > width - left - 2:
                lines.append(f"{head:<{left}}  {line}")
                head, line = "", word
            else:
                line = f"{line} {word}" if line else word
        lines.append(f"{head:<{left}}  {line}")
    lines.append(rule)
    return "\n".join(lines) + "\n"
