"""KubeCluster's pod calls against the API double: the HTTP requests and their effects."""

from __future__ import annotations

import pytest
from wire_helpers import NS, make_pod

from omegitops.cluster.errors import AlreadyExists, Invalid, NotFound
from omegitops.cluster.kube.events import images_patch


def test_create_pod_fills_metadata_and_pending(kube, api):
    pod = kube.create_pod(make_pod("a", labels={"app": "x"}))
    meta = pod["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"]
    assert pod["status"] == {"phase": "Pending"}
    assert [(r.method, r.path) for r in api.requests] == [
        ("POST", f"/api/v1/namespaces/{NS}/pods")]


def test_create_pod_twice_is_already_exists_naming_the_pod(kube):
    kube.create_pod(make_pod("a"))
    with pytest.raises(AlreadyExists, match=f"Pod/{NS}/a") as caught:
        kube.create_pod(make_pod("a"))
    assert caught.value.__cause__ is not None  # the HTTP error is chained


def test_list_pods_is_one_all_namespace_list_with_a_label_selector(kube, api):
    kube.create_pod(make_pod("a", labels={"app": "x", "tier": "1"}))
    kube.create_pod(make_pod("b", namespace="other", labels={"app": "x"}))
    kube.create_pod(make_pod("c", labels={"app": "y"}))
    api.clear_log()
    pods = kube.list_pods({"app": "x"})
    assert sorted(p["metadata"]["name"] for p in pods) == ["a", "b"]
    # Built-in list items come without kind/apiVersion; the backend puts them back.
    assert {(p["kind"], p["apiVersion"]) for p in pods} == {("Pod", "v1")}
    assert [(r.verb, r.path, r.query) for r in api.requests] == [
        ("list", "/api/v1/pods", {"labelSelector": "app=x", "limit": "500"})]


def test_delete_pod_with_grace_keeps_it_terminating_until_gone(kube, api):
    kube.create_pod(make_pod("a", node="node-0"))
    kube.delete_pod(NS, "a", grace_seconds=30)
    pod = kube.get_object("Pod", NS, "a")
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert api.calls("delete")[-1].query == {"gracePeriodSeconds": "30"}
    kube.delete_pod(NS, "a", grace_seconds=300)  # a second delete never extends the grace
    assert kube.get_object("Pod", NS, "a")["metadata"]["deletionTimestamp"] == \
        pod["metadata"]["deletionTimestamp"]
    with pytest.raises(AlreadyExists):  # the name stays taken while it terminates
        kube.create_pod(make_pod("a"))
    assert api.finish_terminating() == 1
    assert kube.get_object("Pod", NS, "a") is None


def test_delete_pod_without_grace_uses_the_pods_own_and_zero_removes_at_once(kube, api):
    kube.create_pod(make_pod("a", node="node-0", terminationGracePeriodSeconds=7))
    kube.delete_pod(NS, "a")
    assert "gracePeriodSeconds" not in api.calls("delete")[-1].query
    assert kube.get_object("Pod", NS, "a")["metadata"]["deletionGracePeriodSeconds"] == 7
    kube.create_pod(make_pod("b", node="node-0"))
    kube.delete_pod(NS, "b", grace_seconds=0)
    assert kube.get_object("Pod", NS, "b") is None


def test_delete_missing_pod_is_not_found(kube):
    with pytest.raises(NotFound, match=f"Pod/{NS}/nope"):
        kube.delete_pod(NS, "nope")


def test_set_pod_condition_patches_the_status_subresource(kube, api):
    kube.create_pod(make_pod("a"))
    api.clear_log()
    pod = kube.set_pod_condition(NS, "a", "ome.io/serving", True, "OMENative", "in rotation")
    (cond,) = pod["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "ome.io/serving", "True", "OMENative", "in rotation")
    assert pod["status"]["phase"] == "Pending"  # the rest of status is untouched
    patch = api.calls("patch")[-1]
    assert patch.path == f"/api/v1/namespaces/{NS}/pods/a/status"
    assert patch.content_type == "application/strategic-merge-patch+json"


def test_set_pod_condition_moves_transition_time_only_on_a_flip(kube, api):
    kube.create_pod(make_pod("a"))
    api.modify("Pod", NS, "a", lambda p: p["status"].update(conditions=[
        {"type": "Ready", "status": "False"},
        {"type": "ome.io/serving", "status": "True", "reason": "OMENative", "message": "old",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]))
    pod = kube.set_pod_condition(NS, "a", "ome.io/serving", True, "OMENative", "new")
    serving = [c for c in pod["status"]["conditions"] if c["type"] == "ome.io/serving"]
    assert serving[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert serving[0]["message"] == "new"
    assert [c["type"] for c in pod["status"]["conditions"]] == ["Ready", "ome.io/serving"]
    pod = kube.set_pod_condition(NS, "a", "ome.io/serving", False, "OMENative", "out")
    serving = [c for c in pod["status"]["conditions"] if c["type"] == "ome.io/serving"]
    assert serving[0]["status"] == "False"
    assert serving[0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"


def test_set_pod_condition_as_it_is_writes_nothing(kube, api):
    kube.create_pod(make_pod("a"))
    kube.set_pod_condition(NS, "a", "ome.io/serving", True, "OMENative", "in")
    api.clear_log()
    kube.set_pod_condition(NS, "a", "ome.io/serving", True, "OMENative", "in")
    assert [r.verb for r in api.requests] == ["get"]


def test_set_pod_condition_refuses_kubelet_conditions(kube):
    kube.create_pod(make_pod("a"))
    with pytest.raises(Invalid, match="kubelet"):
        kube.set_pod_condition(NS, "a", "Ready", True)


def test_patch_pod_images_changes_only_the_named_container(kube, api):
    kube.create_pod(make_pod("a"))
    pod = kube.patch_pod_images(NS, "a", {"main": "busybox:2"})
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"]] == [
        ("main", "busybox:2"), ("sidecar", "envoy:1")]
    patch = api.calls("patch")[-1]
    assert (patch.path, patch.content_type) == (
        f"/api/v1/namespaces/{NS}/pods/a", "application/strategic-merge-patch+json")


def test_patch_pod_images_moves_labels_in_the_same_patch(kube, api):
    kube.create_pod(make_pod("a", labels={"ome.io/revision": "svc-engine-00000001"}))
    api.clear_log()
    pod = kube.patch_pod_images(NS, "a", {"main": "busybox:2"},
                                {"ome.io/revision": "svc-engine-00000002"})
    assert pod["metadata"]["labels"]["ome.io/revision"] == "svc-engine-00000002"
    assert pod["spec"]["containers"][0]["image"] == "busybox:2"
    assert len(api.calls("patch")) == 1  # one write: never new images under the old label
    assert images_patch({"main": "busybox:2"}, {"ome.io/revision": "svc-engine-00000002"}) == {
        "metadata": {"labels": {"ome.io/revision": "svc-engine-00000002"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}


def test_patch_pod_images_of_an_unknown_container_is_invalid(kube):
    kube.create_pod(make_pod("a"))
    with pytest.raises(Invalid, match="may not add or remove containers"):
        kube.patch_pod_images(NS, "a", {"nope": "busybox:2"})


def test_replace_pod_may_change_images_only(kube):
    pod = kube.create_pod(make_pod("a"))
    pod["spec"]["containers"][0]["image"] = "busybox:3"
    assert kube.replace_object(pod)["spec"]["containers"][0]["image"] == "busybox:3"
    pod = kube.get_object("Pod", NS, "a")
    pod["spec"]["hostNetwork"] = True
    with pytest.raises(Invalid, match="may not change fields"):
        kube.replace_object(pod)
