"""The InferenceReplica: one per OMENative component, named ``{isvc}-{component}``.

Its status holds a row per Instance (an OMENativeInstanceStatus). Rows are
stored in the compact ColumnarV2 encoding when that is smaller than the
plain list; every reader goes through ``decode_rows`` and accepts both.
"""

from __future__ import annotations

import json
from typing import Any

from omegitops.lifecycle.copying import json_copy

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
    if _size(columnar) < _size(rows):
        return columnar
    return rows


def decode_rows(stored: Any) -> list[dict[str, Any]]:
    """Rows from either encoding (or nothing), as fresh copies the caller may change."""
    if not stored:
        return []
    stored = json_copy(stored)  # marshal, not copy.deepcopy: see lifecycle/copying.py
    if isinstance(stored, list):
        return stored
    if isinstance(stored, dict) and stored.get("encoding") == COLUMNAR:
        columns = stored.get("columns") or []
        return [
            {column: value for column, value in zip(columns, values, strict=False)
             if value is not None or column in ("operation", "lastFailure")}
            for values in stored.get("rows") or []
        ]
    raise ValueError(f"unknown Instance status encoding {stored.get('encoding')!r}")


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))
