"""pipelines/crds/inferencereplica-crd.yaml: current, structural, and faithful to what we write."""

from __future__ import annotations

import importlib.util

import crdschema
import kubernetes_validate
import pytest
import yaml
from wire_helpers import CRDS, EXAMPLES

from omegitops.cluster.sim import SimCluster

CRD_FILE = CRDS / "inferencereplica-crd.yaml"


def _generator():
    spec = importlib.util.spec_from_file_location("crd_generate", CRDS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schema() -> dict:
    return crdschema.load_crd_schemas(CRDS)["inferencereplicas"]


def test_the_crd_file_is_up_to_date_with_its_generator():
    assert CRD_FILE.read_text(encoding="utf-8") == _generator().render(), \
        "run: python pipelines/crds/generate.py"


def test_the_crd_validates_as_a_kubernetes_document():
    kubernetes_validate.validate(yaml.safe_load(CRD_FILE.read_text()), "1.30", strict=True)


def test_the_crd_names_columns_and_subresources():
    crd = yaml.safe_load(CRD_FILE.read_text())
    assert crd["metadata"]["name"] == "inferencereplicas.ome.io"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["shortNames"] == ["irep"]
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "COMPONENT", "DESIRED", "CURRENT", "READY", "AVAILABLE", "AGE"]


def _nodes(node: dict, path: str = ""):
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}[*]")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")


def test_the_schema_is_structural():
    """The API server's rules: a type everywhere (or preserve-unknown / int-or-string), no
    $ref, const, oneOf or anyOf with types, additionalProperties never beside properties,
    items on every array, and metadata left to the server."""
    schema = _schema()
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in _nodes(schema):
        assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields") or \
            node.get("x-kubernetes-int-or-string"), f"{path}: no type"
        assert not {"$ref", "$defs", "const", "oneOf", "anyOf", "allOf", "contains",
                    "uniqueItems", "$comment"} & set(node), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        assert "\\u" not in node.get("pattern", ""), f"{path}: RE2 has no \\u escapes"


@pytest.fixture(scope="module")
def written_replicas(tmp_path_factory) -> list[dict]:
    """The InferenceReplicas a run over examples/ writes, on the simulator, until idle."""
    from omegitops.cli import main

    path = tmp_path_factory.mktemp("crd") / "cluster.json"
    assert main(["reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{path}",
                 "--until-idle"]) == 0
    with SimCluster(path) as cluster:
        return cluster.list_objects("InferenceReplica")


def test_what_omegitops_writes_passes_the_crd_and_loses_nothing(written_replicas):
    schema = _schema()
    assert written_replicas
    for replica in written_replicas:
        name = replica["metadata"]["name"]
        assert crdschema.validate(replica, schema) == [], name
        assert crdschema.prune(replica, schema) == replica, f"{name}: the API server would drop " \
            "fields the CRD does not declare"
