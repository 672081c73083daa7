#!/usr/bin/env python3
"""Generate the JSON Schemas (draft 2020-12) that omegitops validates its inputs with.

Three schemas are derived from the real OME CRDs (the ``openAPIV3Schema`` of the
served version), converted from OpenAPI v3 to JSON Schema, tightened the way
``kubectl --validate=strict`` would, extended with the OMENative fields that the
released CRDs do not have yet, and deduplicated into ``$defs``:

- ``inferenceservice.schema.json``
- ``servingruntime.schema.json``
- ``clusterservingruntime.schema.json``

Two more are written by hand below, because no CRD describes them:

- ``operator-values.schema.json``: the Helm values file read under ``ome.controller``
- ``inferencereplica.schema.json``: the InferenceReplica that omegitops writes

Usage::

    python schemas/generate.py [--crds ../shared/ome/crds] [--out omegitops/schemas] [--check]

The output is deterministic (sorted keys, stable ``$defs`` names), so running the
script twice gives byte-identical files and ``--check`` can guard them in CI.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://omegitops.ome.io/schemas/"
SERVED_VERSION = "v1beta1"
API_VERSION = "ome.io/v1beta1"

REPO_ROOT = Path(__file__).resolve().parent.parent
# The schemas are package data (the wheel and the image carry them); schemas/ links to
# each of them for readers of the repository.
SCHEMAS_DIR = REPO_ROOT / "omegitops" / "schemas"
# The OME material sits beside the repository: /work/shared/ome for /work/main.
DEFAULT_CRDS = REPO_ROOT.parent / "shared" / "ome" / "crds"

# (output file, CRD file, kind)
CRD_TARGETS = [
    ("inferenceservice.schema.json", "ome.io_inferenceservices.yaml", "InferenceService"),
    ("servingruntime.schema.json", "ome.io_servingruntimes.yaml", "ServingRuntime"),
    (
        "clusterservingruntime.schema.json",
        "ome.io_clusterservingruntimes.yaml",
        "ClusterServingRuntime",
    ),
]

# A subschema is moved to $defs when it occurs at least twice and its canonical JSON
# is at least this long. Small ones ({"type": "string"}) cost more as a $ref.
DEDUP_MIN_CHARS = 300

# ---------------------------------------------------------------------------
# Shared building blocks
# ---------------------------------------------------------------------------

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

# Go's time.ParseDuration accepts both micro signs (U+00B5 and U+03BC) and a bare "0".
# The signs are the characters themselves, never a regex escape: RE2 (kubeconform, any
# Go validator) has no \u escape and refuses the whole schema over one.
_DURATION_BODY = r"(0|([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+)"
# In manifests a negative duration is a schema error, like a negative minReadySeconds.
DURATION_PATTERN = "^" + _DURATION_BODY + "$"
# In operator values the sign is allowed: range errors come from Python, with the
# documents' own message, so the schema only checks the shape.
SIGNED_DURATION_PATTERN = "^[-+]?" + _DURATION_BODY + "$"

# The deployment modes OME knows (pkg/constants in the OME sources: Serverless and
# MultiNodeRayVLLM in older releases, VirtualDeployment and OMENative in newer ones),
# so that an existing manifest or annotation value keeps validating.
DEPLOYMENT_MODES = [
    "RawDeployment",
    "Serverless",
    "MultiNode",
    "MultiNodeRayVLLM",
    "PDDisaggregated",
    "VirtualDeployment",
    "OMENative",
]
STRATEGY_TYPES = ["SurgeThenDrain", "RecreatePod", "InPlaceIfPossible", "InPlaceOnly"]
RESTART_POLICIES = ["None", "RecreateInstanceOnPodRestart"]
COMPONENTS = ["engine", "decoder", "router"]

# Kubernetes' int32 fields (minReadySeconds, partition, an IntOrString's number): a
# larger value is refused by the API server, and would overflow the planner's clock.
MAX_INT32 = 2**31 - 1

RFC3339_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)


def nullable(schema: Schema) -> Schema:
    """Allow null besides ``schema`` (for fields that are null while unset)."""
    return {"anyOf": [schema, {"type": "null"}]}


def closed(properties: Schema, required: list[str] | None = None) -> Schema:
    """An object with exactly these properties: a typo is an error."""
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def open_object(properties: Schema, required: list[str] | None = None) -> Schema:
    """An object whose listed properties are type-checked and which may carry more."""
    schema = closed(properties, required)
    schema["additionalProperties"] = True
    return schema


def lifecycle_defs() -> Schema:
    """The OMENative ``lifecycle`` of a component, shared by every schema that has one.

    Ranges are checked here (these are manifests, as kubectl would check them);
    percentages over 100% are left to Python, which knows the component.
    """
    budget = {"$ref": "#/$defs/IntOrPercent"}
    return {
        "Duration": {"type": "string", "pattern": DURATION_PATTERN},
        "IntOrPercent": {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_INT32},
                {"type": "string", "pattern": "^[0-9]+%$"},
            ]
        },
        "Lifecycle": closed(
            {
                "updateStrategy": {"$ref": "#/$defs/UpdateStrategy"},
                "minReadySeconds": {"type": "integer", "minimum": 0, "maximum": MAX_INT32},
                "restartPolicy": {"type": "string", "enum": RESTART_POLICIES},
                "instanceReadyTimeout": {"$ref": "#/$defs/Duration"},
                "migrationPolicy": closed({"mode": {"type": "string", "enum": ["Auto", "Never"]}}),
                # No update starts while it is true (update-strategies.txt "Pause and
                # resume a rollout").
                "paused": {"type": "boolean"},
            }
        ),
        "UpdateStrategy": closed(
            {
                "type": {"type": "string", "enum": STRATEGY_TYPES},
                "rollingUpdate": closed(
                    {
                        "partition": {"type": "integer", "minimum": 0, "maximum": MAX_INT32},
                        "maxSurge": budget,
                        "maxUnavailable": budget,
                    }
                ),
                "inPlaceUpdateStrategy": closed(
                    {"markNotReadyDuringLifecycle": {"type": "boolean"}}
                ),
            }
        ),
    }


# ---------------------------------------------------------------------------
# OpenAPI v3 (structural CRD schema) -> JSON Schema draft 2020-12
# ---------------------------------------------------------------------------

# Documentation only; dropping it takes the CRDs from 1.7 MB to a few hundred kB.
# The x-kubernetes-* keys are dropped too, once convert() has read what they mean.
DROPPED_KEYS = {"description"}
# int32/int64 say nothing JSON Schema can check; other formats (date-time) are kept.
DROPPED_FORMATS = {"int32", "int64"}
# Where a sub-schema sits inside a schema keyword, so the walker knows what to convert.
SCHEMA_MAP_KEYWORDS = ("properties", "$defs", "patternProperties")
SCHEMA_KEYWORDS = ("items", "additionalProperties", "not")
SCHEMA_LIST_KEYWORDS = ("anyOf", "oneOf", "allOf", "prefixItems")


def convert(node: Schema) -> Schema:
    """Convert one OpenAPI v3 schema node (and its children) to JSON Schema."""
    out: Schema = {}
    for key, value in node.items():
        if key in DROPPED_KEYS or key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "format" and value in DROPPED_FORMATS:
            continue
        if key in SCHEMA_MAP_KEYWORDS:
            out[key] = {name: convert(sub) for name, sub in value.items()}
        elif key in SCHEMA_KEYWORDS and isinstance(value, dict):
            out[key] = convert(value)
        elif key in SCHEMA_LIST_KEYWORDS:
            out[key] = [convert(sub) for sub in value]
        else:
            out[key] = copy.deepcopy(value)

    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        # controller-gen already writes the anyOf; older generators do not.
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if _should_close(node):
        # kubectl --validate=strict rejects fields the schema does not list.
        out["additionalProperties"] = False
    if node.get("nullable"):
        out = _allow_null(out)
    return out


def _should_close(node: Schema) -> bool:
    """True for an object that lists its properties and says nothing about others."""
    return (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    )


def _allow_null(schema: Schema) -> Schema:
    """OpenAPI ``nullable: true``: the value may also be null."""
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    # No single type to extend (an anyOf such as int-or-string): wrap it.
    return {"anyOf": [schema, {"type": "null"}]}


# ---------------------------------------------------------------------------
# What the CRDs lack: top-level identity, metadata, and the OMENative fields
# ---------------------------------------------------------------------------


def metadata_schema(kind: str) -> Schema:
    """ObjectMeta as a manifest in git may write it.

    The CRD says only ``type: object``. An InferenceService's name becomes a Service
    name and a label value, so it is a DNS-1123 label; runtimes are DNS-1123
    subdomains. The fields the API server fills in are allowed (an exported object
    still validates) but not type-checked beyond their JSON type.
    """
    if kind == "InferenceService":
        name = {"type": "string", "pattern": DNS1123_LABEL, "maxLength": 63}
    else:
        name = {"type": "string", "pattern": DNS1123_SUBDOMAIN, "maxLength": 253}
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return closed(
        {
            "name": name,
            "namespace": {"type": "string", "pattern": DNS1123_LABEL, "maxLength": 63},
            "labels": string_map,
            "annotations": string_map,
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "ownerReferences": {"type": "array", "items": {"type": "object"}},
            "generateName": {"type": "string"},
            "uid": {"type": "string"},
            "resourceVersion": {"type": "string"},
            "generation": {"type": "integer"},
            "creationTimestamp": {"type": ["string", "null"]},
            "deletionTimestamp": {"type": ["string", "null"]},
            "deletionGracePeriodSeconds": {"type": "integer"},
            "selfLink": {"type": "string"},
            "managedFields": {"type": "array"},
        },
        required=["name"],
    )


def add_identity(schema: Schema, kind: str) -> None:
    """Pin apiVersion and kind, require them, and describe metadata."""
    props = schema["properties"]
    props["apiVersion"] = {"type": "string", "const": API_VERSION}
    props["kind"] = {"type": "string", "const": kind}
    props["metadata"] = metadata_schema(kind)
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})


def _add_property(obj: Schema, name: str, sub: Schema, where: str) -> None:
    """Add ``name`` to an object schema, refusing to shadow a field the CRD already has."""
    props = obj.setdefault("properties", {})
    if name in props:
        raise SystemExit(f"generate.py: the CRD already has {where}.{name}; review the patch")
    props[name] = sub


def rollout_schema() -> Schema:
    """``spec.rollout``: how users steer the service's rollouts (update-strategies.txt
    "Pause and resume a rollout"; "a canary's current step replaces your partition").

    ``paused`` pauses every component; ``canary.steps`` move the named components (all
    OMENative ones by default) step by step: each step sets how many Instances run the
    new revision (a number or a percentage, rounded up like a budget), then waits for a
    ``pause.duration`` or, with ``pause: {}``, until promoted.
    """
    count = {
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": MAX_INT32},
            {"type": "string", "pattern": "^[0-9]+%$"},
        ]
    }
    step = closed(
        {
            "replicas": count,
            "pause": closed({"duration": {"type": "string", "pattern": DURATION_PATTERN}}),
        },
        required=["replicas"],
    )
    canary = closed(
        {
            "components": {
                "type": "array",
                "items": {"type": "string", "enum": COMPONENTS},
                "minItems": 1,
                "uniqueItems": True,
            },
            "steps": {"type": "array", "items": step, "minItems": 1},
        },
        required=["steps"],
    )
    # Rollout groups: components of the service that move as one (lifecycle/groups.py):
    # the group's own budgets count Instances across its members.
    group = closed(
        {
            "name": {"type": "string", "pattern": DNS1123_LABEL, "maxLength": 63},
            "components": {
                "type": "array",
                "items": {"type": "string", "enum": COMPONENTS},
                "minItems": 2,
                "uniqueItems": True,
            },
            # rolling: the members in step, wave by wave; blueGreen: every member's
            # new set beside the old, serving switched at once.
            "strategy": {"type": "string", "enum": ["rolling", "blueGreen"]},
            "maxSurge": count,
            "maxUnavailable": count,
        },
        required=["name", "components"],
    )
    groups = {"type": "array", "items": group, "minItems": 1}
    return closed({"paused": {"type": "boolean"}, "canary": canary, "groups": groups})


def add_omenative_isvc(schema: Schema) -> None:
    """spec.deploymentMode, spec.runtime.autoSync, spec.rollout and
    spec.{component}.lifecycle."""
    spec = schema["properties"]["spec"]
    _add_property(spec, "deploymentMode", {"type": "string", "enum": DEPLOYMENT_MODES}, "spec")
    _add_property(spec, "rollout", rollout_schema(), "spec")
    _add_property(spec["properties"]["runtime"], "autoSync", {"type": "boolean"}, "spec.runtime")
    for component in COMPONENTS:
        target = spec["properties"][component]
        _add_property(target, "lifecycle", {"$ref": "#/$defs/Lifecycle"}, f"spec.{component}")
    # OME v1.3 reports each component's Instance totals and rollout hold under
    # status.components.{component}.lifecycle; an exported object must still validate.
    component_status = schema["properties"]["status"]["properties"]["components"]
    _add_property(
        component_status["additionalProperties"],
        "lifecycle",
        {"type": "object"},
        "status.components.*",
    )


def add_omenative_runtime(schema: Schema) -> None:
    """spec.{engine,decoder,router}Config.lifecycle: a runtime's lifecycle defaults."""
    spec = schema["properties"]["spec"]
    for component in COMPONENTS:
        field = f"{component}Config"
        target = spec["properties"][field]
        _add_property(target, "lifecycle", {"$ref": "#/$defs/Lifecycle"}, f"spec.{field}")


# ---------------------------------------------------------------------------
# Deduplication into $defs
# ---------------------------------------------------------------------------

# Kubernetes type names for the big repeated subschemas, so $defs read like the API
# reference. Keyed by the property that holds the subschema...
PROPERTY_ALIASES = {
    "engine": "ComponentSpec",
    "decoder": "ComponentSpec",
    "engineConfig": "ComponentConfig",
    "decoderConfig": "ComponentConfig",
    "leader": "LeaderSpec",
    "worker": "WorkerSpec",
    "runner": "RunnerContainer",
    "livenessProbe": "Probe",
    "readinessProbe": "Probe",
    "startupProbe": "Probe",
    "resources": "ResourceRequirements",
    "lifecycle": "ContainerLifecycle",  # a container's postStart/preStop, not OMENative's
}
# ...or by the list property whose elements it describes.
ITEM_ALIASES = {
    "containers": "Container",
    "initContainers": "Container",
    "ephemeralContainers": "EphemeralContainer",
    "env": "EnvVar",
    "envFrom": "EnvFromSource",
    "volumes": "Volume",
    "volumeMounts": "VolumeMount",
    "ports": "ContainerPort",
    "tolerations": "Toleration",
    "topologySpreadConstraints": "TopologySpreadConstraint",
}
# A def whose body ends up this small (it only wraps a $ref) is put back inline.
INLINE_MAX_CHARS = 150


def canonical(schema: Any) -> str:
    """The identity of a subschema: its JSON with sorted keys and no spaces."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def child_schemas(schema: Schema, hint: str) -> list[tuple[str, Any, str, str]]:
    """(keyword, key or index, name hint, role) of each direct sub-schema, in sorted order.

    The hint is the nearest property name; the role says how the child relates to it
    ("" for the property itself, "items" for a list's elements, ...).
    """
    children: list[tuple[str, Any, str, str]] = []
    for keyword in sorted(schema):
        value = schema[keyword]
        if keyword in SCHEMA_MAP_KEYWORDS and keyword != "$defs":
            children.extend((keyword, name, name, "") for name in sorted(value))
        elif keyword in SCHEMA_KEYWORDS and isinstance(value, dict):
            role = "items" if keyword == "items" else "Value"
            children.append((keyword, None, hint, role))
        elif keyword in SCHEMA_LIST_KEYWORDS:
            children.extend((keyword, i, hint, f"Option{i}") for i in range(len(value)))
    return children


def count_subschemas(schema: Schema, counts: Counter[str]) -> None:
    """Count every sub-schema position by canonical form (nested ones included)."""
    for keyword, key, _, _ in child_schemas(schema, ""):
        sub = schema[keyword] if key is None else schema[keyword][key]
        counts[canonical(sub)] += 1
        count_subschemas(sub, counts)


def def_name(hint: str, role: str) -> str:
    """A CamelCase $defs name from the property that holds the subschema."""
    if role == "" and hint in PROPERTY_ALIASES:
        return PROPERTY_ALIASES[hint]
    if role == "items" and hint in ITEM_ALIASES:
        return ITEM_ALIASES[hint]
    base = (hint[:1].upper() + hint[1:]) or "Schema"
    if role == "items":
        # A list's element: "imagePullSecrets" -> "ImagePullSecret".
        return base[:-1] if base.endswith("s") and not base.endswith("ss") else base + "Item"
    return base + role


class Deduplicator:
    """Moves repeated large subschemas into ``$defs`` and replaces them by ``$ref``.

    Walks top-down in sorted key order, so the largest repeated unit is extracted
    first and every name is assigned in the same order on every run.
    """

    def __init__(self, root: Schema, reserved: set[str]) -> None:
        self.counts: Counter[str] = Counter()
        count_subschemas(root, self.counts)
        self.names_by_canon: dict[str, str] = {}
        self.defs: dict[str, Schema] = {}
        self.reserved = set(reserved)

    def is_candidate(self, canon: str) -> bool:
        return self.counts[canon] >= 2 and len(canon) >= DEDUP_MIN_CHARS

    def walk(self, schema: Schema, hint: str = "") -> Schema:
        """Return ``schema`` with its repeated sub-schemas replaced by references."""
        out = dict(schema)
        for keyword, key, child_hint, role in child_schemas(schema, hint):
            sub = schema[keyword] if key is None else schema[keyword][key]
            new = self.replace(sub, child_hint, role)
            if key is None:
                out[keyword] = new
            else:
                if out[keyword] is schema[keyword]:
                    out[keyword] = copy.copy(schema[keyword])
                out[keyword][key] = new
        return out

    def replace(self, sub: Schema, hint: str, role: str) -> Schema:
        canon = canonical(sub)
        if not self.is_candidate(canon) or "$ref" in sub or self.prefer_items(sub):
            return self.walk(sub, hint)
        name = self.names_by_canon.get(canon)
        if name is None:
            name = self.unique_name(def_name(hint, role))
            self.names_by_canon[canon] = name
            self.defs[name] = {}  # reserve the name before the children take theirs
            self.defs[name] = self.walk(sub, hint)
        return {"$ref": f"#/$defs/{name}"}

    def prefer_items(self, sub: Schema) -> bool:
        """A list whose element repeats too: name the element (Volume), not the list."""
        items = sub.get("items")
        return isinstance(items, dict) and self.is_candidate(canonical(items))

    def unique_name(self, base: str) -> str:
        # Same name, different content (the CRD has variants, e.g. a Probe whose
        # tcpSocket.port is optional): number them in the order they are met.
        name, n = base, 2
        while name in self.defs or name in self.reserved:
            name, n = f"{base}{n}", n + 1
        return name


def collect_refs(schema: Any, counts: Counter[str]) -> None:
    """Count ``#/$defs/X`` references anywhere in a document."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            counts[ref.removeprefix("#/$defs/")] += 1
        for value in schema.values():
            collect_refs(value, counts)
    elif isinstance(schema, list):
        for value in schema:
            collect_refs(value, counts)


def inline_unhelpful(doc: Schema, keep: set[str]) -> None:
    """Put back defs that save nothing: referenced once (their parent was extracted
    too), or so small after deduplication that they only wrap another $ref."""
    while True:
        counts: Counter[str] = Counter()
        collect_refs(doc, counts)
        unhelpful = sorted(
            name
            for name, body in doc["$defs"].items()
            if name not in keep and (counts[name] <= 1 or len(canonical(body)) <= INLINE_MAX_CHARS)
        )
        if not unhelpful:
            return
        name = unhelpful[0]
        body = doc["$defs"].pop(name)
        _substitute(doc, f"#/$defs/{name}", body)


def renumber(doc: Schema) -> None:
    """Close the gaps that inlining leaves: "Probe2" becomes "Probe" if that is free."""
    for name in sorted(doc["$defs"]):
        base = name.rstrip("0123456789")
        if base == name or base in doc["$defs"]:
            continue
        doc["$defs"][base] = doc["$defs"].pop(name)
        _substitute(doc, f"#/$defs/{name}", {"$ref": f"#/$defs/{base}"})


def _substitute(node: Any, ref: str, body: Schema) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict) and value.get("$ref") == ref and len(value) == 1:
                node[key] = body
            else:
                _substitute(value, ref, body)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, dict) and value.get("$ref") == ref and len(value) == 1:
                node[index] = body
            else:
                _substitute(value, ref, body)


def deduplicate(doc: Schema) -> Schema:
    """Return ``doc`` with repeated large subschemas moved to ``$defs``."""
    hand_written = dict(doc.get("$defs", {}))
    body = {k: v for k, v in doc.items() if k != "$defs"}
    dedup = Deduplicator(body, reserved=set(hand_written))
    out = dedup.walk(body)
    out["$defs"] = {**hand_written, **dedup.defs}
    inline_unhelpful(out, keep=set(hand_written))
    renumber(out)
    return out


# ---------------------------------------------------------------------------
# CRD-derived schemas
# ---------------------------------------------------------------------------


def load_crd_schema(path: Path) -> tuple[Schema, str]:
    """The openAPIV3Schema of the served version, and the generator that wrote the CRD."""
    # The CRDs are 1.7 MB each: the C loader, when PyYAML has it, parses them 10x faster.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    versions = [v for v in crd["spec"]["versions"] if v["name"] == SERVED_VERSION]
    if not versions or not versions[0].get("served"):
        raise SystemExit(f"generate.py: {path.name} does not serve {SERVED_VERSION}")
    annotations = crd.get("metadata", {}).get("annotations", {})
    generator = annotations.get("controller-gen.kubebuilder.io/version", "unknown")
    return versions[0]["schema"]["openAPIV3Schema"], generator


def crd_document(crd_path: Path, kind: str, filename: str) -> Schema:
    """Build the schema file for one CRD kind."""
    raw, generator = load_crd_schema(crd_path)
    schema = convert(raw)
    add_identity(schema, kind)
    if kind == "InferenceService":
        add_omenative_isvc(schema)
    else:
        add_omenative_runtime(schema)
    doc: Schema = {
        "$schema": DRAFT,
        "$id": ID_BASE + filename,
        "$comment": (
            f"Generated by schemas/generate.py from {crd_path.name} "
            f"({SERVED_VERSION}, controller-gen {generator}); do not edit by hand."
        ),
        "title": f"{kind} ({API_VERSION})",
        **schema,
        "$defs": lifecycle_defs(),
    }
    return deduplicate(doc)


# ---------------------------------------------------------------------------
# Hand-written schemas
# ---------------------------------------------------------------------------


def operator_values_document() -> Schema:
    """The Helm values file, of which omegitops reads ``ome.controller``.

    Types and structure only, no minimum/maximum: an out-of-range setting must stop
    the run with the documents' message (``invalid deploy config, minReadySeconds
    must be >= 0, got -30``), which Python produces. Everything the chart has besides
    these settings stays accepted.
    """
    duration = {"$ref": "#/$defs/SignedDuration"}
    integer = {"type": "integer"}
    int_or_percent = {"$ref": "#/$defs/SignedIntOrPercent"}
    component_strategy = closed(
        {
            "type": {"type": "string", "enum": STRATEGY_TYPES},
            "maxSurge": int_or_percent,
            "maxUnavailable": int_or_percent,
        }
    )
    controller = open_object(
        {
            "deploymentMode": {"type": "string", "enum": DEPLOYMENT_MODES},
            "minReadySeconds": integer,
            "updateStrategy": closed({c: component_strategy for c in COMPONENTS}),
            "lifecycle": closed(
                {
                    "revisionHistoryLimit": integer,
                    "stuckPodGracePeriod": duration,
                    "unschedulableGracePeriod": duration,
                    "instanceReadyTimeout": duration,
                    "repairBatchSize": integer,
                    "abandonedReplacementGracePeriod": duration,
                    # The backoff doubles each attempt: {maxAttempts: 3,
                    # initialBackoff: 1m} is the chart's three attempts (1m, then 2m).
                    "updateRetry": closed({"maxAttempts": integer, "initialBackoff": duration}),
                }
            ),
            "autoMigrate": closed({"maxAttempts": integer}),
        }
    )
    return {
        "$schema": DRAFT,
        "$id": ID_BASE + "operator-values.schema.json",
        "$comment": "Generated by schemas/generate.py; do not edit by hand.",
        "title": "ome-resources Helm values (the settings omegitops reads)",
        **open_object({"ome": open_object({"controller": controller})}),
        "$defs": {
            "SignedDuration": {"type": "string", "pattern": SIGNED_DURATION_PATTERN},
            "SignedIntOrPercent": {
                "anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[-+]?[0-9]+%$"}]
            },
        },
    }


def inference_replica_document() -> Schema:
    """The InferenceReplica that omegitops writes for each OMENative component.

    ``spec`` is closed (omegitops is its only writer, so an unknown field is a bug);
    ``status`` and its rows are open, so that later fields can be added, but every
    listed field is type-checked.
    """
    time = {"$ref": "#/$defs/Time"}
    count = {"type": "integer", "minimum": 0}
    string = {"type": "string"}
    revision = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-[0-9a-f]{8}$"}
    spec = closed(
        {
            "inferenceService": {"type": "string", "pattern": DNS1123_LABEL, "maxLength": 63},
            "component": {"type": "string", "enum": COMPONENTS},
            "replicas": count,
            # The bounds from Git when an autoscaler owns the count (minReplicas <
            # maxReplicas); absent when Git owns it (lifecycle/scaling.py).
            "minReplicas": count,
            "maxReplicas": count,
            "minReadySeconds": count,
            "lifecycle": {"$ref": "#/$defs/Lifecycle"},
            "revision": revision,
            "shape": {"type": "string", "enum": ["single", "gang"]},
            "workerSize": count,
        },
        required=["inferenceService", "component", "replicas"],
    )
    status = open_object(
        {
            "observedGeneration": count,
            "replicas": count,
            "readyReplicas": count,
            "availableReplicas": count,
            "updatedReplicas": count,
            "servingReplicas": count,
            # The scale subresource's labelSelectorPath: the pods that serve (single
            # pods, or the leaders of gangs), what an HPA averages its metrics over.
            "selector": string,
            # Who owns spec.replicas: Git (minReplicas == maxReplicas) or an autoscaler.
            "replicasFrom": {"type": "string", "enum": ["Git", "Autoscaler"]},
            "currentRevision": revision,
            "updateRevision": revision,
            "conditions": {"type": "array", "items": {"$ref": "#/$defs/Condition"}},
            "rolloutHold": nullable({"$ref": "#/$defs/RolloutHold"}),
            # The canary's current step (lifecycle/canary.py), while one moves the
            # component.
            "canary": nullable({"$ref": "#/$defs/CanaryStatus"}),
            # The rollout group the component moves in (lifecycle/groups.py), while
            # one holds it: its members, how many Instances it lets onto the new
            # revision, and the member it waits for.
            "group": nullable({"$ref": "#/$defs/GroupStatus"}),
            # Events recorded with the status write and not sent yet (model/outbox.py),
            # and the counter that numbers them.
            "eventSequence": count,
            "eventOutbox": {"type": "array", "items": {"$ref": "#/$defs/OutboxEvent"}},
            "instances": {
                "oneOf": [
                    {"type": "array", "items": {"$ref": "#/$defs/InstanceStatus"}},
                    {"$ref": "#/$defs/ColumnarInstances"},
                ]
            },
        }
    )
    defs = {
        **lifecycle_defs(),
        "Time": {"type": "string", "pattern": RFC3339_PATTERN},
        "Condition": closed(
            {
                "type": string,
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": count,
                "reason": string,
                "message": string,
                "lastTransitionTime": time,
            },
            required=["type", "status"],
        ),
        "OutboxEvent": closed(
            {
                "sequence": {"type": "integer", "minimum": 1},
                "type": {"type": "string", "enum": ["Normal", "Warning"]},
                "reason": string,
                "message": string,
            },
            required=["sequence", "type", "reason", "message"],
        ),
        "CanaryStatus": open_object(
            {
                "target": revision,
                "step": {"type": "integer", "minimum": 1},
                "steps": {"type": "integer", "minimum": 1},
                "replicas": count,
                "pause": nullable(string),
                "startedAt": time,
                "reachedAt": nullable(time),
                "endsAt": nullable(time),
                "waitingFor": string,
                "promotedBy": nullable(string),
                # The current step as Git wrote it: a step Git changes starts again.
                "definition": string,
                "done": {"type": "boolean"},
            },
            required=["target", "step", "steps", "startedAt", "waitingFor"],
        ),
        "GroupStatus": open_object(
            {
                "name": string,
                "members": {"type": "array", "items": string},
                "replicas": count,
                "waitingFor": nullable(string),
                "reason": string,
                "strategy": string,
                "switch": {"type": "boolean"},
            },
            required=["name", "members", "replicas"],
        ),
        "RolloutHold": open_object(
            {"gate": string, "reason": string, "since": time, "target": nullable(revision),
             "by": string},
            required=["gate", "reason"],
        ),
        "ColumnarInstances": closed(
            {
                "encoding": {"const": "ColumnarV2"},
                "columns": {
                    "type": "array",
                    "items": string,
                    "uniqueItems": True,
                    "contains": {"const": "index"},
                },
                "rows": {"type": "array", "items": {"type": "array"}},
            },
            required=["encoding", "columns", "rows"],
        ),
        # OMENativeInstanceStatus: one row per Instance.
        "InstanceStatus": open_object(
            {
                "index": count,
                "incarnation": {"type": "integer", "minimum": 1},
                "phase": {
                    "type": "string",
                    "enum": [
                        "Creating",
                        "Updating",
                        "Restarting",
                        "Migrating",
                        "Deleting",
                        "Ready",
                        "Pending",
                        "Failed",
                    ],
                },
                "revision": nullable(revision),
                "pods": {"type": "array", "items": {"$ref": "#/$defs/InstancePod"}},
                "operation": nullable({"$ref": "#/$defs/InstanceOperation"}),
                "lastFailure": nullable({"$ref": "#/$defs/InstanceFailure"}),
                "readySince": nullable(time),
                "availableSince": nullable(time),
            },
            required=["index", "incarnation", "phase"],
        ),
        "InstancePod": open_object(
            {
                "name": string,
                "runner": {"type": "string", "enum": ["default", "leader", "worker"]},
                "ordinal": count,
                "ready": {"type": "boolean"},
                "serving": {"type": "boolean"},
                "restarts": count,
                "node": nullable(string),
            },
            required=["name", "runner"],
        ),
        "InstanceOperation": open_object(
            {
                "type": {
                    "type": "string",
                    "enum": ["Create", "Update", "Restart", "Delete", "Migrate"],
                },
                "step": string,
                "strategy": nullable({"type": "string", "enum": STRATEGY_TYPES}),
                "startedAt": time,
                "deadline": nullable(time),
                "waiting": nullable(string),
                # The last pass that saw an outside hold, and when the hold ended.
                "heldAt": time,
                "holdEnded": time,
                "targetRevision": nullable(revision),
                "attempt": count,
            },
            required=["type", "step"],
        ),
        "InstanceFailure": open_object(
            {
                "pod": string,
                "container": nullable(string),
                "reason": string,
                "exitCode": nullable({"type": "integer"}),
                "message": nullable(string),
                "time": time,
            },
            required=["reason"],
        ),
    }
    name = {
        "type": "string",
        "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-(engine|decoder|router)$",
        "maxLength": 253,
    }
    metadata = metadata_schema("InferenceReplica")
    metadata["properties"]["name"] = name
    return {
        "$schema": DRAFT,
        "$id": ID_BASE + "inferencereplica.schema.json",
        "$comment": "Generated by schemas/generate.py; do not edit by hand.",
        "title": f"InferenceReplica ({API_VERSION}), written by omegitops",
        **closed(
            {
                "apiVersion": {"type": "string", "const": API_VERSION},
                "kind": {"type": "string", "const": "InferenceReplica"},
                "metadata": metadata,
                "spec": spec,
                "status": status,
            },
            required=["apiVersion", "kind", "metadata", "spec"],
        ),
        "$defs": defs,
    }


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def render(doc: Schema) -> str:
    """Stable text: sorted keys, one-space indent (readable diffs, small files)."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build_all(crds: Path) -> dict[str, str]:
    """Every schema file's name and text."""
    files = {
        filename: render(crd_document(crds / crd_file, kind, filename))
        for filename, crd_file, kind in CRD_TARGETS
    }
    files["operator-values.schema.json"] = render(operator_values_document())
    files["inferencereplica.schema.json"] = render(inference_replica_document())
    return files


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crds", type=Path, default=DEFAULT_CRDS, help="OME CRD directory")
    parser.add_argument("--out", type=Path, default=SCHEMAS_DIR, help="output directory")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file would change"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.crds.is_dir():
        print(f"generate.py: CRD directory not found: {args.crds}", file=sys.stderr)
        return 2
    stale = []
    for filename, text in build_all(args.crds).items():
        path = args.out / filename
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(filename)
        if args.check:
            print(f"would change {path}", file=sys.stderr)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path} ({len(text.encode())} bytes)", file=sys.stderr)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
