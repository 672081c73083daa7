"""An Instance's row and operation as typed values: read from the stored status and
written back without loss, in plain JSON types, and refused when a name is unknown."""

from __future__ import annotations

import dataclasses
import marshal

import pytest

from omegitops.model.replica import decode_rows, encode_rows, read_rows
from omegitops.model.state import Mode, Operation, OperationType, Phase, Row, Step

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
    ({"operation": {"type": "Migrate", "step": "CreatePods"}},
     "operation.type: 'Migrate' is not an operation type omegitops knows"),
    ({"operation": {"type": "Create", "step": "Teleport"}},
     "operation.step: 'Teleport' is not an operation step omegitops knows"),
    ({"operation": {"type": "Update", "step": "Unroute", "mode": "Sideways"}},
     "operation.mode: 'Sideways' is not an operation mode omegitops knows"),
])
def test_an_unknown_name_makes_a_row_unreadable(change, problem):
    stored = {**Row(0, 1, Phase.READY, "svc-engine-a").for_storage(), **change}
    rows, problems = read_rows([stored])
    assert rows == [] and problems == [f"status.instances[0].{problem}"]
