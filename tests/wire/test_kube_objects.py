"""KubeCluster's other kinds against the API double: InferenceReplica, ControllerRevision,
Service, PodGroup, Events and the InferenceService status."""

from __future__ import annotations

import pytest
from apiserver import INFERENCE_SERVICES, POD_GROUPS
from wire_helpers import NS, make_replica

from omegitops.cluster.errors import AlreadyExists, Conflict, Invalid, NotFound

MANAGED = {"app.kubernetes.io/managed-by": "omegitops"}
IREP_PATH = f"/apis/ome.io/v1beta1/namespaces/{NS}/inferencereplicas"


def test_inference_replica_create_replace_and_status(kube, api):
    created = kube.create_object({**make_replica(labels=MANAGED), "status": {"replicas": 9}})
    assert created["metadata"]["generation"] == 1
    assert "status" not in created  # a create cannot set the status subresource
    created["spec"]["replicas"] = 3
    replaced = kube.replace_object(created)
    assert replaced["spec"]["replicas"] == 3
    assert replaced["metadata"]["generation"] == 2
    replaced["status"] = {"replicas": 3, "readyReplicas": 1, "observedGeneration": 2}
    with_status = kube.replace_status(replaced)
    assert with_status["status"]["readyReplicas"] == 1
    assert with_status["metadata"]["generation"] == 2  # status writes leave generation alone
    assert [(r.method, r.path) for r in api.requests] == [
        ("POST", IREP_PATH), ("PUT", f"{IREP_PATH}/llama-engine"),
        ("PUT", f"{IREP_PATH}/llama-engine/status")]


def test_replace_object_ignores_status_and_replace_status_ignores_spec(kube):
    replica = kube.create_object(make_replica())
    replica["status"] = {"replicas": 2}
    replica = kube.replace_status(replica)
    replica["spec"]["replicas"] = 5
    replica["status"] = {"replicas": 7}
    replaced = kube.replace_object(replica)
    assert (replaced["spec"]["replicas"], replaced["status"]["replicas"]) == (5, 2)
    replaced["spec"]["replicas"] = 1
    replaced["status"] = {"replicas": 4}
    status = kube.replace_status(replaced)
    assert (status["spec"]["replicas"], status["status"]["replicas"]) == (5, 4)


def test_stale_resource_version_is_a_conflict_and_is_not_retried(kube, api, sleeps):
    replica = kube.create_object(make_replica())
    fresh = kube.replace_object({**replica, "spec": {**replica["spec"], "replicas": 3}})
    with pytest.raises(Conflict, match=f"InferenceReplica/{NS}/llama-engine: .*modified"):
        kube.replace_object(replica)
    with pytest.raises(Conflict):
        kube.replace_status({**replica, "status": {"replicas": 1}})
    assert sleeps == [] and len(api.calls("update")) == 3
    assert kube.replace_status({**fresh, "status": {"replicas": 1}})["status"]["replicas"] == 1


def test_replace_without_resource_version_is_invalid(kube):
    replica = kube.create_object(make_replica())
    del replica["metadata"]["resourceVersion"]
    with pytest.raises(Invalid, match="resourceVersion"):
        kube.replace_object(replica)


def test_the_crd_schema_refuses_a_bad_replica_and_prunes_unknown_spec_fields(kube):
    with pytest.raises(Invalid, match="spec.component"):
        kube.create_object({**make_replica(), "spec": {**make_replica()["spec"],
                                                       "component": "sidecar"}})
    created = kube.create_object({**make_replica(), "spec": {**make_replica()["spec"],
                                                             "surprise": 1}})
    assert "surprise" not in created["spec"]


def test_columnar_instance_rows_survive_the_crd(kube):
    replica = kube.create_object(make_replica())
    rows = {"encoding": "ColumnarV2", "columns": ["index", "phase"], "rows": [[0, "Ready"]]}
    replica["status"] = {"replicas": 1, "instances": rows,
                         "rolloutHold": {"gate": "Partition", "reason": "Staged", "target": None}}
    stored = kube.replace_status(replica)
    assert stored["status"]["instances"] == rows
    assert stored["status"]["rolloutHold"]["target"] is None


def test_list_objects_filters_by_labels_in_one_call(kube, api):
    kube.create_object(make_replica("a-engine", labels=MANAGED))
    kube.create_object(make_replica("b-engine", namespace="other", labels=MANAGED))
    kube.create_object(make_replica("c-engine"))
    api.clear_log()
    found = kube.list_objects("InferenceReplica", MANAGED)
    assert sorted(r["metadata"]["name"] for r in found) == ["a-engine", "b-engine"]
    assert [(r.path, r.query) for r in api.requests] == [
        ("/apis/ome.io/v1beta1/inferencereplicas",
         {"labelSelector": "app.kubernetes.io/managed-by=omegitops", "limit": "500"})]


def test_get_object_is_none_when_absent(kube):
    assert kube.get_object("InferenceReplica", NS, "nope-engine") is None
    assert kube.get_object("Node", None, "node-0") is None


def test_controller_revision_create_list_delete(kube, api):
    revision = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "llama-engine-0a1b2c3d", "namespace": NS, "labels": MANAGED},
                "data": {"spec": {"template": {}}}, "revision": 1}
    kube.create_object(revision)
    with pytest.raises(AlreadyExists, match=f"ControllerRevision/{NS}/llama-engine-0a1b2c3d"):
        kube.create_object(revision)
    (listed,) = kube.list_objects("ControllerRevision", MANAGED)
    assert (listed["kind"], listed["apiVersion"], listed["revision"]) == (
        "ControllerRevision", "apps/v1", 1)
    kube.delete_object("ControllerRevision", NS, "llama-engine-0a1b2c3d")
    assert kube.list_objects("ControllerRevision") == []
    assert api.calls("delete")[-1].path == \
        f"/apis/apps/v1/namespaces/{NS}/controllerrevisions/llama-engine-0a1b2c3d"


def test_service_create_replace_and_delete(kube):
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "llama-engine", "namespace": NS, "labels": MANAGED},
               "spec": {"selector": {"app": "llama"}, "ports": [{"port": 8080}]}}
    created = kube.create_object(service)
    created["spec"]["ports"] = [{"port": 9090}]
    assert kube.replace_object(created)["spec"]["ports"] == [{"port": 9090}]
    kube.delete_object("Service", NS, "llama-engine")
    with pytest.raises(NotFound, match=f"Service/{NS}/llama-engine"):
        kube.delete_object("Service", NS, "llama-engine")


def test_delete_with_finalizers_leaves_the_object_terminating(kube):
    replica = kube.create_object({**make_replica(), "metadata": {
        **make_replica()["metadata"], "finalizers": ["example.com/hold"]}})
    kube.delete_object("InferenceReplica", NS, "llama-engine")
    terminating = kube.get_object("InferenceReplica", NS, "llama-engine")
    assert terminating["metadata"]["deletionTimestamp"]
    terminating["metadata"]["finalizers"] = []
    kube.replace_object(terminating)
    assert kube.get_object("InferenceReplica", NS, "llama-engine") is None
    assert replica["metadata"]["uid"]


def test_pod_groups_follow_discovery(kube, api):
    assert kube.has_kind("PodGroup") is False
    with pytest.raises(NotFound, match="PodGroup"):
        kube.list_objects("PodGroup")
    api.serve(POD_GROUPS)
    assert kube.has_kind("PodGroup") is False  # discovery is cached for the run
    kube._served.clear()
    assert kube.has_kind("PodGroup") is True
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "llama-engine-0", "namespace": NS, "labels": MANAGED},
             "spec": {"minMember": 2}}
    kube.create_object(group)
    (listed,) = kube.list_objects("PodGroup", MANAGED)
    assert listed["spec"]["minMember"] == 2
    assert [r.path for r in api.calls("discovery")] == [
        "/apis/scheduling.x-k8s.io/v1alpha1", "/apis/scheduling.x-k8s.io/v1alpha1"]


def test_built_in_kinds_need_no_discovery(kube, api):
    assert all(kube.has_kind(k) for k in ("Pod", "Service", "Event", "Node",
                                          "ControllerRevision"))
    assert kube.has_kind("InferenceReplica") is True
    assert kube.has_kind("Nonsense") is False
    assert [r.path for r in api.requests] == ["/apis/ome.io/v1beta1"]


EVENT = {"involvedObject": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                            "namespace": NS, "name": "llama"},
         "metadata": {"namespace": NS, "labels": MANAGED},
         "type": "Normal", "reason": "InstanceReady",
         "message": "OMENative component=engine instance=0 ready"}


def test_a_repeated_event_is_aggregated_with_a_get_and_a_patch(kube, api):
    first = kube.record_event(EVENT)
    assert (first["count"], first["reason"]) == (1, "InstanceReady")
    assert first["firstTimestamp"] == first["lastTimestamp"]
    api.clear_log()
    second = kube.record_event(EVENT)
    assert second["count"] == 2 and second["metadata"]["name"] == first["metadata"]["name"]
    assert [r.verb for r in api.requests] == ["get", "patch"]
    assert kube.record_event(EVENT)["count"] == 3
    other = kube.record_event({**EVENT, "message": "something else"})
    assert other["count"] == 1 and other["metadata"]["name"] != first["metadata"]["name"]
    events = kube.list_objects("Event", MANAGED)
    assert sorted(e["count"] for e in events) == [1, 3]


def test_events_can_be_selected_by_field(kube):
    kube.record_event(EVENT)
    kube.record_event({**EVENT, "reason": "InstanceFailed", "type": "Warning"})
    found = kube.rest.request("GET", "/api/v1/events", what="events",
                              query={"fieldSelector": "reason=InstanceFailed,"
                                                      "involvedObject.name=llama"})
    assert [e["reason"] for e in found["items"]] == ["InstanceFailed"]
    with pytest.raises(Invalid, match="field label not supported"):
        kube.rest.request("GET", "/api/v1/events", what="events",
                          query={"fieldSelector": "spec.nope=1"})


def test_label_selector_forms(kube):
    for name, labels in (("a", {"tier": "gpu", "zone": "1"}), ("b", {"tier": "cpu"}),
                         ("c", {"zone": "2"})):
        kube.create_object({"apiVersion": "v1", "kind": "Service", "spec": {},
                            "metadata": {"name": name, "namespace": NS, "labels": labels}})

    def names(selector: str) -> list[str]:
        found = kube.rest.request("GET", "/api/v1/services", what="services",
                                  query={"labelSelector": selector})
        return [s["metadata"]["name"] for s in found["items"]]

    assert names("tier=gpu") == ["a"]
    assert names("tier!=gpu") == ["b", "c"]
    assert names("zone") == ["a", "c"]
    assert names("!zone") == ["b"]
    assert names("tier in (gpu, cpu)") == ["a", "b"]
    assert names("tier notin (gpu),zone") == ["c"]


def test_update_service_status_writes_the_component_lifecycle(kube, api):
    lifecycle = {"replicas": 2, "readyReplicas": 2, "rolloutHold": None}
    assert kube.update_service_status(NS, "llama", "engine", lifecycle) is False  # no CRD
    api.serve(INFERENCE_SERVICES)
    kube._served.clear()
    assert kube.update_service_status(NS, "llama", "engine", lifecycle) is False  # no object
    api.add({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
             "metadata": {"name": "llama", "namespace": NS}, "spec": {},
             "status": {"components": {"engine": {"url": "http://x",
                                                  "lifecycle": {"rolloutHold": {"gate": "g"}}},
                                       "router": {"url": "http://y"}}}})
    assert kube.update_service_status(NS, "llama", "engine", lifecycle) is True
    status = api.get("InferenceService", NS, "llama")["status"]
    assert status["components"] == {
        "engine": {"url": "http://x", "lifecycle": {"replicas": 2, "readyReplicas": 2}},
        "router": {"url": "http://y"}}
    patch = api.calls("patch")[-1]
    assert (patch.path, patch.content_type) == (
        f"/apis/ome.io/v1beta1/namespaces/{NS}/inferenceservices/llama/status",
        "application/merge-patch+json")
