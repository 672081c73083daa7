"""Rendering held to the real API server: its merge metadata, its strategic merge patch,
its validation of every pod omegitops renders from OME's catalogue and the examples.

- The merge table (``omegitops/render/podspec-patch.json``) is what the API server
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
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.plannable import component_errors
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.operator import parse_operator_values
from omegitops.render.patchkeys import CONTAINER, TABLE_FILE, table_from_openapi
from omegitops.render.resolve import RUNTIME_CONFIG, resolve_component
from omegitops.render.templates import (
    MAIN_CONTAINER,
    _pod_part,
    merge,
    ome_pod_metadata,
    render_templates,
    revision_name,
)

SHARED_OME = REPO_ROOT.parent / "shared" / "ome"
EXAMPLES = REPO_ROOT / "examples"
NAMESPACE = "rendering"
TABLE = REPO_ROOT / "omegitops" / "render" / TABLE_FILE


def test_the_merge_table_is_what_the_api_server_publishes(control_plane):
    request = urllib.request.Request(f"{control_plane.url}/openapi/v2",
                                     headers={"Authorization": f"Bearer {control_plane.admin_token}"})
    context = ssl.create_default_context(cafile=str(control_plane.pki / "ca.crt"))
    with urllib.request.urlopen(request, timeout=30, context=context) as answer:
        published = table_from_openapi(json.loads(answer.read()))
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


def _override(spec: dict, runner: dict) -> tuple[dict, dict]:
    """What a service might set over a runtime layer, aimed at that layer's own items:
    its first env var, mount path and port again, and new ones beside them; a sidecar,
    pull secrets, tolerations, node selector, volumes and arguments."""
    env = (runner.get("env") or [{"name": "NEW"}])[0]
    mount = (runner.get("volumeMounts") or [{"mountPath": "/data"}])[0]
    port = (runner.get("ports") or [{"containerPort": 8080}])[0]
    over_runner = {
        "env": [{"name": env.get("name"), "value": "from-the-service"},
                {"name": "SERVICE_ONLY", "value": "1"}],
        "volumeMounts": [{"name": "svc-volume", "mountPath": mount.get("mountPath")}],
        "ports": [{"containerPort": port.get("containerPort"), "name": "svc-port"}],
        "args": ["--from-the-service"],
        "resources": {"limits": {"memory": "64Gi"}},
    }
    over_spec = {
        "imagePullSecrets": [{"name": "team-registry"}],
        "tolerations": [{"key": "team", "operator": "Exists"}],
        "nodeSelector": {"team": "a"},
        "volumes": [{"name": "svc-volume", "emptyDir": {}}],
        "containers": [{"name": "sidecar", "image": "busybox"}],
    }
    return over_spec, over_runner


def _call(cp, method: str, path: str, body: dict | None = None,
          content_type: str = "application/json") -> dict:
    """One request to the API server as admin, JSON both ways (the official client's
    typed models would refuse the catalogue's whole-number quantities)."""
    request = urllib.request.Request(
        f"{cp.url}{path}", method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {cp.admin_token}", "Content-Type": content_type})
    context = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as err:
        err.msg = f"{err.msg}: {err.read().decode(errors='replace')[:2000]}"
        raise


def _first_difference(theirs: object, ours: object, where: str = "") -> str:
    """Where two answers first differ, and how (for the failure message)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key) != ours.get(key):
                return _first_difference(theirs.get(key), ours.get(key), f"{where}.{key}")
    if isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours):
        for position, (one, other) in enumerate(zip(theirs, ours, strict=True)):
            if one != other:
                return _first_difference(one, other, f"{where}[{position}]")
    return f"{where}: patch {str(theirs)[:300]} / merge {str(ours)[:300]}"


def _spec_or_refusal(cp, method: str, path: str, body: dict,
                     content_type: str = "application/json") -> object:
    """The pod spec the API server answers with, or the fields it refuses (a patch can
    make an invalid pod as well as a merge: an env var given a value over a valueFrom)."""
    try:
        return _call(cp, method, path, body, content_type)["template"]["spec"]
    except urllib.error.HTTPError as refused:
        assert refused.code == 422, refused
        return ("refused", refused.msg.split("is invalid:", 1)[-1].split('","reason"')[0])


def test_the_merge_is_the_api_servers_strategic_merge_patch(namespace, catalogue):
    """Every layer of every catalogue runtime (component, leader, worker), with a service's
    overrides of its own items merged over it, both ways: omegitops' merge, and the API
    server's strategic merge patch of a PodTemplate (OME merges with that patch)."""
    templates = f"/api/v1/namespaces/{NAMESPACE}/podtemplates"
    compared, differ = 0, []
    for runtime in catalogue.repo.manifests:
        if runtime.id.kind not in ("ServingRuntime", "ClusterServingRuntime"):
            continue
        for key in RUNTIME_CONFIG.values():
            config = (runtime.data.get("spec") or {}).get(key)
            if not isinstance(config, dict):
                continue
            for part, (base_spec, base_runner) in _layers(config).items():
                if not base_runner:
                    continue
                over_spec, over_runner = _override(base_spec, base_runner)
                name = f"smp-{compared}"
                try:
                    _call(namespace, "POST", templates, _pod_template(name, base_spec,
                                                                      base_runner))
                except urllib.error.HTTPError as refused:
                    # A layer that is no pod by itself (a leader mounting volumes only
                    # its component level defines): nothing to patch.
                    assert refused.code == 422, refused
                    continue
                try:
                    # The runner is a field of its own in OME's specs, merged whatever its
                    # name: in a pod's list, the patch's runner carries the base's name.
                    named = {**over_runner, "name": base_runner.get("name") or MAIN_CONTAINER}
                    theirs = _spec_or_refusal(
                        namespace, "PATCH", f"{templates}/{name}?dryRun=All",
                        _patch_of(over_spec, named), "application/strategic-merge-patch+json")
                    ours = _spec_or_refusal(
                        namespace, "POST", f"{templates}?dryRun=All", _pod_template(
                            f"{name}-ours", merge(base_spec, over_spec),
                            merge(base_runner, over_runner, CONTAINER)))
                finally:
                    _call(namespace, "DELETE", f"{templates}/{name}")
                if theirs != ours:
                    differ.append(f"{runtime.path} {key} {part}: "
                                  f"{_first_difference(theirs, ours)}")
                compared += 1
    assert compared >= 100
    assert not differ, differ


def _pods(service: dict, runtime: dict | None, component: str) -> list[dict]:
    lifecycle = resolve_component(service, runtime, component, parse_operator_values({}))
    templates = render_templates(service, runtime, lifecycle)
    name = service["metadata"]["name"]
    spec = PodSpecInput(NAMESPACE, name, component, revision_name(name, component, templates),
                        templates, lifecycle.worker_size, lifecycle.shape == "gang",
                        ome_pod_metadata(service, runtime, component))
    return instance_pods(spec, 0, 1)


def _refusal(cp, pods: list[dict]) -> str | None:
    """The API server's message refusing the first of ``pods`` it refuses (a server-side
    dry run of each), or None."""
    for pod in pods:
        try:
            _call(cp, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", pod)
        except urllib.error.HTTPError as refused:
            return refused.msg
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
    disagree, taken = [], 0
    for what, item in _cases(catalogue, tmp_path / "runtimes-repo"):
        errors = component_errors(item.service, item.runtime, item.lifecycle)
        refusal = _refusal(namespace, _pods(item.service.data,
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


def test_validate_and_the_api_server_agree_on_each_refused_field(namespace, tmp_path):
    """The cases of tests/render/test_api_rules.py (and the service they change, as it is), one
    by one: the API server refuses the rendered pods exactly when validate refuses the
    component."""
    from tests.conftest import RUNTIME, SERVICE
    from tests.render.test_api_rules import CASES, service_with

    cases = {"as it is": SERVICE, **{case: service_with(engine)
                                     for case, (engine, _) in CASES.items()}}
    disagree = []
    for case, service in cases.items():
        repo = tmp_path / case.replace(" ", "-").replace("=", "eq")
        repo.mkdir()
        (repo / "runtime.yaml").write_text(RUNTIME)
        (repo / "svc.yaml").write_text(service.replace("namespace: demo", f"namespace: {NAMESPACE}"))
        loaded = load(repo)
        service_manifest = next(m for m in loaded.repo.manifests if m.id.kind == "InferenceService")
        runtime_manifest = next(m for m in loaded.repo.manifests if m.id.kind != "InferenceService")
        lifecycle = resolve_component(service_manifest.data, runtime_manifest.data, "engine",
                                      parse_operator_values({}))
        errors = component_errors(service_manifest, runtime_manifest, lifecycle)
        refusal = _refusal(namespace, _pods(service_manifest.data, runtime_manifest.data, "engine"))
        if bool(errors) != bool(refusal) or (case == "as it is") == bool(errors):
            disagree.append(f"{case}: validate {[e.message for e in errors]}, "
                            f"API server {refusal!r}")
    assert not disagree, "\n".join(disagree)
