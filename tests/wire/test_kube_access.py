"""The permission check, counted: asked once per run; and the InferenceService status
written where the CRD holds it.

A missing grant, named before any write, and a status OME's released CRD drops are
shown on the real API server (tests/controlplane/test_real_cluster_path.py,
test_kube_backend.py). The control plane has that released CRD, and one API server
holds one InferenceService CRD: a CRD that keeps ``status.components.*.lifecycle``
is the double's.
"""

from __future__ import annotations

import pytest
from wire_helpers import EXAMPLES, serve_inference_services

from omegitops.cluster.kube.access import REVIEW_PATH, run_permissions
from omegitops.manifests.load import load, resolved_components
from omegitops.reconcile import run_pass

WRITE_VERBS = ("create", "update", "patch", "delete")
STATUS_PATCH = r"/inferenceservices/[^/]+/status$"


@pytest.fixture(scope="module")
def items():
    return resolved_components(load(EXAMPLES))


def _writes(api) -> list:
    return [r for r in api.requests if r.verb in WRITE_VERBS and r.path != REVIEW_PATH]


def test_permissions_are_asked_once_per_run_and_not_on_a_pass_that_writes_nothing(
        kube, api, items):
    run_pass(kube, items)
    asked = len(api.calls("create", REVIEW_PATH))
    assert asked == len(run_permissions(prune=False, podgroups=False,
                                        inference_services=False))
    run_pass(kube, items)
    assert len(api.calls("create", REVIEW_PATH)) == asked


def test_where_the_crd_holds_the_status_the_totals_are_written_and_counted(kube, api, items):
    serve_inference_services(api)
    result = run_pass(kube, items)
    assert not result.errors
    assert result.applied == len(_writes(api))
    patched = api.get("InferenceService", "qwen3-0-6b", "qwen3-0-6b")
    lifecycle = patched["status"]["components"]["engine"]["lifecycle"]
    assert lifecycle["replicas"] == 2 and lifecycle["revision"].startswith("qwen3-0-6b-engine-")
    assert len(api.calls("patch", STATUS_PATCH)) == len(
        [p for _, p in result.plans if p.replica_changed])
