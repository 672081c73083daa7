"""What the job's account may do: checked once per run before the first write, and the
InferenceService status OME's released CRD cannot hold."""

from __future__ import annotations

import logging

import pytest
from wire_helpers import EXAMPLES, ome_isvc_schema, serve_inference_services

from omegitops.cluster.kube.access import REVIEW_PATH, run_permissions
from omegitops.manifests.load import load, resolved_components
from omegitops.reconcile import FORBIDDEN, run_pass, run_until_idle

WRITE_VERBS = ("create", "update", "patch", "delete")
STATUS_PATCH = r"/inferenceservices/[^/]+/status$"


@pytest.fixture(scope="module")
def items():
    return resolved_components(load(EXAMPLES))


def _writes(api) -> list:
    return [r for r in api.requests if r.verb in WRITE_VERBS and r.path != REVIEW_PATH
            and "/leases" not in r.path]


@pytest.fixture
def kube_env(api, monkeypatch):
    monkeypatch.setenv("OMEGITOPS_KUBE_API", api.url)
    monkeypatch.setenv("OMEGITOPS_NAMESPACE", "omegitops")
    return api


def test_a_run_without_a_permission_stops_before_any_write(cli, kube_env):
    api = kube_env
    serve_inference_services(api)
    api.forbid("create", "", "pods")
    api.forbid("patch", "ome.io", "inferenceservices/status", namespace="llama-demo")
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube",
                       "--until-idle", "--max-seconds", "30")
    assert code == 1
    lines = [line for line in err.splitlines() if "not permitted" in line]
    tail = "(pipelines/rbac.yaml grants what omegitops needs); nothing was written"
    assert lines == [f"error: not permitted: create core/pods in all namespaces {tail}",
                     ("error: not permitted: patch ome.io/inferenceservices/status in all "
                      f"namespaces {tail}")]
    assert _writes(api) == []
    assert "stopping: the job's account lacks permissions" in err
    # One question per permission the run may use, asked once.
    reviews = api.calls("create", REVIEW_PATH)
    assert len(reviews) == len(run_permissions(prune=False, podgroups=False,
                                               inference_services=True))


def test_permissions_are_asked_once_per_run_and_not_on_a_pass_that_writes_nothing(
        kube, api, items):
    run_pass(kube, items)
    asked = len(api.calls("create", REVIEW_PATH))
    assert asked == len(run_permissions(prune=False, podgroups=False,
                                        inference_services=False))
    run_pass(kube, items)
    assert len(api.calls("create", REVIEW_PATH)) == asked


def test_until_idle_stops_at_once_when_a_permission_is_missing(kube, api, items):
    api.forbid("delete", "apps", "controllerrevisions")
    passes = []
    assert run_until_idle(kube, items, 60, passes.append) == FORBIDDEN
    assert len(passes) == 1 and passes[0].forbidden and passes[0].applied == 0
    assert _writes(api) == []


@pytest.mark.skipif(ome_isvc_schema() is None, reason="OME's CRDs are not beside the repository")
def test_a_status_the_crd_drops_is_warned_about_once_and_not_written_again(
        kube, api, items, caplog):
    serve_inference_services(api)
    caplog.set_level(logging.WARNING, logger="omegitops")
    api.clear_log()
    first = run_pass(kube, items)
    patches = api.calls("patch", STATUS_PATCH)
    # Tried once; the answer shows nothing was stored, so it is no write.
    assert len(patches) == 1
    assert first.applied == len(_writes(api)) - 1
    api.clear_log()
    second = run_pass(kube, items)
    assert api.calls("patch", STATUS_PATCH) == [] and second.applied == len(_writes(api))
    warnings = [r.getMessage() for r in caplog.records if "lifecycle" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "status.components.*.lifecycle" in warnings[0]
    assert "totals stay on the InferenceReplica" in warnings[0]


def test_where_the_crd_holds_the_status_the_totals_are_written_and_counted(kube, api, items):
    serve_inference_services(api)
    api.crd_schemas.pop("inferenceservices", None)  # a CRD that keeps what it is given
    result = run_pass(kube, items)
    assert not result.errors
    assert result.applied == len(_writes(api))
    patched = api.get("InferenceService", "qwen3-0-6b", "qwen3-0-6b")
    lifecycle = patched["status"]["components"]["engine"]["lifecycle"]
    assert lifecycle["replicas"] == 2 and lifecycle["revision"].startswith("qwen3-0-6b-engine-")
    assert len(api.calls("patch", STATUS_PATCH)) == len(
        [p for _, p in result.plans if p.replica_changed])
