"""One resolution serves every service equal in what it reads: ``resolve_component``'s
memo, one run's, keyed by the parts of a service the resolver reads. These tests hold the
resolver to reading only those parts, so that the key can never miss a change."""

from __future__ import annotations

import datetime

import pytest

from omegitops.manifests.load import load
from omegitops.render.operator import parse_operator_values
from omegitops.render.resolve import READ_SPEC_PARTS, components_of, resolve_component
from tests.conftest import EXAMPLES, SHARED_OME

OPERATOR = parse_operator_values(None)
RUNTIME = {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
           "metadata": {"name": "rt"},
           "spec": {"engineConfig": {"runner": {"name": "ome-container", "image": "img:1"},
                                     "lifecycle": {"minReadySeconds": 5}}}}


class Recording(dict):
    """A mapping that notes each key read; reading them all (iterating) notes ``*``."""

    def __init__(self, data: dict, seen: set) -> None:
        super().__init__(data)
        self.seen = seen

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.seen.add(key)
        return super().__contains__(key)

    def __iter__(self):
        self.seen.add("*")
        return super().__iter__()

    def keys(self):
        self.seen.add("*")
        return super().keys()

    def items(self):
        self.seen.add("*")
        return super().items()

    def values(self):
        self.seen.add("*")
        return super().values()


def recorded_reads(data: dict, runtime: dict | None, component: str, operator) -> dict:
    """The keys ``resolve_component`` reads of the service, of its spec and of its
    metadata."""
    top, spec, meta = set(), set(), set()
    watched = Recording({**data, "spec": Recording(data.get("spec") or {}, spec),
                         "metadata": Recording(data.get("metadata") or {}, meta)}, top)
    resolve_component(watched, runtime, component, operator)
    return {"top": top, "spec": spec, "metadata": meta}


def services_of(root):
    if not root.is_dir():
        pytest.skip(f"{root} not present")
    loaded = load(root)
    catalog = loaded.result.catalog
    for service in catalog.services:
        runtime = catalog.runtime_for(service)
        data = runtime.data if runtime else None
        for component in components_of(service.data, data):
            yield service, data, component, loaded.operator


@pytest.mark.parametrize("root", [EXAMPLES, SHARED_OME], ids=["examples", "ome"])
def test_the_resolver_reads_only_what_its_memo_keys(root):
    checked = 0
    for service, runtime, component, operator in services_of(root):
        reads = recorded_reads(service.data, runtime, component, operator)
        assert reads["top"] <= {"spec", "metadata"}, service.path
        assert reads["spec"] <= {component, *READ_SPEC_PARTS}, (service.path, reads)
        assert reads["metadata"] <= {"annotations"}, (service.path, reads)
        checked += 1
    assert checked


@pytest.mark.parametrize("root", [EXAMPLES, SHARED_OME], ids=["examples", "ome"])
def test_a_run_with_the_memo_resolves_every_component_as_one_without_it(root):
    memo: dict = {}
    for service, runtime, component, operator in services_of(root):
        shared = resolve_component(service.data, runtime, component, operator, memo)
        assert shared == resolve_component(service.data, runtime, component, operator)


def service(name: str, model: str = "m", **lifecycle) -> dict:
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"deploymentMode": "OMENative", "runtime": {"name": "rt"},
                     "model": {"name": model},
                     "engine": {"minReplicas": 2, "lifecycle": lifecycle}}}


def test_services_differing_in_name_and_model_share_one_resolution():
    memo: dict = {}
    one = resolve_component(service("a", "llama"), RUNTIME, "engine", OPERATOR, memo)
    two = resolve_component(service("b", "qwen"), RUNTIME, "engine", OPERATOR, memo)
    assert two is one and len(memo) == 1
    assert one.fields["minReadySeconds"].value == 5


@pytest.mark.parametrize("other", [
    {"minReadySeconds": 20},
    {"minReadySeconds": 10.0},  # equal to 10 to Python, not the same setting
    {"minReadySeconds": 10, "restartPolicy": "RecreateInstanceOnPodRestart"},
], ids=["value", "type", "field"])
def test_a_service_differing_in_what_the_resolver_reads_has_its_own(other):
    memo: dict = {}
    base = resolve_component(service("a", minReadySeconds=10), RUNTIME, "engine", OPERATOR,
                             memo)
    changed = service("b", **other)
    found = resolve_component(changed, RUNTIME, "engine", OPERATOR, memo)
    assert found is not base and len(memo) == 2
    assert found == resolve_component(changed, RUNTIME, "engine", OPERATOR)
    assert type(found.fields["minReadySeconds"].value) is type(other["minReadySeconds"])


def test_a_service_in_another_runtime_or_with_other_annotations_has_its_own():
    memo: dict = {}
    resolve_component(service("a"), RUNTIME, "engine", OPERATOR, memo)
    other_runtime = {**RUNTIME, "metadata": {"name": "rt2"}}
    resolve_component(service("a"), other_runtime, "engine", OPERATOR, memo)
    annotated = service("a")
    annotated["metadata"]["annotations"] = {"ome.io/revision-history-limit": "3"}
    found = resolve_component(annotated, RUNTIME, "engine", OPERATOR, memo)
    assert found.fields["revisionHistoryLimit"].value == 3
    assert len(memo) == 3


def test_a_service_holding_what_is_not_plain_data_is_resolved_apart():
    """A date YAML read (unquoted) cannot be keyed: resolved anew, never shared."""
    memo: dict = {}
    dated = service("a")
    dated["metadata"]["annotations"] = {"built": datetime.date(2026, 12, 7)}
    found = resolve_component(dated, RUNTIME, "engine", OPERATOR, memo)
    assert found == resolve_component(dated, RUNTIME, "engine", OPERATOR)
    assert memo == {}
