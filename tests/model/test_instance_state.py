"""An Instance's row and operation as typed values: read from the stored status and
written back without loss, in plain JSON types, and refused when a name is unknown or
off the step table; an operation moves only as the table allows."""

from __future__ import annotations

import dataclasses
import marshal

import pytest

from omegitops.model.replica import decode_rows, encode_rows, read_rows
from omegitops.model.state import Mode, Operation, OperationType, Phase, Row, Step
from omegitops.model.steps import SEQUENCES, OffTable

SURGING = Row(
    3, 2, Phase.UPDATING, "svc-engine-a",
    operation=Operation(OperationType.UPDATE, Step.SURGE_WAIT_READY, "SurgeThenDrain",
                        "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z", "pod p is pending",
                        Mode.SURGE, "svc-engine-b", ordinal=1, replacement=None,
                        handed_over=True, served=True, abandon_grace=0,
                        refused={"pod": "p", "message": "quota", "time": "t"},
                        stuck={"p": "2026-01-01T00:01:00Z"}, hold_ended="t2"),
    last_failure={"pod": "p", "reason": "OOMKilled", "message": "m"},
    pods=({"name": "p", "ready": True},), ordinal=0, surge_of=5, rebuild=True,
    refused="svc-engine-c", attempts=2, retry_at="2026-01-01T00:05:00Z",
    avoid_nodes=("node-1",))


@pytest.mark.parametrize("row", [SURGING, Row(0, 1, Phase.READY, "svc-engine-a")])
def test_a_row_survives_storage_in_plain_json_types(row):
    stored = row.for_storage()
    marshal.dumps(stored)  # every copy of a status goes through marshal: no enum member
    assert Row.from_storage(stored) == row
    assert [Row.from_storage(r) for r in decode_rows(encode_rows([stored]))] == [row]


def test_rows_and_operations_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SURGING.phase = Phase.READY  # type: ignore[misc]
    moved = SURGING.step_to(Step.SURGE_WAIT_AVAILABLE)
    assert SURGING.op.step == Step.SURGE_WAIT_READY  # the given row never changes
    assert moved.op.step == Step.SURGE_WAIT_AVAILABLE and moved.op.served


@pytest.mark.parametrize(("change", "problem"), [
    ({"phase": "Sleeping"}, "phase: 'Sleeping' is not a phase name"),
    ({"operation": {"type": "Teleport", "step": "CreatePods"}},
     "operation.type: 'Teleport' is not an operation type omegitops knows"),
    ({"operation": {"type": "Create", "step": "Teleport"}},
     "operation.step: 'Teleport' is not an operation step omegitops knows"),
    ({"operation": {"type": "Update", "step": "Unroute", "mode": "Sideways"}},
     "operation.mode: 'Sideways' is not an operation mode omegitops knows"),
])
def test_an_unknown_name_makes_a_row_unreadable(change, problem):
    stored = {**Row(0, 1, Phase.READY, "svc-engine-a").for_storage(), **change}
    rows, problems = read_rows([stored])
    assert rows == [] and problems == [f"status.instances[0].{problem}"]


@pytest.mark.parametrize(("operation", "problem"), [
    ({"type": "Create", "step": "HandOver"},
     "operation.step: 'HandOver' is not a step of operation Create"),
    ({"type": "Update", "step": "CreatePods", "mode": "Surge"},
     "operation.step: 'CreatePods' is not a step of operation Update in mode Surge"),
    ({"type": "Update", "step": "DeletePods", "mode": "InPlace"},
     "operation.step: 'DeletePods' is not a step of operation Update in mode InPlace"),
    ({"type": "Restart", "step": "Abandon", "mode": "Instance"},
     "operation.step: 'Abandon' is not a step of operation Restart in mode Instance"),
    ({"type": "Create", "step": "CreatePods", "mode": "Surge"},
     "operation.mode: 'Surge' is not a mode of operation Create"),
    ({"type": "Restart", "step": "Unroute"},
     "operation.mode: None is not a mode of operation Restart"),
])
def test_a_step_off_the_table_makes_a_row_unreadable(operation, problem):
    """Known names that no operation combines: an Instance holding them would never
    move again, so the row is refused and rebuilt from the pods."""
    stored = {**Row(0, 1, Phase.CREATING, "svc-engine-a").for_storage(),
              "operation": operation}
    rows, problems = read_rows([stored])
    assert rows == [] and problems == [f"status.instances[0].{problem}"]
    with pytest.raises(ValueError, match="stands at"):
        Row.from_storage(stored)


def test_every_step_on_the_table_is_read():
    for (kind, mode), found in SEQUENCES.items():
        for step in found.steps:
            operation = Operation(kind, step, mode=mode)
            stored = Row(0, 1, Phase.UPDATING, "r", operation=operation).for_storage()
            rows, problems = read_rows([stored])
            assert problems == [] and Row.from_storage(rows[0]).op == operation


MOVES = [
    # (type, mode, from, new mode, to)
    (OperationType.CREATE, None, Step.CREATE_PODS, None, Step.WAIT_READY),
    (OperationType.CREATE, None, Step.WAIT_AVAILABLE, None, Step.CREATE_PODS),
    (OperationType.DELETE, None, Step.UNROUTE, None, Step.DELETE_PODS),
    (OperationType.RESTART, Mode.POD, Step.UNROUTE, None, Step.CREATE_PODS),
    (OperationType.RESTART, Mode.POD, Step.UNROUTE, None, Step.WAIT_GONE),
    (OperationType.RESTART, Mode.INSTANCE, Step.WAIT_GONE, None, Step.CREATE_PODS),
    (OperationType.UPDATE, Mode.IN_PLACE, Step.PATCH_IMAGES, Mode.DRAIN, Step.UNROUTE),
    (OperationType.UPDATE, Mode.SURGE, Step.SURGE_WAIT_READY, None, Step.ABANDON),
    (OperationType.UPDATE, Mode.SURGE, Step.HAND_OVER, None, Step.SURGE_WAIT_AVAILABLE),
    (OperationType.UPDATE, Mode.SURGE, Step.WAIT_DRAINED, None, Step.WAIT_DRAINED),
]
OFF_TABLE = [
    (OperationType.CREATE, None, Step.CREATE_PODS, None, Step.WAIT_AVAILABLE),
    (OperationType.CREATE, None, Step.WAIT_READY, None, Step.HAND_OVER),
    (OperationType.DELETE, None, Step.WAIT_GONE, None, Step.UNROUTE),
    (OperationType.RESTART, Mode.INSTANCE, Step.UNROUTE, None, Step.CREATE_PODS),
    (OperationType.UPDATE, Mode.DRAIN, Step.WAIT_READY, Mode.IN_PLACE, Step.WAIT_READY),
    (OperationType.UPDATE, Mode.IN_PLACE, Step.WAIT_READY, Mode.DRAIN, Step.UNROUTE),
    (OperationType.UPDATE, Mode.SURGE, Step.WAIT_DRAINED, None, Step.ABANDON),
    (OperationType.UPDATE, Mode.SURGE, Step.ABANDON, None, Step.SURGE_CREATE),
]


@pytest.mark.parametrize(("kind", "mode", "source", "new_mode", "target"), MOVES)
def test_a_move_on_the_table_is_taken(kind, mode, source, new_mode, target):
    row = Row(0, 1, Phase.UPDATING, "r", operation=Operation(kind, source, mode=mode))
    changes = {} if new_mode is None else {"mode": new_mode}
    moved = row.step_to(target, **changes)
    assert moved.op.step == target and moved.op.mode == (new_mode or mode)


@pytest.mark.parametrize(("kind", "mode", "source", "new_mode", "target"), OFF_TABLE)
def test_a_move_off_the_table_is_a_programming_error(kind, mode, source, new_mode, target):
    row = Row(0, 1, Phase.UPDATING, "r", operation=Operation(kind, source, mode=mode))
    changes = {} if new_mode is None else {"mode": new_mode}
    with pytest.raises(OffTable):
        row.step_to(target, **changes)


def test_only_step_to_moves_an_operation():
    row = Row(0, 1, Phase.CREATING, "r", operation=Operation(OperationType.CREATE,
                                                              Step.CREATE_PODS))
    for change in ({"step": Step.WAIT_READY}, {"mode": Mode.SURGE},
                   {"type": OperationType.DELETE}):
        with pytest.raises(TypeError):
            row.with_op(**change)

def test_the_checked_changes_name_every_field_a_step_may_change():
    """``Row.but``, ``step_to`` and ``with_op`` take only the fields these TypedDicts
    name (mypy holds the callers to them): every field but the identity, with its type."""
    from dataclasses import fields
    from typing import get_type_hints

    from omegitops.model import state

    for cls, changes, fixed in ((state.Row, state.RowChanges, {"index"}),
                                (state.Operation, state.OperationChanges, {"step"})):
        hints = get_type_hints(cls)
        assert {f.name for f in fields(cls)} - fixed == set(changes.__annotations__)
        assert {name: hints[name] for name in changes.__annotations__} == \
            get_type_hints(changes)
