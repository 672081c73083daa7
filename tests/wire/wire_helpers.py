"""Objects and paths shared by the wire tests."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
NS = "demo"


def serve_inference_services(api, repo: Path = EXAMPLES) -> list[dict]:
    """Serve InferenceServices on the double, holding the repository's, as a cluster where
    they were applied with OME installed (under a CRD that keeps what it is given)."""
    from apiserver import INFERENCE_SERVICES

    api.serve(INFERENCE_SERVICES)
    stored = []
    for path in sorted(repo.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "InferenceService":
                stored.append(api.add(doc))
    return stored


def make_pod(name: str, namespace: str = NS, labels: dict | None = None, **spec) -> dict:
    body = {"containers": [{"name": "main", "image": "busybox:1"}], **spec}
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
