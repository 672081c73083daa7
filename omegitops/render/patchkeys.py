"""How each list of a pod spec merges: core/v1's strategic-merge-patch metadata.

OME renders a component's pods by a strategic merge patch of the
InferenceService's component over the runtime's config: lists whose Go field
carries ``patchStrategy:"merge"`` merge item by item on their
``patchMergeKey`` (``volumeMounts`` by ``mountPath``, ``ports`` by
``containerPort``, ``env`` and ``imagePullSecrets`` by ``name``); every other
list is replaced whole (``tolerations``, ``args``).

The table is not written by hand. ``podspec-patch.json`` is derived by
``table_from_openapi`` from the OpenAPI document the Kubernetes API server
publishes (``/openapi/v2``, whose definitions carry the same metadata as
``x-kubernetes-patch-strategy`` and ``x-kubernetes-patch-merge-key``); a
control-plane test derives it again from the real API server and fails when
the two differ.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

POD_SPEC = "io.k8s.api.core.v1.PodSpec"
CONTAINER = "io.k8s.api.core.v1.Container"
TABLE_FILE = "podspec-patch.json"
_REF = "#/definitions/"


@cache
def table() -> dict[str, dict[str, dict[str, Any]]]:
    """``{definition: {field: {"ref"?, "list"?, "strategy"?, "key"?}}}`` for every
    type a pod spec reaches; only fields that are objects or lists are listed."""
    text = resources.files("omegitops.render").joinpath(TABLE_FILE).read_text()
    # The file is ``table_from_openapi``'s output, so its definitions have the table's shape.
    definitions: dict[str, dict[str, dict[str, Any]]] = json.loads(text)["definitions"]
    return definitions


def field_of(definition: str | None, name: str) -> dict[str, Any] | None:
    """What the table says of field ``name`` of ``definition`` (None: a plain value, a
    map, or a type the table does not reach)."""
    if definition is None:
        return None
    return table().get(definition, {}).get(name)


def merge_key(definition: str | None, name: str) -> str | None:
    """The key a list field merges on, or None when the list is replaced whole."""
    entry = field_of(definition, name)
    if not entry or not entry.get("list"):
        return None
    if "merge" not in (entry.get("strategy") or "").split(","):
        return None
    return entry.get("key")


def table_from_openapi(openapi: dict[str, Any], root: str = POD_SPEC) -> dict[str, Any]:
    """The table of every definition reachable from ``root`` in an OpenAPI v2 document."""
    definitions = openapi.get("definitions") or {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    pending = [root]
    while pending:
        name = pending.pop()
        if name in out or name not in definitions:
            continue
        fields: dict[str, dict[str, Any]] = {}
        for field, schema in sorted((definitions[name].get("properties") or {}).items()):
            entry = _entry(schema)
            if entry is None:
                continue
            fields[field] = entry
            if "ref" in entry:
                pending.append(entry["ref"])
        out[name] = fields
    return {"source": "Kubernetes API server /openapi/v2", "root": root,
            "definitions": dict(sorted(out.items()))}


def _entry(schema: dict[str, Any]) -> dict[str, Any] | None:
    ref = _ref_of(schema)
    if schema.get("type") == "array":
        entry: dict[str, Any] = {"list": True}
        item_ref = _ref_of(schema.get("items") or {})
        if item_ref:
            entry["ref"] = item_ref
        if schema.get("x-kubernetes-patch-strategy"):
            entry["strategy"] = schema["x-kubernetes-patch-strategy"]
        if schema.get("x-kubernetes-patch-merge-key"):
            entry["key"] = schema["x-kubernetes-patch-merge-key"]
        return entry
    if ref:
        return {"ref": ref}
    return None


def _ref_of(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    if not ref:
        # OpenAPI v2 wraps a described reference in allOf.
        for part in schema.get("allOf") or []:
            ref = part.get("$ref") or ref
    return ref[len(_REF):] if isinstance(ref, str) and ref.startswith(_REF) else None
