"""Rendering held to the real API server: its merge metadata, its strategic merge patch,
its validation of every pod omegitops renders from OME's catalogue and the examples.

- The merge table (``omegitops/lifecycle/podspec-patch.json``) is what the API server
  publishes at ``/openapi/v2``. ``OMEGITOPS_REGENERATE=1`` writes it from there.
- omegitops' merge of a service's component over its runtime's config gives what the
  API server's own strategic merge patch gives (OME merges with that patch): a
  PodTemplate holding the runtime's layer, patched (dry run) with the service's.
- Every pod rendered from the catalogue (every runtime, and every sample service) and
  from ``examples/`` is created as a server-side dry run, and the API server accepts it
  exactly when ``validate`` accepts the component.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from omegitops.lifecycle.instance import PodSpecInput, instance_pods
from omegitops.lifecycle.operator import parse_operator_values
from omegitops.lifecycle.patchkeys import CONTAINER, TABLE_FILE, table_from_openapi
from omegitops.lifecycle.resolve import RUNTIME_CONFIG, resolve_component
from omegitops.lifecycle.templates import (
    MAIN_CONTAINER,
    _pod_part,
    merge,
    ome_pod_metadata,
    render_templates,
    revision_name,
)
from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.plannable import component_errors

SHARED_OME = REPO_ROOT.parent / "shared" / "ome"
EXAMPLES = REPO_ROOT / "examples"
NAMESPACE = "rendering"
TABLE = REPO_ROOT / "omegitops" / "lifecycle" / TABLE_FILE


def test_the_merge_table_is_what_the_api_server_publishes(control_plane):
    answer = control_plane.admin.call_api("/openapi/v2", "GET", auth_settings=["BearerToken"],
                                           _preload_content=False)
    published = table_from_openapi(json.loads(answer[0].data))
    committed = json.loads(TABLE.read_text())
    if os.environ.get("OMEGITOPS_REGENERATE") == "1":
        published["source"] = committed["source"]
        TABLE.write_text(json.dumps(published, indent=1) + "\n")
    assert published["definitions"] == committed["definitions"]


@pytest.fixture(scope="module")
def namespace(control_plane):
    control_plane.create_namespace(NAMESPACE, wait=True)
    # The default ServiceAccount the pods run as, made by the controller-manager.
    control_plane.wait_for(lambda: control_plane.get("v1", "ServiceAccount", NAMESPACE,
                                                     "default"), 60, "default ServiceAccount")
    yield control_plane
    control_plane.delete("v1", "Namespace", None, NAMESPACE)


@pytest.fixture(scope="module")
def catalogue():
    if not SHARED_OME.is_dir():
        pytest.skip("../shared/ome not present")
    return load(SHARED_OME)


def _layers(config: dict) -> dict[str, tuple[dict, dict]]:
    """(pod spec fields, runner) of a component config and of its leader and worker."""
    out = {}
    for part, layer in (("component", config), ("leader", config.get("leader")),
                        ("worker", config.get("worker"))):
        if isinstance(layer, dict):
            spec, _, _ = _pod_part(layer)
            runner = layer.get("runner") if isinstance(layer.get("runner"), dict) else {}
            out[part] = (spec, runner)
    return out


def _pod_template(name: str, spec: dict, runner: dict) -> dict:
    spec = dict(spec)
    containers = [c for c in spec.pop("containers", None) or [] if isinstance(c, dict)]
    if runner:
        containers = [{**runner, "name": runner.get("name") or MAIN_CONTAINER}] + containers
    # The API server requires a container with an image; neither layer may have one.
    spec["containers"] = containers or [{"name": MAIN_CONTAINER, "image": "x"}]
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "template": {"spec": spec}}


def _patch_of(spec: dict, runner: dict) -> dict:
    patch = {k: v for k, v in spec.items() if v is not None}
    if runner:
        patch["containers"] = [{**runner, "name": runner.get("name") or MAIN_CONTAINER}] + \
            list(patch.get("containers") or [])
    return {"template": {"spec": patch}}


def test_the_merge_is_the_api_servers_strategic_merge_patch(namespace, catalogue):
    """Every layer a sample service sets over its runtime's, merged both ways."""
    api = k8s.CoreV1Api(namespace.admin)
    compared, differ = 0, []
    for item in resolved_components(catalogue):
        if item.runtime is None:
            continue
        component = item.lifecycle.component
        base_layers = _layers((item.runtime.data.get("spec") or {}).get(
            RUNTIME_CONFIG[component]) or {})
        over_layers = _layers((item.service.data.get("spec") or {}).get(component) or {})
        for part, (over_spec, over_runner) in over_layers.items():
            base_spec, base_runner = base_layers.get(part, ({}, {}))
            if not (over_spec or over_runner) or not (base_spec or base_runner):
                continue
            name = f"smp-{compared}"
            api.create_namespaced_pod_template(NAMESPACE, _pod_template(name, base_spec,
                                                                        base_runner))
            try:
                theirs = api.patch_namespaced_pod_template(
                    name, NAMESPACE, _patch_of(over_spec, over_runner), dry_run="All",
                    _content_type="application/strategic-merge-patch+json")
                ours_spec = merge(base_spec, over_spec)
                ours_runner = merge(base_runner, over_runner, CONTAINER) if (
                    base_runner or over_runner) else {}
                ours = api.create_namespaced_pod_template(
                    NAMESPACE, _pod_template(name, ours_spec, ours_runner), dry_run="All")
            finally:
                api.delete_namespaced_pod_template(name, NAMESPACE)
            sanitize = api.api_client.sanitize_for_serialization
            if sanitize(theirs.template.spec) != sanitize(ours.template.spec):
                differ.append(f"{item.service.path} {component} {part}")
            compared += 1
    assert compared >= 50
    assert not differ, differ


def _pods(service: dict, runtime: dict | None, component: str) -> list[dict]:
    lifecycle = resolve_component(service, runtime, component, parse_operator_values({}))
    templates = render_templates(service, runtime, lifecycle)
    name = service["metadata"]["name"]
    spec = PodSpecInput(NAMESPACE, name, component, revision_name(name, component, templates),
                        templates, lifecycle.worker_size, lifecycle.shape == "gang",
                        ome_pod_metadata(service, runtime, component))
    return instance_pods(spec, 0, 1)


def _refusal(api: k8s.CoreV1Api, pods: list[dict]) -> str | None:
    for pod in pods:
        try:
            api.create_namespaced_pod(NAMESPACE, pod, dry_run="All")
        except ApiException as refused:
            return json.loads(refused.body).get("message", refused.body)
    return None


def _runtime_services(root: Path) -> Path:
    """A repository of the catalogue's runtimes and a service of each, with every
    component the runtime configures."""
    import shutil

    shutil.copytree(SHARED_OME / "runtimes", root / "runtimes")
    services = root / "services"
    services.mkdir()
    catalogue = load(root)
    for number, runtime in enumerate(m for m in catalogue.repo.manifests
                                     if m.id.kind == "ClusterServingRuntime"):
        spec = runtime.data.get("spec") or {}
        components = [c for c, key in RUNTIME_CONFIG.items() if isinstance(spec.get(key), dict)]
        service = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                   "metadata": {"name": f"chat-{number}", "namespace": NAMESPACE},
                   "spec": {"runtime": {"name": runtime.id.name}, "model": {"name": "m"},
                            **{c: {} for c in components}}}
        (services / f"chat-{number}.yaml").write_text(yaml.safe_dump(service))
    return root


def _cases(catalogue, root: Path | None = None) -> list[tuple[str, object]]:
    """(what, resolved component) for every sample service of the catalogue and of the
    examples, and (given ``root``) a service of every catalogue runtime."""
    cases = [(f"{i.service.path} {i.lifecycle.component}", i)
             for i in resolved_components(catalogue)] + \
        [(f"examples/{i.service.path} {i.lifecycle.component}", i)
         for i in resolved_components(load(EXAMPLES))]
    if root is not None:
        cases += [(f"{i.runtime.path if i.runtime else i.service.path} {i.lifecycle.component}",
                   i) for i in resolved_components(load(_runtime_services(root)))]
    return cases


def test_the_api_server_takes_every_rendered_pod_that_validate_takes(namespace, catalogue,
                                                                   tmp_path):
    api = k8s.CoreV1Api(namespace.admin)
    disagree, taken = [], 0
    for what, item in _cases(catalogue, tmp_path / "runtimes-repo"):
        errors = component_errors(item.service, item.runtime, item.lifecycle)
        refusal = _refusal(api, _pods(item.service.data,
                                      item.runtime.data if item.runtime else None,
                                      item.lifecycle.component))
        if bool(errors) != bool(refusal):
            disagree.append(f"{what}: validate {[e.message for e in errors]}, "
                            f"API server {refusal!r}")
        taken += refusal is None
    assert not disagree, "\n".join(disagree)
    assert taken > 300


def test_examples_are_among_the_cases(catalogue):
    names = {what.split()[0] for what, _ in _cases(catalogue)}
    files = {f"examples/{p.relative_to(EXAMPLES)}" for p in (EXAMPLES / "services").rglob(
        "*.yaml") if any(d and d.get("kind") == "InferenceService"
                         for d in yaml.safe_load_all(Path(p).read_text()))}
    assert files <= names
