"""The API double itself: the behaviours the fault tests rely on, checked over HTTP."""

from __future__ import annotations

import pytest
from wire_helpers import NS, make_pod

from omegitops.cluster.errors import Conflict, NotFound

POD = f"/api/v1/namespaces/{NS}/pods/a"


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
    with pytest.raises(Conflict, match="modified"):
        kube.replace_object({**b, "metadata": {**b["metadata"], "resourceVersion": "1"}})


def test_merge_patch_replaces_lists_and_strategic_merge_merges_them(kube):
    kube.create_pod(make_pod("a"))
    call(kube, "PATCH", POD, {"metadata": {"labels": {"k": "v"}}},
         content_type="application/merge-patch+json")
    strategic = call(kube, "PATCH", f"{POD}/status", {"status": {"conditions": [
        {"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}},
        content_type="application/strategic-merge-patch+json")
    again = call(kube, "PATCH", f"{POD}/status", {"status": {"conditions": [
        {"type": "A", "status": "False"}]}},
        content_type="application/strategic-merge-patch+json")
    assert [(c["type"], c["status"]) for c in strategic["status"]["conditions"]] == [
        ("A", "True"), ("B", "True")]
    assert [(c["type"], c["status"]) for c in again["status"]["conditions"]] == [
        ("A", "False"), ("B", "True")]
    merged = call(kube, "PATCH", f"{POD}/status", {"status": {"conditions": [
        {"type": "C", "status": "False"}]}}, content_type="application/merge-patch+json")
    assert [c["type"] for c in merged["status"]["conditions"]] == ["C"]
    assert merged["metadata"]["labels"] == {"k": "v"}


def test_a_patch_on_the_object_cannot_touch_status(kube):
    kube.create_pod(make_pod("a"))
    patched = call(kube, "PATCH", POD, {"status": {"phase": "Running"}},
                   content_type="application/merge-patch+json")
    assert patched["status"]["phase"] == "Pending"


def test_unknown_paths_and_namespaced_objects_without_namespace_are_404(kube):
    with pytest.raises(NotFound):
        call(kube, "GET", "/apis/example.com/v1/widgets")
    with pytest.raises(NotFound):
        call(kube, "GET", "/api/v1/pods/a")
    with pytest.raises(NotFound):
        call(kube, "GET", "/apis/nothing.io/v1")


def test_the_request_log_is_bounded(api, kube):
    api.requests = type(api.requests)(maxlen=3)
    for _ in range(5):
        kube.list_pods()
    assert len(api.requests) == 3
