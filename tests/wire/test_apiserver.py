"""The API double itself: the behaviours the backend relies on, checked over HTTP."""

from __future__ import annotations

import pytest
from wire_helpers import NS, make_pod, make_replica

from omegitops.cluster.errors import Conflict, Invalid, NotFound
from omegitops.errors import ClusterError

POD = f"/api/v1/namespaces/{NS}/pods/a"
IREP = f"/apis/ome.io/v1beta1/namespaces/{NS}/inferencereplicas/llama-engine"


def call(kube, method: str, path: str, body=None, content_type: str = "application/json",
         **query):
    return kube.rest.request(method, path, what="test", body=body, content_type=content_type,
                             query=query)


def test_every_write_bumps_one_global_resource_version_and_no_op_writes_do_not(kube):
    a = kube.create_pod(make_pod("a"))
    b = kube.create_pod(make_pod("b"))
    assert int(b["metadata"]["resourceVersion"]) == int(a["metadata"]["resourceVersion"]) + 1
    same = kube.replace_object(a)
    assert same["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]


def test_generate_name(kube):
    pod = make_pod("x")
    pod["metadata"] = {"generateName": "job-", "namespace": NS}
    created = kube.create_pod(pod)
    assert created["metadata"]["name"].startswith("job-") and \
        len(created["metadata"]["name"]) == 9


def test_json_patch_with_test_and_add(kube):
    kube.create_pod(make_pod("a"))
    patched = call(kube, "PATCH", POD, [
        {"op": "test", "path": "/spec/containers/0/name", "value": "main"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:9"},
        {"op": "add", "path": "/metadata/labels/x~1y", "value": "1"}],
        content_type="application/json-patch+json")
    assert patched["spec"]["containers"][0]["image"] == "busybox:9"
    assert patched["metadata"]["labels"] == {"x/y": "1"}
    with pytest.raises(Invalid, match="test failed"):
        call(kube, "PATCH", POD, [{"op": "test", "path": "/spec/containers/0/name",
                                   "value": "nope"}],
             content_type="application/json-patch+json")


def test_merge_patch_replaces_lists_and_strategic_merges_them(kube):
    kube.create_pod(make_pod("a"))
    call(kube, "PATCH", POD, {"metadata": {"labels": {"k": "v"}}},
         content_type="application/merge-patch+json")
    strategic = call(kube, "PATCH", f"{POD}/status", {"status": {"conditions": [
        {"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}},
        content_type="application/strategic-merge-patch+json")
    assert [c["type"] for c in strategic["status"]["conditions"]] == ["A", "B"]
    deleted = call(kube, "PATCH", f"{POD}/status", {"status": {"conditions": [
        {"type": "A", "$patch": "delete"}]}},
        content_type="application/strategic-merge-patch+json")
    assert [c["type"] for c in deleted["status"]["conditions"]] == ["B"]
    merged = call(kube, "PATCH", f"{POD}/status", {"status": {"conditions": [
        {"type": "C", "status": "False"}]}}, content_type="application/merge-patch+json")
    assert [c["type"] for c in merged["status"]["conditions"]] == ["C"]


def test_a_patch_on_the_object_cannot_touch_status(kube):
    kube.create_pod(make_pod("a"))
    patched = call(kube, "PATCH", POD, {"status": {"phase": "Running"}},
                   content_type="application/merge-patch+json")
    assert patched["status"]["phase"] == "Pending"


def test_a_resource_version_in_a_patch_is_a_precondition(kube):
    pod = kube.create_pod(make_pod("a"))
    kube.patch_pod_images(NS, "a", {"main": "busybox:2"})
    with pytest.raises(Conflict):
        call(kube, "PATCH", POD, {"metadata": {"resourceVersion": pod["metadata"][
            "resourceVersion"], "labels": {"k": "v"}}},
             content_type="application/merge-patch+json")


def test_strategic_merge_on_a_custom_resource_is_unsupported_media_type(kube):
    kube.create_object(make_replica())
    with pytest.raises(ClusterError, match="415"):
        call(kube, "PATCH", IREP, {"spec": {"replicas": 1}},
             content_type="application/strategic-merge-patch+json")


def test_unknown_paths_and_namespaced_objects_without_namespace_are_404(kube):
    with pytest.raises(NotFound):
        call(kube, "GET", "/apis/example.com/v1/widgets")
    with pytest.raises(NotFound):
        call(kube, "GET", "/api/v1/pods/a")
    with pytest.raises(NotFound):
        call(kube, "GET", "/apis/nothing.io/v1")


def test_a_pod_with_finalizers_stays_after_its_grace(kube, api):
    kube.create_pod({**make_pod("a", node="n"), "metadata": {
        "name": "a", "namespace": NS, "finalizers": ["example.com/x"]}})
    kube.delete_pod(NS, "a", 0)
    assert kube.get_object("Pod", NS, "a")["metadata"]["deletionTimestamp"]
    assert api.finish_terminating() == 0


def test_the_request_log_is_bounded(api, kube):
    api.requests = type(api.requests)(maxlen=3)
    for _ in range(5):
        kube.list_pods()
    assert len(api.requests) == 3
