"""What the API server does with a CRD's structural schema: prune unknown fields, validate.

``prune`` drops every field the schema does not declare, unless
``x-kubernetes-preserve-unknown-fields`` keeps it (the API server does this
silently, so a field missing from the CRD would be lost on a real cluster).
``validate`` checks types, enums, patterns, bounds and required fields,
treating ``nullable`` and ``x-kubernetes-int-or-string`` as the server does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# The keywords both OpenAPI v3 (as CRDs use it) and JSON Schema read alike.
SHARED = ("enum", "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems",
          "maxItems", "required", "minProperties", "maxProperties")
ROOT_FIELDS = ("apiVersion", "kind", "metadata")


def load_crd_schemas(folder: Path) -> dict[str, dict]:
    """``plural -> openAPIV3Schema`` of the served version of every CRD in ``folder``."""
    schemas = {}
    for path in sorted(folder.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        schemas[crd["spec"]["names"]["plural"]] = version["schema"]["openAPIV3Schema"]
    return schemas


def prune(obj: dict, schema: dict) -> dict:
    """``obj`` without the fields ``schema`` does not declare (root metadata is kept)."""
    pruned = _prune(obj, schema)
    for field in ROOT_FIELDS:
        if field in obj:
            pruned[field] = obj[field]
    return pruned


def _prune(value: Any, node: dict) -> Any:
    if isinstance(value, dict):
        properties = node.get("properties")
        if properties is not None:
            keep_unknown = node.get("x-kubernetes-preserve-unknown-fields", False)
            return {key: _prune(item, properties[key]) if key in properties else item
                    for key, item in value.items() if key in properties or keep_unknown}
        if isinstance(node.get("additionalProperties"), dict):
            return {key: _prune(item, node["additionalProperties"])
                    for key, item in value.items()}
        return value if node.get("x-kubernetes-preserve-unknown-fields") else {}
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_prune(item, node["items"]) for item in value]
    return value


def validator(schema: dict) -> jsonschema.Draft7Validator:
    """The validator of a structural schema, to keep and pass to ``validate``."""
    return jsonschema.Draft7Validator(to_json_schema(schema))


def validate(obj: dict, schema: dict,
             checker: jsonschema.Draft7Validator | None = None) -> list[str]:
    """Messages like the API server's (``spec.replicas: ...``); empty when valid."""
    validator = checker if checker is not None else jsonschema.Draft7Validator(
        to_json_schema(schema))
    return [f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
            for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.path))]


def to_json_schema(node: dict) -> dict:
    """The JSON Schema that means what the structural schema ``node`` means."""
    out: dict[str, Any] = {key: node[key] for key in SHARED if key in node}
    if "pattern" in out:
        # RE2 spells a code point \x{00b5}; Python's re wants \u00b5.
        out["pattern"] = re.sub(r"\\x\{([0-9a-fA-F]{4})\}", r"\\u\1", out["pattern"])
    nullable = node.get("nullable", False)
    types = ["integer", "string"] if node.get("x-kubernetes-int-or-string") else node.get("type")
    if types:
        types = types if isinstance(types, list) else [types]
        out["type"] = types + (["null"] if nullable else [])
    if nullable and "enum" in out:
        out["enum"] = [*out["enum"], None]
    if "properties" in node:
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        out["items"] = to_json_schema(node["items"])
    return out
