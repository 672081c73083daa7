"""The real OME catalogue (../shared/ome) loads, validates and resolves.

None of it is OMENative, so every component must be reported as not
managed. Two upstream samples are broken (the CRD itself rejects them), and
the catalogue holds alternative samples that define the same object twice:
both are reported, neither stops the rest.
"""

import pytest

from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.repository import INFERENCE_SERVICE, MANAGED_KINDS
from omegitops.manifests.validate import percentage_errors, schema_errors
from omegitops.render.operator import OperatorSettings
from tests.conftest import SHARED_OME

pytestmark = pytest.mark.skipif(not SHARED_OME.is_dir(), reason="../shared/ome not present")

@pytest.fixture(scope="module")
def loaded():
    return load(SHARED_OME)


BROKEN_UPSTREAM = {
    "isvc/LGAI-EXAONE/exaone-3-5-7-8b-instruct-isvc.yaml",  # no spec.model.name
    "isvc/zai-org/glm-4-5v.yaml",  # spec.modelRef, spec.minReplicas: not in the CRD
}


def test_every_object_of_the_catalogue_loads(loaded):
    repo = loaded.repo
    managed = [m for m in repo.manifests if m.id.kind in MANAGED_KINDS]
    assert len(managed) == 355
    assert sum(m.id.kind == INFERENCE_SERVICE for m in managed) == 148
    assert not repo.errors
    skipped = {s.kind for s in repo.skipped}
    assert skipped == {"Namespace", "Kustomization", "CustomResourceDefinition", ""}


def test_every_object_validates_but_the_two_broken_samples(loaded):
    repo = loaded.repo
    failing = {m.path for m in repo.manifests if schema_errors(m) or percentage_errors(m)}
    assert failing == BROKEN_UPSTREAM


def test_repository_resolves_with_nothing_managed(loaded):
    assert loaded.values_path is None
    assert {e.path for e in loaded.result.errors} == BROKEN_UPSTREAM
    # Alternative samples of one object are warnings: nothing managed uses them.
    assert all("duplicate object" in w.message for w in loaded.result.warnings)
    items = resolved_components(loaded)
    services = {item.service.id for item in items}
    assert len(services) == len(loaded.result.catalog.services) >= 140
    assert items and not any(item.lifecycle.managed for item in items)
    modes = {item.lifecycle.mode.value for item in items}
    assert modes == {"RawDeployment"}


def test_named_runtimes_all_exist(loaded):
    assert not [e for e in loaded.result.errors if "not found" in e.message]


def test_chart_values_parse_as_operator_settings():
    from omegitops.manifests.operator_values import read_operator_values

    settings, path = read_operator_values(SHARED_OME, "chart/ome-resources-values.yaml")
    assert path == "chart/ome-resources-values.yaml"
    assert settings.deployment_mode == "RawDeployment"
    assert settings.update_strategy == {} and isinstance(settings, OperatorSettings)
