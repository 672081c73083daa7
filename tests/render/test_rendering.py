"""Pods rendered as OME renders them: its labels, its merge keys, its node selectors,
the InferenceService's own labels and annotations; and the catalogue's routers find
their backends among the pods omegitops renders.

The merge keys are checked against the real API server's strategic merge patch in
``tests/controlplane/test_api_server_rendering.py``; these tests hold the rules OME's merge code
adds around the patch (base.go, engine.go, MergeNodeSelector) one by one.
"""

from __future__ import annotations

import copy
import re

import pytest

from omegitops.manifests.load import load
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.operator import parse_operator_values
from omegitops.render.patchkeys import merge_key, table
from omegitops.render.resolve import resolve_component
from omegitops.render.templates import ome_pod_metadata, render_templates, revision_name
from tests.conftest import SHARED_OME

RUNTIME = {
    "apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
    "metadata": {"name": "srt-demo"},
    "spec": {
        "nodeSelector": {"pool": "gpu", "zone": "a"},
        "engineConfig": {
            "nodeSelector": {"pool": "engine-pool"},
            "imagePullSecrets": [{"name": "runtime-registry"}],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            "runner": {
                "name": "ome-container", "image": "sglang:v1",
                "ports": [{"containerPort": 8080, "name": "http1", "protocol": "TCP"}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                "env": [{"name": "A", "value": "1"}],
            },
        },
        "routerConfig": {"runner": {"name": "router", "image": "router:v1"}},
    },
}


def service(**engine):
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"deploymentMode": "OMENative", "runtime": {"name": "srt-demo"},
                     "model": {"name": "llama-3-2-1b"},
                     "engine": {"minReplicas": 1, **engine}}}


def templates_of(isvc, runtime=RUNTIME, component="engine"):
    lifecycle = resolve_component(isvc, runtime, component, parse_operator_values({}))
    return render_templates(isvc, runtime, lifecycle), lifecycle


def pods_of(isvc, runtime=RUNTIME, component="engine"):
    templates, lifecycle = templates_of(isvc, runtime, component)
    name = isvc["metadata"]["name"]
    spec = PodSpecInput("ns", name, component, revision_name(name, component, templates),
                        templates, lifecycle.worker_size, lifecycle.shape == "gang",
                        ome_pod_metadata(isvc, runtime, component))
    return instance_pods(spec, 0, 1)


def test_the_merge_keys_are_core_v1s():
    """The table behind the merge says what core/v1 says (derived from the API server's
    OpenAPI; the control-plane test derives it again)."""
    pod, container = "io.k8s.api.core.v1.PodSpec", "io.k8s.api.core.v1.Container"
    assert merge_key(container, "volumeMounts") == "mountPath"
    assert merge_key(container, "ports") == "containerPort"
    assert merge_key(container, "env") == "name"
    assert merge_key(pod, "imagePullSecrets") == "name"
    assert merge_key(pod, "volumes") == "name"
    assert merge_key(pod, "containers") == "name"
    assert merge_key(pod, "tolerations") is None  # replaced whole
    assert merge_key(container, "args") is None
    assert len(table()) > 40


def test_a_mount_the_service_replaces_is_one_mount_at_its_path():
    """Before: merged by name, the service's /dev/shm mount was a second mount at the
    same path, which the API server refuses (mountPath: must be unique)."""
    (pod,) = pods_of(service(runner={"volumeMounts": [
        {"name": "shm-big", "mountPath": "/dev/shm"}]}))
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "shm-big", "mountPath": "/dev/shm"}]


def test_a_port_the_service_names_again_merges_on_its_number():
    (pod,) = pods_of(service(runner={"ports": [{"containerPort": 8080, "name": "http"}]}))
    assert pod["spec"]["containers"][0]["ports"] == [{"containerPort": 8080, "name": "http"}]


def test_image_pull_secrets_are_merged_not_replaced():
    (pod,) = pods_of(service(imagePullSecrets=[{"name": "team-registry"}]))
    # In the patch's order first, as the API server's strategic merge patch puts them.
    assert pod["spec"]["imagePullSecrets"] == [{"name": "team-registry"},
                                               {"name": "runtime-registry"}]


def test_tolerations_are_replaced_whole_as_the_patch_does():
    runtime = copy.deepcopy(RUNTIME)
    runtime["spec"]["engineConfig"]["tolerations"] = [{"key": "a", "operator": "Exists"}]
    (pod,) = pods_of(service(tolerations=[{"key": "b", "operator": "Exists"}]), runtime)
    assert pod["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_the_runtimes_node_selector_reaches_engine_pods_and_the_service_wins():
    """OME's MergeNodeSelector: the runtime's spec.nodeSelector over the component's own,
    the service's component selector over both."""
    (pod,) = pods_of(service(nodeSelector={"zone": "b"}))
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "zone": "b"}
    (pod,) = pods_of(service())
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "zone": "a"}


def test_the_runtimes_node_selector_stays_off_router_pods():
    isvc = service()
    isvc["spec"]["router"] = {"minReplicas": 1}
    (pod,) = pods_of(isvc, component="router")
    assert "nodeSelector" not in pod["spec"]


def test_every_pod_carries_omes_labels_and_annotations():
    (pod,) = pods_of(service())
    labels = pod["metadata"]["labels"]
    assert labels["component"] == "engine"
    assert labels["ome.io/inferenceservice"] == "svc"
    assert labels["serving-runtime"] == "srt-demo"
    assert labels["fine-tuned-serving"] == "false"
    assert labels["base-model-name"] == "llama-3-2-1b"
    assert labels["base-model-type"] == "Serving"
    assert pod["metadata"]["annotations"]["ome.io/serving-runtime"] == "srt-demo"


def test_omes_labels_are_not_part_of_the_revision():
    """They name the component, not its template: adding them must not roll a fleet."""
    templates, _ = templates_of(service())
    assert "component" not in templates["default"]["metadata"]["labels"]


def test_the_services_labels_and_annotations_reach_its_pods():
    isvc = service(labels={"team": "engine-team"}, annotations={"note": "component"})
    isvc["metadata"]["labels"] = {"team": "inference", "cost-center": "42"}
    isvc["metadata"]["annotations"] = {
        "note": "service", "owner": "ml-platform",
        "kubectl.kubernetes.io/last-applied-configuration": "{...}"}
    (pod,) = pods_of(isvc)
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["team"] == "engine-team" and labels["cost-center"] == "42"
    assert annotations["note"] == "component" and annotations["owner"] == "ml-platform"
    assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations


def test_a_gang_labels_its_ranks_as_leaderworkerset_does():
    pods = pods_of(service(leader={}, worker={"size": 2}))
    ranks = {p["metadata"]["name"]: p["metadata"]["labels"][
        "leaderworkerset.sigs.k8s.io/worker-index"] for p in pods}
    assert ranks == {"svc-engine-0-leader-0": "0", "svc-engine-0-worker-0": "1",
                     "svc-engine-0-worker-1": "2"}


# -- the catalogue's routers --------------------------------------------------------------

_SELECTOR = re.compile(r"--(?:prefill-|decode-)?selector[ =]?\s*$")


def _selectors(router_template: dict) -> list[str]:
    """The label selectors a router container is given (``--selector X`` in its args or
    inside a shell command)."""
    found = []
    for container in router_template["spec"].get("containers") or []:
        words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
        for position, word in enumerate(words):
            for match in re.finditer(r"--(?:prefill-|decode-)?selector[ =]+(\S+(?: \S+=\S+)*)",
                                     word):
                found.append(match.group(1))
            if _SELECTOR.search(word) and position + 1 < len(words):
                found.append(words[position + 1])
    return found


def _matches(selector: str, labels: dict[str, str], isvc: str) -> bool:
    for term in re.split(r"[ ,]+", selector.strip()):
        key, _, value = term.partition("=")
        value = re.sub(r"\$[({]INFERENCESERVICE_NAME[)}]", isvc, value)
        if labels.get(key) != value:
            return False
    return True


@pytest.fixture(scope="module")
def catalogue_runtimes():
    if not SHARED_OME.is_dir():
        pytest.skip("../shared/ome not present")
    repo = load(SHARED_OME).repo
    return [m for m in repo.manifests if m.id.kind in ("ServingRuntime", "ClusterServingRuntime")]


def test_every_catalogue_routers_selector_finds_the_pods_it_routes_to(catalogue_runtimes):
    """186 router configs of the catalogue discover their backends by
    ``component=engine,ome.io/inferenceservice=$(INFERENCESERVICE_NAME)`` (or decoder, or
    the leaders of a gang): for a service of each such runtime, every selector picks an
    entry pod (a single pod or a gang's leader) of the service's engine or decoder as
    omegitops renders them."""
    checked = 0
    for runtime in catalogue_runtimes:
        spec = runtime.data.get("spec") or {}
        if not isinstance(spec.get("routerConfig"), dict):
            continue
        isvc = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                "metadata": {"name": "chat", "namespace": "ns"},
                "spec": {"runtime": {"name": runtime.id.name}, "model": {"name": "m"},
                         "router": {}, "engine": {},
                         **({"decoder": {}} if "decoderConfig" in spec else {})}}
        backends = [pod for component in ("engine", "decoder") if component in isvc["spec"]
                    for pod in pods_of(isvc, runtime.data, component)
                    if pod["metadata"]["labels"].get("ome.io/entry") == "true"]
        templates, _ = templates_of(isvc, runtime.data, "router")
        selectors = {s for t in templates.values() for s in _selectors(t)}
        for selector in selectors:
            chosen = [p for p in backends if _matches(selector, p["metadata"]["labels"], "chat")]
            assert chosen, f"{runtime.path}: {selector!r} selects none of its pods"
            checked += 1
    assert checked >= 186, checked


# -- what the API server refuses, validate refuses ----------------------------------------

TWO_MOUNTS = """
  engine:
    minReplicas: 1
    runner:
      volumeMounts:
        - {name: a, mountPath: /data}
        - {name: b, mountPath: /data}
    volumes:
      - {name: a, emptyDir: {}}
      - {name: b, emptyDir: {}}
"""


@pytest.mark.parametrize("engine, refused", [
    (TWO_MOUNTS, "mount path in container ome-container '/data' twice"),
    ("""
  engine:
    minReplicas: 1
    runner:
      ports:
        - {name: http, containerPort: 8080}
        - {name: http, containerPort: 8081}
""", "port name in container ome-container 'http' twice"),
    ("""
  engine:
    minReplicas: 1
    volumes:
      - {name: a, emptyDir: {}}
      - {name: a, hostPath: {path: /x}}
""", "volume name 'a' twice"),
])
def test_validate_refuses_what_the_api_server_refuses_as_duplicates(tmp_path, cli, engine,
                                                                  refused):
    from tests.conftest import RUNTIME, SERVICE, write_repo

    service = SERVICE.split("  engine:\n")[0] + engine.lstrip("\n")
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": service})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1, out + err
    assert refused in out + err and "Duplicate value" in out + err
    assert "svc.yaml" in out + err


def test_validate_refuses_a_model_name_no_pod_label_can_hold(tmp_path, cli):
    """OME labels the pods with the model's name: a label value is 63 characters at most."""
    from tests.conftest import RUNTIME, SERVICE, write_repo

    service = SERVICE.replace("name: small-model", f"name: {'m' * 70}")
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": service})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1, out + err
    assert "label base-model-name" in out + err
