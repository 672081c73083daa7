"""The reconcile shell on KubeCluster: constant LIST calls, and a whole CLI pass on the double."""

from __future__ import annotations

import json

import pytest
from apiserver import POD_GROUPS
from wire_helpers import EXAMPLES, NS, make_pod, make_replica

from omegitops.reconcile import MANAGED, observe

EXPECTED_LISTS = [
    "/api/v1/pods",
    "/apis/ome.io/v1beta1/inferencereplicas",
    "/apis/apps/v1/controllerrevisions",
    "/api/v1/services",
    "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
]


def _populate(api, components: int) -> None:
    """Per component: a replica, two pods, a revision, a Service and a PodGroup."""
    for n in range(components):
        isvc = f"svc{n}"
        labels = {**MANAGED, "ome.io/inferenceservice": isvc, "ome.io/component": "engine"}
        api.add(make_replica(f"{isvc}-engine", labels=labels))
        for i in range(2):
            api.add(make_pod(f"{isvc}-engine-{i}-default-0", labels=labels))
        meta = {"name": f"{isvc}-engine-0a1b2c3d", "namespace": NS, "labels": labels}
        api.add({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": meta,
                 "revision": 1, "data": {}})
        api.add({"apiVersion": "v1", "kind": "Service", "spec": {},
                 "metadata": {**meta, "name": f"{isvc}-engine"}})
        api.add({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "spec": {},
                 "metadata": {**meta, "name": f"{isvc}-engine-0"}})
    api.add(make_pod("unmanaged"))  # filtered out by the server, never listed to us


@pytest.mark.parametrize("components", [1, 10, 50])
def test_observe_makes_a_constant_number_of_list_calls(kube, api, components):
    api.serve(POD_GROUPS)
    _populate(api, components)
    seen = observe(kube)
    assert len(seen.replicas) == components
    assert sum(len(pods) for pods in seen.pods.values()) == 2 * components
    assert len(seen.podgroups) == components
    lists = api.calls("list")
    assert [r.path for r in lists] == EXPECTED_LISTS
    assert {r.query["labelSelector"] for r in lists} == {"app.kubernetes.io/managed-by=omegitops"}
    assert len(api.requests) == len(EXPECTED_LISTS) + 1  # and one discovery GET
    api.clear_log()
    observe(kube)
    assert len(api.requests) == len(EXPECTED_LISTS)  # discovery is remembered


def test_observe_without_pod_groups_skips_their_list(kube, api):
    seen = observe(kube)
    assert seen.podgroups is None
    assert [r.path for r in api.calls("list")] == EXPECTED_LISTS[:4]


@pytest.fixture
def kube_env(api, monkeypatch):
    monkeypatch.setenv("OMEGITOPS_KUBE_API", api.url)
    monkeypatch.setenv("OMEGITOPS_NAMESPACE", "omegitops-system")
    return api


def test_reconcile_examples_on_kube_creates_pods_and_replicas(cli, kube_env):
    api = kube_env
    code, out, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube")
    assert code == 0, err
    replicas = {r["metadata"]["name"]: r for r in api.objects("InferenceReplica")}
    assert "qwen3-0-6b-engine" in replicas and "llama-pd-router" in replicas
    for replica in replicas.values():
        assert replica["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "omegitops"
        assert replica["status"]["replicas"] == replica["spec"]["replicas"]
    pods = api.objects("Pod")
    assert {p["metadata"]["labels"]["ome.io/inferenceservice"] for p in pods} >= {
        "qwen3-0-6b", "deepseek-r1"}
    qwen = [p for p in pods if p["metadata"]["namespace"] == "qwen3-0-6b"]
    assert len(qwen) == replicas["qwen3-0-6b-engine"]["spec"]["replicas"]
    assert all({"conditionType": "ome.io/serving"} in p["spec"]["readinessGates"] for p in qwen)
    assert api.objects("Event") and api.objects("ControllerRevision")
    assert "qwen3-0-6b-engine" in out  # the replica table
    # One pass, few lists: observation did not grow with the seven components.
    assert len(api.calls("list")) <= 6
    # The Lease was taken in OMEGITOPS_NAMESPACE and released at the end.
    (lease,) = api.objects("Lease")
    assert lease["metadata"]["namespace"] == "omegitops-system"
    assert "holderIdentity" not in lease["spec"]


def test_a_second_pass_changes_no_pods(cli, kube_env):
    api = kube_env
    assert cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube")[0] == 0
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.objects("Pod")}
    api.clear_log()
    assert cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube")[0] == 0
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.objects("Pod")} == before
    assert not [r for r in api.requests if "/pods" in r.path and r.verb != "list"]


def test_get_irep_reads_through_kube(cli, kube_env):
    assert cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube")[0] == 0
    code, out, err = cli("get", "irep", "--cluster", "kube", "-o", "json")
    assert code == 0, err
    assert "qwen3-0-6b-engine" in {r["name"] for r in json.loads(out)}


def test_the_job_from_a_git_url_to_kube_and_back(cli, kube_env, tmp_path):
    """What the CronJob runs, end to end: clone a git URL, reconcile on the Kubernetes
    API (the double), commit the report and push it back."""
    import git

    api = kube_env
    source = tmp_path / "source"
    git.Repo.init(source, initial_branch="main")
    for path in sorted(EXAMPLES.rglob("*")):
        if path.is_file():
            target = source / "manifests" / path.relative_to(EXAMPLES)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    repo = git.Repo(source)
    repo.index.add([p.relative_to(source).as_posix() for p in source.rglob("*")
                    if p.is_file() and ".git" not in p.parts])
    repo.index.commit("the manifests")
    bare = tmp_path / "remote.git"
    repo.clone(bare, bare=True)
    url = bare.as_uri()
    code, _, err = cli("reconcile", "--repo", url, "--branch", "main", "--path", "manifests",
                       "--cluster", "kube", "--commit", "--push")
    assert code == 0, err
    assert "qwen3-0-6b-engine" in {r["metadata"]["name"] for r in api.objects("InferenceReplica")}
    head = git.Repo(bare).head.commit
    assert head.message.startswith("omegitops: first status report")
    assert {d.b_path for d in head.parents[0].diff(head)} == {"status/STATUS.md",
                                                                "status/status.json"}
