"""An Instance's recorded state: its row in the InferenceReplica's status and the
operation it holds, as typed values, and the names of phases and strategies (those of
operations, modes and steps are model/steps.py's, beside the table of which step
follows which; they are imported from here too).

Both are frozen values. A row is read from the status once (``Row.from_storage``);
each step returns a new row (``Row.but``, ``Row.step_to``) and never changes the one
it was given; the pass writes the last of them back once (``Row.for_storage``), as
kopf keeps a handler's state (``from_storage``, ``with_outcome``, ``for_storage``).
The stored form holds plain strings, never the enums: every copy of the status goes
through ``marshal`` (omegitops/util/copying.py), which refuses a ``str`` subclass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import Any, NotRequired, TypedDict, Unpack

from omegitops.model.steps import Mode, OperationType, Step, check_move, on_table

__all__ = ["Json", "Mode", "Operation", "OperationType", "Outcome", "Phase", "Row", "Step",
           "Strategy"]

# Raw Kubernetes JSON (a pod, a condition, a failure record): kept as the API gives it.
Json = dict[str, Any]


class Phase(StrEnum):
    """An Instance's phase (instances.txt "Phases")."""

    PENDING = "Pending"
    CREATING = "Creating"
    READY = "Ready"
    UPDATING = "Updating"
    RESTARTING = "Restarting"
    MIGRATING = "Migrating"
    DELETING = "Deleting"
    FAILED = "Failed"


class Strategy(StrEnum):
    """updateStrategy.type (update-strategies.txt)."""

    SURGE_THEN_DRAIN = "SurgeThenDrain"
    RECREATE_POD = "RecreatePod"
    IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"
    IN_PLACE_ONLY = "InPlaceOnly"


class Gate(StrEnum):
    """What holds a rollout (``status.rolloutHold.gate``)."""

    BUDGET = "Budget"
    # The revision is held after failed attempts (OME's RetryBlock Held).
    HELD = "Held"
    # InPlaceOnly refuses a change beyond container images.
    IN_PLACE_ONLY = "InPlaceOnly"
    # A person paused the rollout: in Git (lifecycle.paused) or on the cluster (the
    # InferenceReplica's ome.io/rollout-paused annotation).
    PAUSED = "Paused"
    # A canary step holds the rest of the Instances on their revision while it waits
    # (a timed pause, or a promotion: lifecycle/canary.py).
    CANARY_STEP = "CanaryStep"
    # The component's rollout group holds it: another member is behind, or the group's
    # own budget is used up (lifecycle/groups.py).
    GROUP = "Group"


class StoredHold(TypedDict):
    """``status.rolloutHold`` as the InferenceReplica stores it."""

    gate: str
    reason: str
    since: str
    target: str
    # Who or what paused the rollout (a Paused hold only).
    by: NotRequired[str]


@dataclass(frozen=True, slots=True)
class Hold:
    """What holds the rollout: the gate, why, since when, toward which revision, and
    for a pause who or what paused it."""

    gate: Gate
    reason: str
    since: str
    target: str
    by: str | None = None

    @classmethod
    def from_storage(cls, stored: object) -> Hold | None:
        """The hold a status records; None when it records none, or one it cannot read
        (a hold is recomputed on every pass)."""
        if not isinstance(stored, dict):
            return None
        try:
            gate = Gate(str(stored.get("gate")))
        except ValueError:
            return None
        by = stored.get("by")
        return cls(gate, str(stored.get("reason") or ""), str(stored.get("since") or ""),
                   str(stored.get("target") or ""), None if by is None else str(by))

    def for_storage(self) -> StoredHold:
        stored: StoredHold = {"gate": self.gate.value, "reason": self.reason,
                              "since": self.since, "target": self.target}
        if self.by is not None:
            stored["by"] = self.by
        return stored


class Outcome(Enum):
    """What a step left of the Instance: still there, or gone from the record."""

    KEPT = "kept"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Operation:
    """The operation an Instance holds (``status.instances[].operation``)."""

    type: OperationType
    step: Step
    strategy: str | None = None
    started_at: str | None = None
    deadline: str | None = None
    waiting: str | None = None
    mode: Mode | None = None
    target_revision: str | None = None
    # A single-pod surge builds its new pod at this ordinal.
    ordinal: int | None = None
    # A gang surge's replacement Instance.
    replacement: int | None = None
    handed_over: bool = False
    # The surge's new pod entered rotation.
    served: bool = False
    # A fresh start: every old pod goes before any is built.
    fresh: bool = False
    # A rebuild of a Failed Instance: a failed Update's retry, or a new revision that
    # reaches it. It keeps the incarnation (instances.txt).
    retry: bool = False
    # An abandoned replacement that never served is deleted with this grace.
    abandon_grace: int | None = None
    overdue: bool = False
    # The API server refused a create: {pod, message, time} (reconcile records it).
    refused: Json | None = None
    # Pods seen waiting in a stuck state, by name: since when.
    stuck: Mapping[str, str] | None = None
    # A scheduling gate held the pods on the pass at ``held_at``; it ended at ``hold_ended``.
    held_at: str | None = None
    hold_ended: str | None = None
    # A migration's node it moves the Instance off, and why it does.
    leaving: str | None = None
    leaving_why: str | None = None

    @classmethod
    def from_storage(cls, stored: Json) -> Operation:
        """An operation ``replica.read_rows`` found readable."""
        values = _present(stored, _OPERATION_KEYS)
        values.update(type=OperationType(stored["type"]), step=Step(stored["step"]))
        if "mode" in values:
            values["mode"] = Mode(values["mode"])
        if not on_table(values["type"], values.get("mode"), values["step"]):
            raise ValueError(f"no {values['type']} operation in mode {values.get('mode')} "
                             f"stands at {values['step']}")
        if "stuck" in values:
            values["stuck"] = dict(values["stuck"])
        return cls(**values)

    def for_storage(self) -> Json:
        stored: Json = {"type": self.type.value, "step": self.step.value,
                        "strategy": self.strategy, "startedAt": self.started_at,
                        "deadline": self.deadline, "waiting": self.waiting}
        for name, key in _OPERATION_KEYS.items():
            if key in stored:
                continue
            value = getattr(self, name)
            if value is None or value is False:
                continue
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, Mapping):
                value = dict(value)
            stored[key] = value
        return stored


@dataclass(frozen=True, slots=True)
class Row:
    """One Instance's row (an OMENativeInstanceStatus)."""

    index: int
    incarnation: int
    phase: Phase
    revision: str
    operation: Operation | None = None
    last_failure: Json | None = None
    # The pods as the last pass saw them (render/pods.py pod_row).
    pods: tuple[Json, ...] = ()
    # The ordinal of a single pod's own pod: 1 after a surge promoted its new pod.
    ordinal: int | None = None
    # A gang surge's replacement, of the Instance at this index.
    surge_of: int | None = None
    # A Failed Instance to start over from scratch (a lost replacement, a reset).
    rebuild: bool = False
    # The revision InPlaceOnly refused to move this Instance to.
    refused: str | None = None
    # Failed attempts that were not the revision's fault, and when the next may start.
    attempts: int | None = None
    retry_at: str | None = None
    # Nodes later attempts keep off (autoMigrate), oldest first, and the revision those
    # attempts build: the steering ends with it.
    avoid_nodes: tuple[str, ...] | None = None
    avoid_for: str | None = None

    @property
    def own_ordinal(self) -> int:
        return self.ordinal or 0

    @property
    def op(self) -> Operation:
        """The operation a step works on: only rows holding one reach a step."""
        if self.operation is None:
            raise ValueError(f"Instance {self.index} holds no operation")
        return self.operation

    def but(self, **changes: Unpack[RowChanges]) -> Row:
        """This row with ``changes`` (fields by name, checked against ``RowChanges``)."""
        return replace(self, **changes)

    def step_to(self, step: Step, **changes: Unpack[OperationChanges]) -> Row:
        """This row with its operation at ``step`` and ``changes`` to the operation: the
        one way an operation moves, and only as the step table allows (``OffTable``
        otherwise; a ``mode`` among the changes moves it to that mode's sequence)."""
        operation = self.op
        check_move(operation.type, operation.mode, operation.step,
                   changes.get("mode", operation.mode), step)
        return replace(self, operation=replace(operation, step=step, **changes))

    def with_op(self, **changes: Unpack[OperationChanges]) -> Row:
        """This row with ``changes`` to its operation, which stays at its step (a move
        is ``step_to``'s)."""
        if _MOVES.intersection(changes):
            raise TypeError(f"with_op does not move an operation: {sorted(changes)}")
        return replace(self, operation=replace(self.op, **changes))

    @classmethod
    def from_storage(cls, stored: Json) -> Row:
        """A row ``replica.read_rows`` found readable."""
        values = _present(stored, _ROW_KEYS)
        values["phase"] = Phase(stored["phase"])
        operation = values.pop("operation", None)
        if operation:
            values["operation"] = Operation.from_storage(operation)
        for name in ("pods", "avoid_nodes"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    def for_storage(self) -> Json:
        stored: Json = {"index": self.index, "incarnation": self.incarnation,
                        "phase": self.phase.value, "revision": self.revision,
                        "pods": list(self.pods),
                        "operation": None if self.operation is None
                        else self.operation.for_storage(),
                        "lastFailure": self.last_failure}
        for name, key in _ROW_KEYS.items():
            if key in stored:
                continue
            value = getattr(self, name)
            if value is None or value is False:
                continue
            stored[key] = list(value) if isinstance(value, tuple) else value
        return stored


# What only ``Row.step_to`` changes on an operation that goes on.
_MOVES = frozenset(("type", "mode", "step"))


class OperationChanges(TypedDict, total=False):
    """The fields of an ``Operation`` a step may change (``Row.step_to``, ``Row.with_op``):
    a misspelt or mistyped one is a type error. tests/model/test_instance_state.py holds them
    to ``Operation``'s fields."""

    type: OperationType
    strategy: str | None
    started_at: str | None
    deadline: str | None
    waiting: str | None
    mode: Mode | None
    target_revision: str | None
    ordinal: int | None
    replacement: int | None
    handed_over: bool
    served: bool
    fresh: bool
    retry: bool
    abandon_grace: int | None
    overdue: bool
    refused: Json | None
    stuck: Mapping[str, str] | None
    held_at: str | None
    hold_ended: str | None
    leaving: str | None
    leaving_why: str | None


class RowChanges(TypedDict, total=False):
    """The fields of a ``Row`` a step may change (``Row.but``), checked as
    ``OperationChanges`` are."""

    incarnation: int
    phase: Phase
    revision: str
    operation: Operation | None
    last_failure: Json | None
    pods: tuple[Json, ...]
    ordinal: int | None
    surge_of: int | None
    rebuild: bool
    refused: str | None
    attempts: int | None
    retry_at: str | None
    avoid_nodes: tuple[str, ...] | None
    avoid_for: str | None


# Each field's name in the stored status.
_OPERATION_KEYS = {
    "type": "type", "step": "step", "strategy": "strategy", "started_at": "startedAt",
    "deadline": "deadline", "waiting": "waiting", "mode": "mode",
    "target_revision": "targetRevision", "ordinal": "ordinal", "replacement": "replacement",
    "handed_over": "handedOver", "served": "served", "fresh": "fresh", "retry": "retry",
    "abandon_grace": "abandonGrace", "overdue": "overdue", "refused": "refused",
    "stuck": "stuck", "held_at": "heldAt", "hold_ended": "holdEnded",
    "leaving": "leavingNode", "leaving_why": "leavingWhy",
}
_ROW_KEYS = {
    "index": "index", "incarnation": "incarnation", "phase": "phase", "revision": "revision",
    "operation": "operation", "last_failure": "lastFailure", "pods": "pods",
    "ordinal": "ordinal", "surge_of": "surgeOf", "rebuild": "rebuild", "refused": "refused",
    "attempts": "attempts", "retry_at": "retryAt", "avoid_nodes": "avoidNodes",
    "avoid_for": "avoidFor",
}


def _present(stored: Json, keys: dict[str, str]) -> dict[str, Any]:
    """The stored fields that are set, by their names here."""
    return {name: stored[key] for name, key in keys.items() if stored.get(key) is not None}
