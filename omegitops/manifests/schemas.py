"""The JSON Schemas of every input, compiled once per process."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

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
def validator(kind: str) -> Draft202012Validator:
    """A compiled validator for ``kind``; the schema file is read on first use only."""
    path = SCHEMA_DIR / SCHEMA_FILES[kind]
    schema = json.loads(path.read_text(encoding="utf-8"))
    return Draft202012Validator(schema)
