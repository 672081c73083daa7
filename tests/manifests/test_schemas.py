"""The JSON Schemas in schemas/: well-formed, faithful to the real OME corpus, strict
where a typo would change behaviour, and reproducible from schemas/generate.py."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
OME = Path(__file__).resolve().parents[3] / "shared" / "ome"

SCHEMA_FILES = [
    "inferenceservice.schema.json",
    "servingruntime.schema.json",
    "clusterservingruntime.schema.json",
    "operator-values.schema.json",
    "inferencereplica.schema.json",
]
HAND_WRITTEN = ["status-report.schema.json"]  # not produced by generate.py
CORPUS_KINDS = {
    "InferenceService": "inferenceservice.schema.json",
    "ServingRuntime": "servingruntime.schema.json",
    "ClusterServingRuntime": "clusterservingruntime.schema.json",
}
# Two upstream samples that the CRD itself rejects, so no faithful schema accepts
# them: they use field names from an older API. Each maps to the errors expected.
KNOWN_INVALID = {
    # spec.model.name is required by the CRD; modelName/runtime and spec.deployment
    # are not fields of v1beta1.
    "isvc/LGAI-EXAONE/exaone-3-5-7-8b-instruct-isvc.yaml": {
        "'name' is a required property",
        "Additional properties are not allowed ('modelName', 'runtime' were unexpected)",
        "Additional properties are not allowed ('deployment' was unexpected)",
    },
    # spec.modelRef/minReplicas/maxReplicas/scaleTarget belong under spec.engine
    # (or are gone): kubectl --validate=strict rejects them as unknown fields.
    "isvc/zai-org/glm-4-5v.yaml": {
        (
            "Additional properties are not allowed "
            "('maxReplicas', 'minReplicas', 'modelRef', 'scaleTarget' were unexpected)"
        ),
    },
}


@cache
def validator(filename: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / filename).read_text(encoding="utf-8"))
    return Draft202012Validator(schema)


def errors(filename: str, instance: Any) -> list[str]:
    return [e.message for e in validator(filename).iter_errors(instance)]


def assert_valid(filename: str, instance: Any) -> None:
    found = sorted(validator(filename).iter_errors(instance), key=lambda e: list(e.path))
    assert not found, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in found)


def with_path(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with the dotted ``path`` set to ``value``."""
    out = copy.deepcopy(doc)
    *parents, leaf = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


# --------------------------------------------------------------------------- fixtures

FULL_LIFECYCLE = {
    "updateStrategy": {
        "type": "SurgeThenDrain",
        "rollingUpdate": {"partition": 1, "maxSurge": "25%", "maxUnavailable": 0},
        "inPlaceUpdateStrategy": {"markNotReadyDuringLifecycle": False},
    },
    "minReadySeconds": 900,
    "restartPolicy": "RecreateInstanceOnPodRestart",
    "instanceReadyTimeout": "1h30m",
    "migrationPolicy": {"mode": "Never"},
}

OMENATIVE_ISVC = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "llama-pd", "namespace": "llama-demo"},
    "spec": {
        "deploymentMode": "OMENative",
        "model": {"name": "llama-3-2-1b-instruct"},
        "runtime": {"name": "srt-llama-3-2-1b-instruct-pd", "autoSync": False},
        "engine": {"minReplicas": 2, "maxReplicas": 2, "lifecycle": FULL_LIFECYCLE},
        "decoder": {"minReplicas": 1, "maxReplicas": 1, "lifecycle": {"restartPolicy": "None"}},
        "router": {
            "minReplicas": 1,
            "maxReplicas": 1,
            "lifecycle": {"updateStrategy": {"type": "RecreatePod"}},
        },
    },
}

RUNTIME = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "srt-llama-3.2-1b-instruct"},
    "spec": {
        "supportedModelFormats": [
            {"modelFormat": {"name": "safetensors"}, "modelFramework": {"name": "transformers"}}
        ],
        "engineConfig": {
            "runner": {"name": "ome-container", "image": "docker.io/lmsysorg/sglang:v0.4"},
            "lifecycle": {
                "updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}},
                "minReadySeconds": 1200,
            },
        },
        "decoderConfig": {"lifecycle": {"restartPolicy": "None"}},
        "routerConfig": {"lifecycle": {"instanceReadyTimeout": "30m"}},
    },
}

OPERATOR_VALUES = {
    "ome": {
        "controller": {
            "deploymentMode": "OMENative",
            "minReadySeconds": 60,
            "updateStrategy": {
                c: {"type": "SurgeThenDrain", "maxSurge": "25%", "maxUnavailable": "25%"}
                for c in ("engine", "decoder", "router")
            },
            "lifecycle": {
                "revisionHistoryLimit": 10,
                "stuckPodGracePeriod": "60s",
                "unschedulableGracePeriod": "15m",
                "instanceReadyTimeout": "30m",
                "repairBatchSize": 10,
                "abandonedReplacementGracePeriod": "30s",
                "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"},
            },
            "autoMigrate": {"maxAttempts": 3},
        }
    }
}

REVISION = "llama-chat-engine-7b4c2e19"
ROW = {
    "index": 0,
    "incarnation": 2,
    "phase": "Updating",
    "revision": "llama-chat-engine-5e0a9c11",
    "pods": [
        {
            "name": "llama-chat-engine-0-leader-0",
            "runner": "leader",
            "ordinal": 0,
            "ready": True,
            "serving": True,
            "restarts": 0,
            "node": "gpu-a",
        },
        {
            "name": "llama-chat-engine-0-worker-0",
            "runner": "worker",
            "ordinal": 0,
            "ready": True,
            "serving": True,
            "restarts": 1,
            "node": None,
        },
    ],
    "operation": {
        "type": "Update",
        "step": "SurgeWaitAvailable",
        "strategy": "SurgeThenDrain",
        "startedAt": "2026-09-27T08:14:02Z",
        "deadline": "2026-09-27T08:44:02Z",
        "waiting": None,
        "targetRevision": REVISION,
        "attempt": 1,
    },
    "lastFailure": {
        "pod": "llama-chat-engine-0-leader-0",
        "container": "ome-container",
        "reason": "OOMKilled",
        "exitCode": 137,
        "message": "",
        "time": "2026-09-27T07:00:00Z",
    },
    "readySince": "2026-09-27T07:05:00Z",
    "availableSince": None,
    "someFutureField": {"kept": True},
}
REPLICA = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "InferenceReplica",
    "metadata": {
        "name": "llama-chat-engine",
        "namespace": "llama-demo",
        "labels": {"app.kubernetes.io/managed-by": "omegitops"},
    },
    "spec": {
        "inferenceService": "llama-chat",
        "component": "engine",
        "replicas": 2,
        "minReadySeconds": 900,
        "lifecycle": {
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "rollingUpdate": {"maxUnavailable": "25%"},
            }
        },
        "revision": REVISION,
        "shape": "gang",
        "workerSize": 1,
    },
    "status": {
        "observedGeneration": 3,
        "replicas": 2,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "updatedReplicas": 0,
        "servingReplicas": 2,
        "currentRevision": "llama-chat-engine-5e0a9c11",
        "updateRevision": REVISION,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "MinimumAvailable",
                "message": "",
                "lastTransitionTime": "2026-09-27T08:14:02Z",
            },
        ],
        "rolloutHold": {
            "gate": "Budget",
            "reason": "per-Component unavailability budget 0 exhausted (would become 1)",
            "since": "2026-09-27T08:14:02Z",
            "target": REVISION,
        },
        "instances": [ROW],
    },
}


def columnar(rows: list[dict[str, Any]]) -> dict[str, Any]:
    columns = sorted({key for row in rows for key in row})
    return {
        "encoding": "ColumnarV2",
        "columns": columns,
        "rows": [[row.get(c) for c in columns] for row in rows],
    }


# --------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("filename", SCHEMA_FILES + HAND_WRITTEN)
def test_schema_is_valid_draft_2020_12(filename: str) -> None:
    schema = json.loads((SCHEMAS / filename).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("filename", SCHEMA_FILES + HAND_WRITTEN)
def test_every_ref_resolves(filename: str) -> None:
    schema = json.loads((SCHEMAS / filename).read_text(encoding="utf-8"))
    refs: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.add(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    for ref in refs:
        assert ref.startswith("#/$defs/") and ref.removeprefix("#/$defs/") in schema["$defs"], ref



# What RE2 (Go's regexp: kubeconform, the API server's CEL, any Go validator) refuses
# that ECMA-262 and Python accept: one such pattern makes the whole schema unloadable.
RE2_REFUSES = [
    (r"\\[uU][0-9a-fA-F{]", "a \\u escape (write the character itself)"),
    (r"\(\?[=!]|\(\?<[=!]", "a lookaround"),
    (r"\\[1-9]", "a back-reference"),
    (r"\\[cZ]", "an escape RE2 does not know"),
]


def patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from value
            yield from patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from patterns(value)


@pytest.mark.parametrize("filename", SCHEMA_FILES + HAND_WRITTEN)
def test_every_pattern_is_one_go_validators_can_read(filename: str) -> None:
    schema = json.loads((SCHEMAS / filename).read_text(encoding="utf-8"))
    found = list(patterns(schema))
    for pattern in found:
        for refused, what in RE2_REFUSES:
            assert not re.search(refused, pattern), f"{pattern!r} has {what}"
    if filename == "inferenceservice.schema.json":
        assert any("\u00b5s" in p for p in found), "the micro sign, as a character"

def load_generator():
    spec = importlib.util.spec_from_file_location("schemas_generate", SCHEMAS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_generate_is_deterministic(tmp_path: Path) -> None:
    if not (OME / "crds").is_dir():
        pytest.skip(f"no OME CRDs at {OME / 'crds'}")
    generate = load_generator()
    for run in ("a", "b"):
        out = tmp_path / run
        out.mkdir()
        assert generate.main(["--crds", str(OME / "crds"), "--out", str(out)]) == 0
    for filename in SCHEMA_FILES:
        first = (tmp_path / "a" / filename).read_bytes()
        assert first == (tmp_path / "b" / filename).read_bytes(), filename
        # The committed files are what the generator writes today.
        assert first == (SCHEMAS / filename).read_bytes(), f"{filename} is stale: regenerate"


# --------------------------------------------------------------------------- corpus


def corpus_objects() -> list[tuple[str, dict[str, Any]]]:
    objects = []
    for path in sorted(OME.rglob("*.yaml")):
        relative = path.relative_to(OME).as_posix()
        if relative.startswith(("crds/", "chart/")):
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") in CORPUS_KINDS:
                objects.append((relative, doc))
    return objects


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, dict[str, Any]]]:
    if not OME.is_dir():
        pytest.skip(f"no OME corpus at {OME}")
    return corpus_objects()


def test_corpus_validates(corpus: list[tuple[str, dict[str, Any]]]) -> None:
    kinds = [doc["kind"] for _, doc in corpus]
    assert (kinds.count("InferenceService"), kinds.count("ClusterServingRuntime")) == (148, 207)
    failures = {}
    for relative, doc in corpus:
        found = errors(CORPUS_KINDS[doc["kind"]], doc)
        if relative in KNOWN_INVALID:
            assert set(found) == KNOWN_INVALID[relative], relative
        elif found:
            failures[relative] = found
    assert not failures, json.dumps(failures, indent=1)


def test_chart_values_validate() -> None:
    path = OME / "chart" / "ome-resources-values.yaml"
    if not path.is_file():
        pytest.skip(f"no chart values at {path}")
    assert_valid("operator-values.schema.json", yaml.safe_load(path.read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- OMENative


def test_omenative_isvc_with_full_lifecycle_validates() -> None:
    assert_valid("inferenceservice.schema.json", OMENATIVE_ISVC)


@pytest.mark.parametrize("filename", ["clusterservingruntime", "servingruntime"])
def test_runtime_lifecycle_validates(filename: str) -> None:
    runtime = dict(RUNTIME, kind="ServingRuntime") if filename == "servingruntime" else RUNTIME
    if filename == "servingruntime":
        runtime = with_path(runtime, "metadata.namespace", "llama-demo")
    assert_valid(f"{filename}.schema.json", runtime)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("minReadySeconds", -1),
        ("updateStrategy.type", "BlueGreen"),
        ("restartPolicy", "RecreateInstanceOnPodRestrat"),
        ("minReadySecond", 30),
        ("updateStrategy.rollingUpdate.maxSurge", "abc"),
        ("updateStrategy.rollingUpdate.maxUnavailable", "25"),
        ("updateStrategy.rollingUpdate.partition", -1),
        ("updateStrategy.rollingUpdate.maxSurgee", 1),
        ("instanceReadyTimeout", "30 minutes"),
        ("instanceReadyTimeout", "-5m"),
        ("migrationPolicy.mode", "Always"),
        ("updateStrategy.inPlaceUpdateStrategy.markNotReadyDuringLifecycle", "false"),
    ],
)
def test_bad_lifecycle_is_rejected(path: str, value: Any) -> None:
    lifecycle = with_path(FULL_LIFECYCLE, path, value)
    isvc = with_path(OMENATIVE_ISVC, "spec.engine.lifecycle", lifecycle)
    assert errors("inferenceservice.schema.json", isvc)
    runtime = with_path(RUNTIME, "spec.engineConfig.lifecycle", lifecycle)
    assert errors("clusterservingruntime.schema.json", runtime)


@pytest.mark.parametrize("value", ["0", "90s", "1h30m", "1.5h", "300ms", "10us", "10\u00b5s"])
def test_go_durations_accepted(value: str) -> None:
    isvc = with_path(OMENATIVE_ISVC, "spec.engine.lifecycle.instanceReadyTimeout", value)
    assert_valid("inferenceservice.schema.json", isvc)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "Bad_Name"),
        ("metadata.name", "x" * 64),
        ("metadata.namespace", "Llama"),
        ("apiVersion", "ome.io/v1alpha1"),
        ("kind", "ServingRuntime"),
        ("spec.deploymentMode", "Native"),
        ("spec.runtime.autoSync", "false"),
        ("spec.engine.minReplica", 1),
        ("metadata.labels", {"tier": 1}),
    ],
)
def test_bad_isvc_is_rejected(path: str, value: Any) -> None:
    assert errors("inferenceservice.schema.json", with_path(OMENATIVE_ISVC, path, value))


def test_isvc_name_is_required() -> None:
    isvc = copy.deepcopy(OMENATIVE_ISVC)
    del isvc["metadata"]["name"]
    assert errors("inferenceservice.schema.json", isvc)


def test_runtime_names_are_subdomains() -> None:
    assert errors("clusterservingruntime.schema.json", with_path(RUNTIME, "metadata.name", "A"))
    long_name = with_path(RUNTIME, "metadata.name", "a" * 100 + ".b")
    assert_valid("clusterservingruntime.schema.json", long_name)


@pytest.mark.parametrize(
    "mode",
    [
        "RawDeployment",
        "Serverless",
        "MultiNode",
        "PDDisaggregated",
        "VirtualDeployment",
        "OMENative",
    ],
)
def test_known_deployment_modes_accepted(mode: str) -> None:
    isvc = with_path(OMENATIVE_ISVC, "spec.deploymentMode", mode)
    assert_valid("inferenceservice.schema.json", isvc)


# --------------------------------------------------------------------------- operator values


def test_operator_values_validate() -> None:
    assert_valid("operator-values.schema.json", OPERATOR_VALUES)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        # Out-of-range values pass the schema: Python rejects them with the documents'
        # message ("invalid deploy config, minReadySeconds must be >= 0, got -30").
        ("ome.controller.minReadySeconds", -30),
        ("ome.controller.lifecycle.repairBatchSize", 0),
        ("ome.controller.lifecycle.revisionHistoryLimit", -1),
        ("ome.controller.lifecycle.stuckPodGracePeriod", "-60s"),
        ("ome.controller.updateStrategy.engine.maxUnavailable", 0),
        ("ome.controller.updateStrategy.engine.maxSurge", "150%"),
        ("ome.controller.autoMigrate.maxAttempts", 0),
        # The rest of the chart's values are not omegitops' business.
        ("ome.controller.replicaCount", 3),
        ("modelAgent.hostPath", "/mnt/data/models"),
    ],
)
def test_operator_values_leave_ranges_to_python(path: str, value: Any) -> None:
    assert_valid("operator-values.schema.json", with_path(OPERATOR_VALUES, path, value))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("ome.controller.minReadySeconds", "60"),
        ("ome.controller.updateStrategy.engine.type", "Rolling"),
        ("ome.controller.updateStrategy.engine.maxSurge", "abc"),
        ("ome.controller.updateStrategy.engin", {"type": "RecreatePod"}),
        ("ome.controller.lifecycle.stuckPodGracePeriod", 60),
        ("ome.controller.lifecycle.unschedulableGracePeriod", "15 minutes"),
        ("ome.controller.lifecycle.updateRetry", 3),
        ("ome.controller.lifecycle.updateRetry.initialBackof", "1m"),
        ("ome.controller.autoMigrate.maxAttempts", "3"),
        ("ome.controller.deploymentMode", "Native"),
    ],
)
def test_operator_values_type_errors_rejected(path: str, value: Any) -> None:
    assert errors("operator-values.schema.json", with_path(OPERATOR_VALUES, path, value))


def test_operator_values_must_be_a_mapping() -> None:
    assert errors("operator-values.schema.json", [OPERATOR_VALUES])


# --------------------------------------------------------------------------- InferenceReplica


def test_inference_replica_plain_rows_validate() -> None:
    assert_valid("inferencereplica.schema.json", REPLICA)


def test_inference_replica_columnar_rows_validate() -> None:
    replica = with_path(REPLICA, "status.instances", columnar([ROW, dict(ROW, index=3)]))
    assert_valid("inferencereplica.schema.json", replica)


def test_inference_replica_without_hold_or_instances_validates() -> None:
    replica = with_path(REPLICA, "status.rolloutHold", None)
    replica = with_path(replica, "status.instances", [])
    assert_valid("inferencereplica.schema.json", replica)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "llama-chat-predictor"),
        ("spec.component", "predictor"),
        ("spec.shape", "pair"),
        ("spec.lifecycle", {"minReadySeconds": -1}),
        ("spec.revison", REVISION),
        ("status.readyReplicas", -1),
        ("status.conditions", [{"type": "Ready", "status": "Yes"}]),
        ("status.rolloutHold", {"reason": "no gate"}),
        ("status.instances", [dict(ROW, phase="Running")]),
        ("status.instances", [dict(ROW, pods=[{"name": "p", "runner": "main"}])]),
        ("status.instances", [dict(ROW, operation={"type": "Scale", "step": "X"})]),
        ("status.instances", [dict(ROW, lastFailure={"reason": "Error", "exitCode": "1"})]),
        ("status.instances", {"encoding": "ColumnarV1", "columns": ["index"], "rows": []}),
        ("status.instances", {"encoding": "ColumnarV2", "columns": ["phase"], "rows": []}),
    ],
)
def test_bad_inference_replica_is_rejected(path: str, value: Any) -> None:
    assert errors("inferencereplica.schema.json", with_path(REPLICA, path, value))
