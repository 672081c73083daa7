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

from omegitops.app.passes import run_pass
from omegitops.cluster.kube.access import REVIEW_PATH, RULES_REVIEW_PATH, run_permissions
from omegitops.manifests.load import load, resolved_components

WRITE_VERBS = ("create", "update", "patch", "delete")
STATUS_PATCH = r"/inferenceservices/[^/]+/status$"


@pytest.fixture(scope="module")
def items():
    return resolved_components(load(EXAMPLES))


def _writes(api) -> list:
    return [r for r in api.requests if r.verb in WRITE_VERBS
            and r.path not in (REVIEW_PATH, RULES_REVIEW_PATH)]


def test_permissions_are_asked_once_per_namespace_and_not_on_a_pass_that_writes_nothing(
        kube, api, items):
    """One SelfSubjectRulesReview per namespace the run writes in, once a run; not one
    access review per permission (15 a run before, 41% of a 60 s cadence's requests)."""
    run_pass(kube, items)
    namespaces = {i.service.data["metadata"]["namespace"] for i in items if i.lifecycle.managed}
    assert len(api.calls("create", RULES_REVIEW_PATH)) == len(namespaces)
    assert api.calls("create", REVIEW_PATH) == []
    run_pass(kube, items)
    assert len(api.calls("create", RULES_REVIEW_PATH)) == len(namespaces)


def test_where_the_rules_review_cannot_tell_each_permission_is_asked(kube, api, items):
    """An incomplete rules review (an authorizer besides RBAC's): each permission is asked
    with a SelfSubjectAccessReview in that namespace, and a denied one named."""
    api.deny("delete", "controllerrevisions")
    result = run_pass(kube, items)
    assert result.forbidden and result.applied == 0
    assert any("not permitted: delete apps/controllerrevisions" in e for e in result.errors)
    assert len(api.calls("create", REVIEW_PATH)) >= len(run_permissions(
        prune=False, podgroups=False, inference_services=False))


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
