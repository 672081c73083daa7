"""The InferenceReplica: one per OMENative component, named ``{isvc}-{component}``.

Its status holds a row per Instance (an OMENativeInstanceStatus). Rows are
stored in the compact ColumnarV2 encoding when that is smaller than the
plain list; every reader goes through ``decode_rows`` and accepts both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from omegitops.model.state import Json, Mode, OperationType, Phase, Row, Step
from omegitops.model.steps import on_table, sequence
from omegitops.util.copying import json_copy

API_VERSION = "ome.io/v1beta1"
KIND = "InferenceReplica"
COLUMNAR = "ColumnarV2"


def replica_name(isvc_name: str, component: str) -> str:
    return f"{isvc_name}-{component}"


def encode_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | dict[str, Any]:
    """The smaller of the plain list and the ColumnarV2 form.

    ColumnarV2 names each field once: ``{"encoding": "ColumnarV2", "columns":
    [...], "rows": [[...], ...]}``; a row lacking a field holds null there.
    """
    if not rows:
        return []
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    columnar = {
        "encoding": COLUMNAR,
        "columns": columns,
        "rows": [[row.get(column) for column in columns] for row in rows],
    }
    if _columnar_saves(rows, columns) > 0:
        return columnar
    return rows


@functools.lru_cache(maxsize=1024)
def _written_length(name: str) -> int:
    """A column name's length as JSON writes it, quotes and escapes included (the same
    dozen names, over and over)."""
    return len(json.dumps(name))


# The ColumnarV2 form's own characters, around its columns and rows.
_COLUMNAR_FRAME = len(f'{{"encoding":"{COLUMNAR}","columns":,"rows":}}')


def _columnar_saves(rows: list[dict[str, Any]], columns: list[str]) -> int:
    """How many characters of compact JSON the ColumnarV2 form saves over the plain list
    (negative: it costs them), counted without writing either. The values are written
    the same in both; what differs is each present key's name, colon and comma in the
    plain form, against the columns written once, a comma per column and ``null`` for
    each absent field in the columnar one."""
    names = {column: _written_length(column) for column in columns}
    plain = sum(names[key] + 2 for row in rows for key in row) - sum(1 for row in rows if row)
    absent = sum(len(columns) - len(row) for row in rows)
    columnar = _COLUMNAR_FRAME + sum(names.values()) + 2 + max(len(columns) - 1, 0) \
        + len(rows) * max(len(columns) - 1, 0) + absent * len("null")
    return plain - columnar


def decode_rows(stored: Any, copy: bool = True) -> list[dict[str, Any]]:
    """Rows from either encoding (or nothing), as fresh copies the caller may change
    (``copy=False``: rows that share their values with ``stored``, for a reader only).

    Rows that cannot be read are left out (``read_rows`` says which and why): the
    planner then treats their pods as it treats pods with no row at all, rebuilding
    the rows from them, as it does after the InferenceReplica is deleted.
    """
    return read_rows(stored, copy)[0]


def stored_rows(replica: Json | None) -> tuple[Row, ...]:
    """The readable rows an InferenceReplica stores, as typed values, by index."""
    status = (replica or {}).get("status") or {}
    rows = (Row.from_storage(row) for row in decode_rows(status.get("instances")))
    return tuple(sorted(rows, key=lambda row: row.index))


def read_rows(stored: Any, copy: bool = True) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rows that can be read, what is wrong with the others, each naming its field
    under ``status.instances``). A status edited by hand, or written by another tool, is
    never trusted to have the shape omegitops writes."""
    if not stored:
        return [], []
    if copy:
        stored = json_copy(stored)  # marshal, not copy.deepcopy: see omegitops/util/copying.py
    if isinstance(stored, list):
        candidates = list(enumerate(stored))
    elif isinstance(stored, dict) and stored.get("encoding") == COLUMNAR:
        columns = stored.get("columns")
        values = stored.get("rows")
        if not isinstance(columns, list) or not isinstance(values, list):
            return [], ["status.instances: a ColumnarV2 status needs lists 'columns' and 'rows'"]
        candidates = []
        problems = []
        for number, row in enumerate(values):
            if not isinstance(row, list) or len(row) != len(columns):
                problems.append(f"status.instances.rows[{number}]: not a list of "
                                f"{len(columns)} values, one per column")
                continue
            candidates.append((number, {
                column: value for column, value in zip(columns, row, strict=True)
                if isinstance(column, str)
                and (value is not None or column in ("operation", "lastFailure"))}))
        rows, more = _readable(candidates)
        return rows, problems + more
    elif isinstance(stored, dict):
        return [], [f"status.instances: unknown encoding {stored.get('encoding')!r}"]
    else:
        return [], [f"status.instances: {type(stored).__name__} is not a list of rows"]
    return _readable(candidates)


# The fields every row has, and what each must be.
_ROW_FIELDS = {
    "index": "a whole number >= 0",
    "incarnation": "a whole number >= 1",
    "phase": "a phase name",
    "revision": "a revision name",
}
# The names a row's phase and its operation's type, step and mode may take.
_NAMES: dict[str, frozenset[str]] = {
    name: frozenset(member.value for member in names)
    for name, names in (("phase", Phase), ("type", OperationType), ("step", Step),
                        ("mode", Mode))}


def _readable(candidates: list[tuple[int, Any]]) -> tuple[list[Json], list[str]]:
    rows, problems, seen = [], [], set()
    for number, row in candidates:
        problem = _row_problem(row)
        if problem is None and row["index"] in seen:
            problem = f"index: {row['index']} is the index of an earlier row"
        if problem is not None:
            problems.append(f"status.instances[{number}]{'.' if problem[0] != ':' else ''}"
                            f"{problem}")
            continue
        seen.add(row["index"])
        rows.append(row)
    return rows, problems


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return f": {type(row).__name__} is not a row"
    for name, wanted in _ROW_FIELDS.items():
        value = row.get(name)
        if name in ("index", "incarnation"):
            low = 0 if name == "index" else 1
            fine = isinstance(value, int) and not isinstance(value, bool) and value >= low
        else:
            fine = isinstance(value, str) and bool(value)
        if name == "phase":
            fine = fine and value in _NAMES["phase"]
        if not fine:
            shown = "missing" if name not in row else f"{value!r} is not {wanted}"
            return f"{name}: {shown}"
    for name in ("operation", "lastFailure"):
        if row.get(name) is not None and not isinstance(row[name], dict):
            return f"{name}: {row[name]!r} is not an object"
    for name in ("pods", "avoidNodes"):
        if row.get(name) is not None and not isinstance(row[name], list):
            return f"{name}: {row[name]!r} is not a list"
    operation = row.get("operation")
    if operation and not (isinstance(operation.get("type"), str)
                          and isinstance(operation.get("step"), str)):
        return "operation: needs a type and a step"
    for name in ("type", "step", "mode"):
        value = operation.get(name) if operation else None
        if not operation:
            break
        if (value is not None or name != "mode") and value not in _NAMES[name]:
            return f"operation.{name}: {value!r} is not an operation {name} omegitops knows"
    if operation:
        return _off_table(operation)
    return None


def _off_table(operation: Json) -> str | None:
    """What is wrong with a known type, mode and step that no operation combines (the
    step table, model/steps.py): an Instance holding it would never move again."""
    kind = OperationType(operation["type"])
    mode = None if operation.get("mode") is None else Mode(operation["mode"])
    step = Step(operation["step"])
    if sequence(kind, mode) is None:
        return f"operation.mode: {operation.get('mode')!r} is not a mode of operation {kind}"
    if not on_table(kind, mode, step):
        return (f"operation.step: {step.value!r} is not a step of operation {kind}"
                + (f" in mode {mode}" if mode else ""))
    return None


def readable_status(status: Any) -> tuple[dict[str, Any], list[str]]:
    """The InferenceReplica's status with every field omegitops reads in the shape it
    writes them, and what was wrong with those it had to leave out (each naming its
    field). The rows come through ``read_rows``; the bookkeeping (retries, the event
    outbox and its counter, the rollout hold, conditions) is dropped when unreadable,
    as a status deleted by hand would be."""
    if not isinstance(status, dict):
        return {}, ([] if status is None else
                    [f"status: {type(status).__name__} is not an object"])
    clean = dict(status)
    rows, problems = read_rows(status.get("instances"))
    clean["instances"] = rows
    checks: dict[str, Callable[[Any], bool]] = {
        "revisionRetries": lambda v: isinstance(v, dict) and all(
            isinstance(e, dict) and _whole(e.get("attempts", 0)) for e in v.values()),
        "eventOutbox": lambda v: isinstance(v, list) and all(
            isinstance(e, dict) and _whole(e.get("sequence") or 0) for e in v),
        "eventSequence": _whole,
        "rolloutHold": lambda v: isinstance(v, dict),
        "conditions": lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v),
    }
    for name, fine in checks.items():
        value = status.get(name)
        if value is not None and not fine(value):
            problems.append(f"status.{name}: {_shown(value)} is not what omegitops writes")
            clean.pop(name)
    return clean, problems


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
