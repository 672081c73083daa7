"""Objects and paths shared by the wire tests."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS = REPO_ROOT / "pipelines" / "crds"
EXAMPLES = REPO_ROOT / "examples"
# OME's real CRDs (OME 1.2), beside the repository when the OME material is there.
OME_ISVC_CRD = REPO_ROOT.parent / "shared" / "ome" / "crds" / "ome.io_inferenceservices.yaml"
NS = "demo"


@cache
def ome_isvc_schema() -> dict | None:
    """The openAPIV3Schema of OME's own InferenceService CRD, or None without it."""
    if not OME_ISVC_CRD.exists():
        return None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(OME_ISVC_CRD.read_text(encoding="utf-8"), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]


def serve_inference_services(api, repo: Path = EXAMPLES) -> list[dict]:
    """Serve InferenceServices on the double (under OME's CRD when it is there), holding
    the repository's, as a cluster where they were applied with OME installed."""
    from apiserver import INFERENCE_SERVICES

    api.serve(INFERENCE_SERVICES)
    schema = ome_isvc_schema()
    if schema is not None:
        api.crd_schemas["inferenceservices"] = schema
    stored = []
    for path in sorted(repo.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "InferenceService":
                stored.append(api.add(doc))
    return stored


def make_pod(name: str, namespace: str = NS, labels: dict | None = None,
             node: str | None = None, **spec) -> dict:
    """A small pod; ``node`` binds it (so that a graceful delete keeps it terminating)."""
    body = {"containers": [{"name": "main", "image": "busybox:1"},
                           {"name": "sidecar", "image": "envoy:1"}], **spec}
    if node:
        body["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": body}


def make_replica(name: str = "llama-engine", namespace: str = NS, replicas: int = 2,
                 labels: dict | None = None) -> dict:
    isvc, _, component = name.rpartition("-")
    return {
        "apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"inferenceService": isvc, "component": component, "replicas": replicas,
                 "revision": f"{name}-0a1b2c3d"},
    }
