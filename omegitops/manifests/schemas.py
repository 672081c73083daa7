"""The JSON Schemas of every input, compiled once per process."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"

SCHEMA_FILES = {
    "InferenceService": "inferenceservice.schema.json",
    "ServingRuntime": "servingruntime.schema.json",
    "ClusterServingRuntime": "clusterservingruntime.schema.json",
    "InferenceReplica": "inferencereplica.schema.json",
    "OperatorValues": "operator-values.schema.json",
    "StatusReport": "status-report.schema.json",
}


@cache
def _schema(kind: str) -> dict:
    return json.loads((SCHEMA_DIR / SCHEMA_FILES[kind]).read_text(encoding="utf-8"))


@cache
def validator(kind: str) -> Draft202012Validator:
    """A compiled validator for ``kind``; the schema file is read on first use only.
    jsonschema itself is imported then too: a run whose inputs are all valid never
    needs it (``is_valid`` answers), and its import is a sixth of the command's start."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_schema(kind))


@cache
def is_valid(kind: str) -> Callable[[Any], bool]:
    """A fast yes/no check for ``kind``.

    jsonschema-rs checks a manifest against the same schema some sixty times faster
    than jsonschema; almost every manifest is valid, so only the invalid ones pay
    for jsonschema, whose errors carry the paths and messages users read. Without
    the compiled library (a platform with no wheel), jsonschema answers alone.
    """
    try:
        import jsonschema_rs
    except ImportError:  # pragma: no cover - a wheel exists for every CI platform
        return validator(kind).is_valid
    fast = jsonschema_rs.validator_for(_schema(kind)).is_valid

    def check(instance: Any) -> bool:
        try:
            return fast(instance)
        except ValueError:  # data JSON cannot hold (a non-string key): jsonschema decides
            return validator(kind).is_valid(instance)

    return check
