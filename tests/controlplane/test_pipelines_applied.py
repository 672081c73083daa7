"""Every manifest of ``pipelines/`` applied to the real API server (server-side dry run),
with Argo Workflows' own CRDs installed so that the CronWorkflow and the
WorkflowTemplate meet Argo's real schemas, as ``kubectl apply --dry-run=server``
would on a cluster with Argo installed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import PIPELINES, module_dir
from kubernetes.dynamic.exceptions import DynamicApiError

# The Argo Workflows release whose CRDs (manifests/base/crds/full) the pipelines
# are checked against; the Go module proxy serves its source.
ARGO_MODULE = "github.com/argoproj/argo-workflows/v3@v3.7.3"
ARGO_CRDS = ("argoproj.io_workflowtemplates.yaml", "argoproj.io_cronworkflows.yaml")


def argo_crds() -> list[Path]:
    folder = module_dir(ARGO_MODULE) / "manifests" / "base" / "crds" / "full"
    return [folder / name for name in ARGO_CRDS]


@pytest.fixture(scope="module")
def with_argo(control_plane):
    control_plane.apply_files(argo_crds())
    return control_plane


def pipeline_files() -> list[Path]:
    """The manifests (the Helm chart's templates are not: test_packaging_applied.py)."""
    chart = PIPELINES / "chart"
    return sorted(p for p in PIPELINES.rglob("*.yaml") if not p.is_relative_to(chart))


def test_there_are_pipeline_manifests():
    names = {p.relative_to(PIPELINES).as_posix() for p in pipeline_files()}
    assert {"cronjob/cronjob.yaml", "common/rbac.yaml", "common/settings.yaml",
            "common/namespace.yaml", "argo/cronworkflow.yaml",
            "argo/workflowtemplate.yaml", "crds/inferencereplica-crd.yaml"} <= names


@pytest.mark.parametrize("path", pipeline_files(), ids=lambda p: p.relative_to(PIPELINES).as_posix())
def test_pipeline_manifest_is_accepted_by_the_api_server(with_argo, path):
    applied = with_argo.apply_file(path, dry_run=True)
    assert applied, f"{path}: no documents"
    for obj in applied:
        # The server filled in its defaults: the object passed admission and the schema.
        assert obj["metadata"].get("uid") or obj["metadata"].get("creationTimestamp") \
            or obj["metadata"].get("managedFields"), obj["metadata"]


def test_the_api_server_refuses_a_broken_cronworkflow(with_argo):
    """The dry run is a real check: Argo's CRD schema refuses a wrong field type."""
    cron = yaml.safe_load((PIPELINES / "argo" / "cronworkflow.yaml").read_text())
    cron["spec"]["concurrencyPolicy"] = {"not": "a string"}
    with pytest.raises(DynamicApiError) as refused:
        with_argo.apply(cron, dry_run=True)
    assert "concurrencyPolicy" in str(refused.value.body), refused.value.body
