"""pipelines/crds/inferencereplica-crd.yaml: current, a valid Kubernetes document, and
structural. (That what omegitops writes passes it and loses nothing is shown on the real
API server: tests/controlplane/test_kube_backend.py.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import kubernetes_validate
import yaml

CRDS = Path(__file__).resolve().parents[2] / "pipelines" / "crds"
CRD_FILE = CRDS / "inferencereplica-crd.yaml"


def _generator():
    spec = importlib.util.spec_from_file_location("crd_generate", CRDS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schema() -> dict:
    (version,) = yaml.safe_load(CRD_FILE.read_text(encoding="utf-8"))["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


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
    assert version["subresources"]["status"] == {}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "COMPONENT", "DESIRED", "CURRENT", "READY", "AVAILABLE", "COUNT-FROM", "AGE"]


def test_the_crd_scales_instances_and_names_the_pods_that_serve():
    """``kubectl scale irep``, an HPA or a KEDA ScaledObject set spec.replicas (Instances);
    the selector the status holds names the serving pods, as LWS's hpaPodSelector does."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = crd["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}
    status = _schema()["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string"
    assert status["replicasFrom"]["enum"] == ["Git", "Autoscaler"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["COUNT-FROM"] == ".status.replicasFrom"


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


def test_every_field_says_what_it_is_for_kubectl_explain():
    generator = _generator()
    descriptions = yaml.safe_load(generator.DESCRIPTIONS.read_text(encoding="utf-8"))
    schema = _schema()
    paths = {path for path, _ in generator.fields(schema)}
    assert schema["description"].startswith("An InferenceReplica is")
    # metadata stays a bare object, as the API server requires of a CRD.
    assert [p for p, node in generator.fields(schema)
            if not node.get("description") and p != "metadata"] == []
    assert sorted(set(descriptions) - paths) == [], "descriptions of fields the CRD has not"


def test_the_crd_folder_holds_only_what_kubectl_applies():
    # `kubectl apply -f pipelines/crds/` reads every .yaml, .yml and .json file there.
    for path in CRDS.iterdir():
        if path.suffix in {".yaml", ".yml", ".json"}:
            assert yaml.safe_load(path.read_text(encoding="utf-8"))["kind"] == \
                "CustomResourceDefinition", path.name
