"""The pods of tests/test_api_rules_round4.py held to the real API server, case by case:
each case's rendered pods are created as a server-side dry run, the API server refuses
them, and among the fields it names is the one ``validate`` tells the user to fix (the
server's path without its container and list indices). The service as it is, before a
case changes it, is taken by both.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request

import pytest

from omegitops.manifests.load import load
from omegitops.manifests.plannable import component_errors
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.operator import parse_operator_values
from omegitops.render.resolve import resolve_component
from omegitops.render.templates import ome_pod_metadata, render_templates, revision_name
from tests.conftest import RUNTIME
from tests.render.test_api_rules import service_with
from tests.render.test_api_rules_round4 import CASES

NAMESPACE = "rendering-round4"


@pytest.fixture(scope="module")
def namespace(control_plane):
    control_plane.create_namespace(NAMESPACE, wait=True)
    control_plane.wait_for(lambda: control_plane.get("v1", "ServiceAccount", NAMESPACE,
                                                     "default"), 60, "default ServiceAccount")
    yield control_plane
    control_plane.delete("v1", "Namespace", None, NAMESPACE)


def _refusal(cp, pod: dict, resource: str = "pods") -> dict | None:
    """The API server's Status refusing a server-side dry run of ``pod``, or None."""
    request = urllib.request.Request(
        f"{cp.url}/api/v1/namespaces/{NAMESPACE}/{resource}?dryRun=All", method="POST",
        data=json.dumps(pod).encode(),
        headers={"Authorization": f"Bearer {cp.admin_token}",
                 "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context):
            return None
    except urllib.error.HTTPError as refused:
        return json.loads(refused.read())


def _fields(status: dict) -> set[str]:
    """The fields a Status names, without their indices and map keys."""
    causes = (status.get("details") or {}).get("causes") or []
    return {re.sub(r"\[[^\]]*\]", "", c.get("field") or "") for c in causes}


def _rendered(tmp_path, service: str):
    repo = tmp_path
    repo.mkdir()
    (repo / "runtime.yaml").write_text(RUNTIME)
    (repo / "svc.yaml").write_text(service.replace("namespace: demo",
                                                   f"namespace: {NAMESPACE}"))
    loaded = load(repo)
    isvc = next(m for m in loaded.repo.manifests if m.id.kind == "InferenceService")
    runtime = next(m for m in loaded.repo.manifests if m.id.kind != "InferenceService")
    lifecycle = resolve_component(isvc.data, runtime.data, "engine", parse_operator_values({}))
    templates = render_templates(isvc.data, runtime.data, lifecycle)
    name = isvc.data["metadata"]["name"]
    spec = PodSpecInput(NAMESPACE, name, "engine", revision_name(name, "engine", templates),
                        templates, lifecycle.worker_size, lifecycle.shape == "gang",
                        ome_pod_metadata(isvc.data, runtime.data, "engine"))
    return component_errors(isvc, runtime, lifecycle), instance_pods(spec, 0, 1)


def test_the_service_as_it_is_is_taken_by_both(namespace, tmp_path):
    errors, pods = _rendered(tmp_path / "as-it-is", service_with({}))
    assert not errors
    assert [_refusal(namespace, pod) for pod in pods] == [None] * len(pods)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_api_server_refuses_each_case_at_the_field_validate_names(namespace, tmp_path,
                                                                      case):
    engine, _, field = CASES[case]
    errors, pods = _rendered(tmp_path / "repo", service_with(engine))
    assert any(f"; fix {field} in" in e.message for e in errors), [e.message for e in errors]
    status = _refusal(namespace, pods[0])
    assert status is not None, f"{case}: the API server takes the pod validate refuses"
    if status.get("code") == 403:
        # Refused by admission before validation (the ServiceAccount plugin looks the
        # account up): the same spec in a PodTemplate meets validation alone.
        status = _refusal(namespace, {
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": "refused", "namespace": NAMESPACE},
            "template": {"metadata": {"labels": pods[0]["metadata"].get("labels") or {}},
                         "spec": pods[0]["spec"]}}, "podtemplates")
        assert status is not None, f"{case}: the API server takes the pod template"
    fields = _fields(status)
    assert any(f == f"spec.{field}" or f.endswith(f".{field}") for f in fields), \
        f"{case}: validate says {field}, the API server {status.get('code')} " \
        f"{status.get('message')}"

