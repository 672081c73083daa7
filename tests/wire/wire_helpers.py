"""Objects and paths shared by the wire tests."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS = REPO_ROOT / "pipelines" / "crds"
EXAMPLES = REPO_ROOT / "examples"
NS = "demo"


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
