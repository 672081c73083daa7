"""The step machine as data (omegitops/model/steps.py): the docs show its table as the
code has it, every (type, mode) on it has a handler, and each handler's table of steps
covers the steps its operation goes along."""

from __future__ import annotations

from pathlib import Path

from omegitops.lifecycle import bringup, migration, operations, steps, updates
from omegitops.model.state import Mode, OperationType, Step
from omegitops.model.steps import SEQUENCES, markdown_table, rst_table

ROOT = Path(__file__).resolve().parents[2]


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start):text.index(end)]


def test_the_design_docs_table_is_the_codes():
    text = (ROOT / "docs/contributing/design.md").read_text(encoding="utf-8")
    shown = _between(text, "<!-- step table: rendered from omegitops/model/steps.py -->\n",
                     "<!-- end of the step table -->")
    assert shown == markdown_table(), "render it again: markdown_table()"


def test_the_step_machines_docstring_table_is_the_codes():
    assert steps.__doc__ is not None and rst_table() in steps.__doc__, \
        "render it again: rst_table()"


def test_every_operation_on_the_table_has_a_handler():
    assert set(steps.HANDLERS) == set(SEQUENCES)


def test_each_step_has_its_function():
    """One function a step: the tables of the handlers cover every step of the line."""
    bring_up = {Step.CREATE_PODS, Step.WAIT_READY, Step.WAIT_AVAILABLE}  # bring_up()
    covered = {
        (OperationType.CREATE, None): set(operations.CREATE_STEPS),
        (OperationType.DELETE, None): set(operations.DELETE_STEPS),
        (OperationType.RESTART, Mode.INSTANCE): set(bringup.TEARDOWN_STEPS) | bring_up,
        (OperationType.RESTART, Mode.POD): {Step.UNROUTE, Step.WAIT_GONE} | bring_up,
        (OperationType.UPDATE, Mode.DRAIN): set(bringup.TEARDOWN_STEPS) | bring_up,
        (OperationType.UPDATE, Mode.IN_PLACE): set(updates.IN_PLACE_STEPS),
        (OperationType.UPDATE, Mode.SURGE): set(updates.SINGLE_SURGE_STEPS)
        & ({Step.SURGE_CREATE} | set(updates.GANG_SURGE_STEPS)),
        # SurgeCreate is step_migrate's own, before the table.
        (OperationType.MIGRATE, Mode.SURGE): {Step.SURGE_CREATE} | set(migration.MIGRATE_STEPS),
    }
    for key, found in SEQUENCES.items():
        assert set(found.line) <= covered[key], key


def test_an_update_starts_at_its_lines_first_step():
    for mode, step in updates.FIRST_STEP.items():
        assert SEQUENCES[OperationType.UPDATE, mode].line[0] == step
