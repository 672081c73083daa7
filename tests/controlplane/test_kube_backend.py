"""The ``kube`` backend's calls on the real API server: what each ``KubeCluster`` method
sends, and what kube-apiserver, its admission and the InferenceReplica CRD make of it.

Each test works in a namespace of its own. ``job`` is a ``KubeCluster`` holding the
``omegitops`` ServiceAccount's token, as the scheduled job runs; ``admin`` plays the
other actors (a person with kubectl, a controller) and makes the calls the job's
RBAC does not grant. Where the shape of the traffic is the point (one LIST, a GET
and no write), ``requests`` reads the job's requests from the API server's audit log.
"""

from __future__ import annotations

import itertools
import json
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from conftest import JOB_NAMESPACE, JOB_USER, PIPELINES
from kubernetes import config as k8s_config
from kubescenario import KubeScenario
from test_job import EXAMPLES, run_job

from omegitops.app.passes import MANAGED
from omegitops.app.untilidle import FORBIDDEN, run_until_idle
from omegitops.cluster.base import (
    CONTROLLER_REVISION,
    EVENT,
    INFERENCE_REPLICA,
    POD,
    POD_DISRUPTION_BUDGET,
    POD_GROUP,
    SERVICE,
)
from omegitops.cluster.errors import AlreadyExists, Conflict, Invalid, NotFound
from omegitops.cluster.kube import KubeCluster, RetryPolicy
from omegitops.cluster.kube.events import images_patch
from omegitops.cluster.kube.resources import RESOURCES, label_selector
from omegitops.cluster.kube.rest import MERGE_PATCH
from omegitops.cluster.sequences import SEQUENCE_ANNOTATION
from omegitops.manifests.load import load, resolved_components
from omegitops.model.outbox import OUTBOX, SEQUENCE
from omegitops.report.status import report_events
from tests.fleet import write_service

_namespaces = itertools.count()
_marks = itertools.count()
HOLD = "omegitops.test/hold"  # a finalizer nobody removes but the test
WRITE_VERBS = ("create", "update", "patch", "delete")
# Access and rules reviews: questions to the API server, which write nothing.
REVIEWS = ("/selfsubjectaccessreviews", "/selfsubjectrulesreviews")


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture
def new_namespace(control_plane):
    """``new_namespace()``: a namespace with its ``default`` ServiceAccount (pods need
    it), deleted when the test ends."""
    cp = control_plane
    made = []

    def make() -> str:
        name = f"cp-kube-{next(_namespaces)}"
        cp.create_namespace(name, wait=True)
        made.append(name)
        return name

    yield make
    for name in made:
        cp.delete("v1", "Namespace", None, name)


@pytest.fixture
def ns(new_namespace) -> str:
    return new_namespace()


@pytest.fixture
def admin(control_plane) -> KubeCluster:
    return KubeCluster(api_client=control_plane.admin, lease=False)


@pytest.fixture
def sleeps() -> list[float]:
    """The back-off waits the job's backend asked for (recorded, not slept)."""
    return []


@pytest.fixture
def job(control_plane, sleeps):
    client = k8s_config.new_client_from_config(str(control_plane.job_kubeconfig))
    yield KubeCluster(api_client=client, lease=False, retry=RetryPolicy(sleep=sleeps.append))
    client.close()


class Requests:
    """The job's requests since the last ``reset``, from the API server's audit log."""

    def __init__(self, cp, job: KubeCluster) -> None:
        self.cp, self.job = cp, job
        self.reset()

    def reset(self) -> None:
        self.since = self.cp.audit_offset()

    def __call__(self) -> list[tuple[str, str, dict]]:
        """``(verb, path, query)`` of each request, in order, once the log holds them all:
        a GET of an Event no one made is sent last, and the log is read up to it."""
        mark = f"audit-mark-{next(_marks)}"
        assert self.job.get_object(EVENT, JOB_NAMESPACE, mark) is None

        def logged():
            seen = []
            for event in self._events():
                uri = urlsplit(event["requestURI"])
                if uri.path.endswith(f"/events/{mark}"):
                    return (seen,)
                seen.append((event["verb"], uri.path, dict(parse_qsl(uri.query))))
            return None

        (seen,) = self.cp.wait_for(logged, 10, "the job's requests in the audit log")
        return seen

    def _events(self) -> list[dict]:
        with self.cp.audit_log.open("rb") as log:
            log.seek(self.since)
            data = log.read()
        lines = data.split(b"\n")[:-1]  # the last piece may be a line still being written
        return [e for e in map(json.loads, lines) if e["user"].get("username") == JOB_USER]


@pytest.fixture
def requests(control_plane, job) -> Requests:
    return Requests(control_plane, job)


# -- objects ------------------------------------------------------------------------------


def make_pod(name: str, namespace: str, labels: dict | None = None, node: str | None = None,
             finalizers: list[str] | None = None, **spec) -> dict:
    """A small pod. ``node`` binds it (a graceful delete then keeps it terminating until
    KWOK's kubelet lets it go); without one it waits behind a scheduling gate, out of
    the scheduler's and KWOK's hands, so its status is only what the test writes."""
    body = {"containers": [{"name": "main", "image": "busybox:1"},
                           {"name": "sidecar", "image": "envoy:1"}], **spec}
    if node:
        body["nodeName"] = node
    else:
        body["schedulingGates"] = [{"name": HOLD}]
    meta = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def make_replica(namespace: str, name: str = "llama-engine", replicas: int = 2,
                 labels: dict | None = None, **meta) -> dict:
    isvc, _, component = name.rpartition("-")
    return {
        "apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                     **meta},
        "spec": {"inferenceService": isvc, "component": component, "replicas": replicas,
                 "revision": f"{name}-0a1b2c3d"},
    }


def ready_node(cp) -> str:
    for node in cp.list("v1", "Node"):
        conditions = (node.get("status") or {}).get("conditions") or []
        if not node["spec"].get("unschedulable") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return node["metadata"]["name"]
    raise AssertionError("no Ready node")


def release(cp, namespace: str, name: str) -> None:
    """Remove a pod's finalizers, so that it can go."""
    if cp.get("v1", "Pod", namespace, name) is not None:
        KubeCluster(api_client=cp.admin, lease=False).rest.request(
            "PATCH", RESOURCES[POD].path(namespace, name), what="release",
            body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)


def set_pod_status(admin: KubeCluster, namespace: str, name: str, status: dict) -> None:
    """Write a pod's status as its kubelet would (a merge patch of the subresource)."""
    admin.rest.request("PATCH", RESOURCES[POD].path(namespace, name, "status"),
                       what="kubelet", body={"status": status}, content_type=MERGE_PATCH)


def case_labels(namespace: str) -> dict[str, str]:
    """The managed-by label and one naming the test: the cluster is shared, so a list
    across all namespaces must find only what this test made."""
    return {**MANAGED, "omegitops.test/case": namespace}


# -- pods -----------------------------------------------------------------------------------


def test_create_pod_fills_metadata_and_pending(job, ns, requests):
    pod = job.create_pod(make_pod("a", ns, labels={"app": "x"}))
    meta = pod["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"]
    assert pod["status"]["phase"] == "Pending"
    assert (pod["kind"], pod["apiVersion"]) == ("Pod", "v1")
    assert requests() == [("create", f"/api/v1/namespaces/{ns}/pods", {})]


def test_create_pod_twice_is_already_exists_naming_the_pod(job, ns):
    job.create_pod(make_pod("a", ns))
    with pytest.raises(AlreadyExists, match=f"Pod/{ns}/a") as caught:
        job.create_pod(make_pod("a", ns))
    assert caught.value.__cause__ is not None  # the HTTP error is chained


def test_list_pods_is_one_all_namespace_list_with_a_label_selector(job, new_namespace,
                                                                  requests):
    one, other = new_namespace(), new_namespace()
    app = f"x-{one}"
    job.create_pod(make_pod("a", one, labels={"app": app, "tier": "1"}))
    job.create_pod(make_pod("b", other, labels={"app": app}))
    job.create_pod(make_pod("c", one, labels={"app": "y"}))
    requests.reset()
    pods = job.list_pods({"app": app})
    assert sorted(p["metadata"]["name"] for p in pods) == ["a", "b"]
    # Built-in list items come without kind/apiVersion; the backend puts them back.
    assert {(p["kind"], p["apiVersion"]) for p in pods} == {("Pod", "v1")}
    assert requests() == [("list", "/api/v1/pods", {"labelSelector": f"app={app}",
                                                   "limit": "500"})]


def test_delete_pod_with_grace_keeps_it_terminating_until_gone(control_plane, job, admin, ns):
    cp = control_plane
    job.create_pod(make_pod("a", ns, node=ready_node(cp), finalizers=[HOLD]))
    try:
        job.delete_pod(ns, "a", grace_seconds=30)
        pod = admin.get_object(POD, ns, "a")
        assert pod["metadata"]["deletionTimestamp"]
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
        job.delete_pod(ns, "a", grace_seconds=300)  # a second delete never extends the grace
        again = admin.get_object(POD, ns, "a")
        assert again["metadata"]["deletionTimestamp"] == pod["metadata"]["deletionTimestamp"]
        assert again["metadata"]["deletionGracePeriodSeconds"] == 30
        with pytest.raises(AlreadyExists):  # the name stays taken while it terminates
            job.create_pod(make_pod("a", ns))
    finally:
        release(cp, ns, "a")
    cp.wait_for(lambda: admin.get_object(POD, ns, "a") is None, 30, "the pod gone")


def test_delete_pod_without_grace_uses_the_pods_own_and_zero_removes_at_once(
        control_plane, job, admin, ns):
    cp = control_plane
    node = ready_node(cp)
    job.create_pod(make_pod("a", ns, node=node, finalizers=[HOLD],
                            terminationGracePeriodSeconds=7))
    try:
        job.delete_pod(ns, "a")
        assert admin.get_object(POD, ns, "a")["metadata"]["deletionGracePeriodSeconds"] == 7
    finally:
        release(cp, ns, "a")
    job.create_pod(make_pod("b", ns, node=node))
    job.delete_pod(ns, "b", grace_seconds=0)
    assert admin.get_object(POD, ns, "b") is None


def test_delete_missing_pod_is_not_found(job, ns):
    with pytest.raises(NotFound, match=f"Pod/{ns}/nope"):
        job.delete_pod(ns, "nope")


def test_set_pod_condition_patches_the_status_subresource(job, ns, requests):
    job.create_pod(make_pod("a", ns))
    requests.reset()
    pod = job.set_pod_condition(ns, "a", "ome.io/serving", True, "OMENative", "in rotation")
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "ome.io/serving"]
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True", "OMENative", "in rotation")
    assert cond["lastTransitionTime"]
    assert pod["status"]["phase"] == "Pending"  # the rest of status is untouched
    path = f"/api/v1/namespaces/{ns}/pods/a"
    assert requests() == [("get", path, {}), ("patch", f"{path}/status", {})]


def test_set_pod_condition_moves_transition_time_only_on_a_flip(job, admin, ns):
    job.create_pod(make_pod("a", ns))
    set_pod_status(admin, ns, "a", {"conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "ome.io/serving", "status": "True", "reason": "OMENative", "message": "old",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    pod = job.set_pod_condition(ns, "a", "ome.io/serving", True, "OMENative", "new")
    serving = [c for c in pod["status"]["conditions"] if c["type"] == "ome.io/serving"]
    assert serving[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert serving[0]["message"] == "new"
    assert [c["type"] for c in pod["status"]["conditions"]][-2:] == ["Ready", "ome.io/serving"]
    pod = job.set_pod_condition(ns, "a", "ome.io/serving", False, "OMENative", "out")
    serving = [c for c in pod["status"]["conditions"] if c["type"] == "ome.io/serving"]
    assert serving[0]["status"] == "False"
    assert serving[0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"


def test_set_pod_condition_as_it_is_writes_nothing(job, ns, requests):
    job.create_pod(make_pod("a", ns))
    job.set_pod_condition(ns, "a", "ome.io/serving", True, "OMENative", "in")
    requests.reset()
    job.set_pod_condition(ns, "a", "ome.io/serving", True, "OMENative", "in")
    assert [verb for verb, _, _ in requests()] == ["get"]


def test_set_pod_condition_refuses_kubelet_conditions(job, ns):
    job.create_pod(make_pod("a", ns))
    with pytest.raises(Invalid, match="kubelet"):
        job.set_pod_condition(ns, "a", "Ready", True)


def test_patch_pod_images_changes_only_the_named_container(job, ns, requests):
    job.create_pod(make_pod("a", ns))
    requests.reset()
    pod = job.patch_pod_images(ns, "a", {"main": "busybox:2"})
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"]] == [
        ("main", "busybox:2"), ("sidecar", "envoy:1")]
    assert requests() == [("patch", f"/api/v1/namespaces/{ns}/pods/a", {})]


def test_patch_pod_images_moves_labels_in_the_same_patch(job, ns, requests):
    job.create_pod(make_pod("a", ns, labels={"ome.io/revision": "svc-engine-00000001"}))
    requests.reset()
    pod = job.patch_pod_images(ns, "a", {"main": "busybox:2"},
                               {"ome.io/revision": "svc-engine-00000002"})
    assert pod["metadata"]["labels"]["ome.io/revision"] == "svc-engine-00000002"
    assert pod["spec"]["containers"][0]["image"] == "busybox:2"
    # One write: never new images under the old label.
    assert [verb for verb, _, _ in requests()] == ["patch"]
    assert images_patch({"main": "busybox:2"}, {"ome.io/revision": "svc-engine-00000002"}) == {
        "metadata": {"labels": {"ome.io/revision": "svc-engine-00000002"}},
        "spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}


def test_patch_pod_images_of_an_unknown_container_is_invalid(job, ns):
    job.create_pod(make_pod("a", ns))
    with pytest.raises(Invalid, match="may not add or remove containers"):
        job.patch_pod_images(ns, "a", {"nope": "busybox:2"})


def test_replace_pod_may_change_images_only(admin, ns):
    pod = admin.create_pod(make_pod("a", ns))
    pod["spec"]["containers"][0]["image"] = "busybox:3"
    assert admin.replace_object(pod)["spec"]["containers"][0]["image"] == "busybox:3"
    pod = admin.get_object(POD, ns, "a")
    pod["spec"]["hostNetwork"] = True
    with pytest.raises(Invalid, match="may not change fields"):
        admin.replace_object(pod)


# -- InferenceReplicas ------------------------------------------------------------------------


def test_inference_replica_create_replace_and_status(job, ns, requests):
    created = job.create_object({**make_replica(ns, labels=MANAGED), "status": {"replicas": 9}})
    assert created["metadata"]["generation"] == 1
    assert "status" not in created  # a create cannot set the status subresource
    created["spec"]["replicas"] = 3
    replaced = job.replace_object(created)
    assert replaced["spec"]["replicas"] == 3
    assert replaced["metadata"]["generation"] == 2
    replaced["status"] = {"replicas": 3, "readyReplicas": 1, "observedGeneration": 2}
    with_status = job.replace_status(replaced)
    assert with_status["status"]["readyReplicas"] == 1
    assert with_status["metadata"]["generation"] == 2  # status writes leave generation alone
    path = f"/apis/ome.io/v1beta1/namespaces/{ns}/inferencereplicas"
    assert requests() == [("create", path, {}), ("update", f"{path}/llama-engine", {}),
                          ("update", f"{path}/llama-engine/status", {})]


def test_replace_object_ignores_status_and_replace_status_ignores_spec(job, ns):
    replica = job.create_object(make_replica(ns))
    replica["status"] = {"replicas": 2}
    replica = job.replace_status(replica)
    replica["spec"]["replicas"] = 5
    replica["status"] = {"replicas": 7}
    replaced = job.replace_object(replica)
    assert (replaced["spec"]["replicas"], replaced["status"]["replicas"]) == (5, 2)
    replaced["spec"]["replicas"] = 1
    replaced["status"] = {"replicas": 4}
    status = job.replace_status(replaced)
    assert (status["spec"]["replicas"], status["status"]["replicas"]) == (5, 4)


def test_stale_resource_version_is_a_conflict_and_is_not_retried(job, ns, sleeps, requests):
    replica = job.create_object(make_replica(ns))
    fresh = job.replace_object({**replica, "spec": {**replica["spec"], "replicas": 3}})
    with pytest.raises(Conflict, match=f"InferenceReplica/{ns}/llama-engine: .*modified"):
        job.replace_object(replica)
    with pytest.raises(Conflict):
        job.replace_status({**replica, "status": {"replicas": 1}})
    assert sleeps == []
    assert [verb for verb, _, _ in requests()].count("update") == 3
    assert job.replace_status({**fresh, "status": {"replicas": 1}})["status"]["replicas"] == 1


def test_replace_without_resource_version_is_invalid(job, ns):
    replica = job.create_object(make_replica(ns))
    del replica["metadata"]["resourceVersion"]
    with pytest.raises(Invalid, match="resourceVersion"):
        job.replace_object(replica)


def test_the_crd_schema_refuses_a_bad_replica_and_prunes_unknown_spec_fields(job, ns):
    spec = make_replica(ns)["spec"]
    with pytest.raises(Invalid, match="spec.component"):
        job.create_object({**make_replica(ns), "spec": {**spec, "component": "sidecar"}})
    created = job.create_object({**make_replica(ns), "spec": {**spec, "surprise": 1}})
    assert "surprise" not in created["spec"]


def test_columnar_instance_rows_survive_the_crd(job, ns):
    replica = job.create_object(make_replica(ns))
    rows = {"encoding": "ColumnarV2", "columns": ["index", "phase"], "rows": [[0, "Ready"]]}
    replica["status"] = {"replicas": 1, "instances": rows,
                         "rolloutHold": {"gate": "Partition", "reason": "Staged", "target": None}}
    stored = job.replace_status(replica)
    assert stored["status"]["instances"] == rows
    assert stored["status"]["rolloutHold"]["target"] is None


def test_list_objects_filters_by_labels_in_one_call(job, new_namespace, requests):
    one, other = new_namespace(), new_namespace()
    labels = case_labels(one)
    job.create_object(make_replica(one, "a-engine", labels=labels))
    job.create_object(make_replica(other, "b-engine", labels=labels))
    job.create_object(make_replica(one, "c-engine", labels=MANAGED))
    requests.reset()
    found = job.list_objects(INFERENCE_REPLICA, labels)
    assert sorted(r["metadata"]["name"] for r in found) == ["a-engine", "b-engine"]
    assert requests() == [("list", "/apis/ome.io/v1beta1/inferencereplicas",
                           {"labelSelector": label_selector(labels), "limit": "500"})]


def test_delete_with_finalizers_leaves_the_object_terminating(admin, ns):
    replica = admin.create_object(make_replica(ns, finalizers=["example.com/hold"]))
    admin.delete_object(INFERENCE_REPLICA, ns, "llama-engine")
    terminating = admin.get_object(INFERENCE_REPLICA, ns, "llama-engine")
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["uid"] == replica["metadata"]["uid"]
    terminating["metadata"]["finalizers"] = []
    admin.replace_object(terminating)
    assert admin.get_object(INFERENCE_REPLICA, ns, "llama-engine") is None


# -- the other kinds --------------------------------------------------------------------------


def test_get_object_is_none_when_absent(admin, ns):
    assert admin.get_object(INFERENCE_REPLICA, ns, "nope-engine") is None
    assert admin.get_object("Node", None, "no-such-node") is None


def test_controller_revision_create_list_delete(admin, ns):
    labels = case_labels(ns)
    revision = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "llama-engine-0a1b2c3d", "namespace": ns, "labels": labels},
                "data": {"spec": {"template": {}}}, "revision": 1}
    admin.create_object(revision)
    with pytest.raises(AlreadyExists, match=f"ControllerRevision/{ns}/llama-engine-0a1b2c3d"):
        admin.create_object(revision)
    (listed,) = admin.list_objects(CONTROLLER_REVISION, labels)
    assert (listed["kind"], listed["apiVersion"], listed["revision"]) == (
        "ControllerRevision", "apps/v1", 1)
    assert listed["data"] == {"spec": {"template": {}}}
    admin.delete_object(CONTROLLER_REVISION, ns, "llama-engine-0a1b2c3d")
    assert admin.list_objects(CONTROLLER_REVISION, labels) == []


def test_service_create_replace_and_delete(admin, ns):
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "llama-engine", "namespace": ns, "labels": MANAGED},
               "spec": {"selector": {"app": "llama"}, "ports": [{"port": 8080}]}}
    created = admin.create_object(service)
    assert created["spec"]["clusterIP"]  # filled in by the API server
    created["spec"]["ports"] = [{"port": 9090}]
    assert [p["port"] for p in admin.replace_object(created)["spec"]["ports"]] == [9090]
    admin.delete_object(SERVICE, ns, "llama-engine")
    with pytest.raises(NotFound, match=f"Service/{ns}/llama-engine"):
        admin.delete_object(SERVICE, ns, "llama-engine")


def test_pod_groups_are_found_by_discovery_and_served(admin, ns):
    assert admin.has_kind(POD_GROUP) is True  # the scheduler-plugins CRD is installed
    assert all(admin.has_kind(k) for k in (POD, SERVICE, EVENT, "Node", CONTROLLER_REVISION,
                                           INFERENCE_REPLICA))
    assert admin.has_kind("Nonsense") is False
    labels = case_labels(ns)
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": POD_GROUP,
             "metadata": {"name": "llama-engine-0", "namespace": ns, "labels": labels},
             "spec": {"minMember": 2}}
    admin.create_object(group)
    (listed,) = admin.list_objects(POD_GROUP, labels)
    assert listed["spec"]["minMember"] == 2
    assert (listed["kind"], listed["apiVersion"]) == (POD_GROUP, "scheduling.x-k8s.io/v1alpha1")
    admin.delete_object(POD_GROUP, ns, "llama-engine-0")
    assert admin.list_objects(POD_GROUP, labels) == []


# -- Events -------------------------------------------------------------------------------------


def an_event(namespace: str, **more) -> dict:
    return {"involvedObject": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                               "namespace": namespace, "name": "llama"},
            "metadata": {"namespace": namespace, "labels": MANAGED},
            "type": "Normal", "reason": "InstanceReady",
            "message": "OMENative component=engine instance=0 ready", **more}


def test_a_repeated_event_is_aggregated_as_client_gos_recorder_does(job, admin, ns,
                                                                     requests):
    """A new event: one create. Its repeat in the same run: one patch, on what the run
    wrote (no read). A repeat of an earlier run's: the create answers that it exists,
    then a read and a patch."""
    event = an_event(ns)
    requests.reset()
    first = job.record_event(event)
    assert (first["count"], first["reason"]) == (1, "InstanceReady")
    assert first["firstTimestamp"] == first["lastTimestamp"]
    assert requests() == [("create", f"/api/v1/namespaces/{ns}/events", {})]
    requests.reset()
    second = job.record_event(event)
    assert second["count"] == 2 and second["metadata"]["name"] == first["metadata"]["name"]
    path = f"/api/v1/namespaces/{ns}/events/{first['metadata']['name']}"
    assert requests() == [("patch", path, {})]
    later_run = KubeCluster(api_client=job.rest.client, lease=False)
    requests.reset()
    assert later_run.record_event(event)["count"] == 3
    assert requests() == [("create", f"/api/v1/namespaces/{ns}/events", {}),
                          ("get", path, {}), ("patch", path, {})]
    other = job.record_event({**event, "message": "something else"})
    assert other["count"] == 1 and other["metadata"]["name"] != first["metadata"]["name"]
    events = [e for e in admin.list_objects(EVENT, MANAGED)
              if e["metadata"]["namespace"] == ns]
    assert sorted(e["count"] for e in events) == [1, 3]


def test_events_can_be_selected_by_field(job, ns):
    job.record_event(an_event(ns))
    job.record_event(an_event(ns, reason="InstanceFailed", type="Warning"))
    path = f"/api/v1/namespaces/{ns}/events"
    found = job.rest.request("GET", path, what="events", query={
        "fieldSelector": "reason=InstanceFailed,involvedObject.name=llama"})
    assert [e["reason"] for e in found["items"]] == ["InstanceFailed"]
    with pytest.raises(Invalid, match="field label not supported"):
        job.rest.request("GET", path, what="events", query={"fieldSelector": "spec.nope=1"})


def test_the_report_lists_only_warnings_chosen_by_the_api_server(job, ns, requests):
    job.record_event(an_event(ns))
    job.record_event(an_event(ns, reason="InstanceFailed", type="Warning",
                              message="OMENative component=engine instance=1 failed"))
    requests.reset()
    found = [e for e in report_events(job) if e["metadata"]["namespace"] == ns]
    assert [(e["type"], e["reason"]) for e in found] == [("Warning", "InstanceFailed")]
    # One LIST whose field selector leaves the Normal events on the server.
    assert requests() == [("list", "/api/v1/events", {
        "labelSelector": label_selector(MANAGED), "fieldSelector": "type=Warning",
        "limit": "500"})]


def test_label_selector_forms(admin, ns):
    for name, labels in (("a", {"tier": "gpu", "zone": "1"}), ("b", {"tier": "cpu"}),
                         ("c", {"zone": "2"})):
        admin.create_object({"apiVersion": "v1", "kind": "Service",
                             "spec": {"ports": [{"port": 80}]},
                             "metadata": {"name": name, "namespace": ns, "labels": labels}})

    def names(selector: str) -> list[str]:
        found = admin.rest.request("GET", f"/api/v1/namespaces/{ns}/services", what="services",
                                   query={"labelSelector": selector})
        return [s["metadata"]["name"] for s in found["items"]]

    assert names("tier=gpu") == ["a"]
    assert names("tier!=gpu") == ["b", "c"]
    assert names("zone") == ["a", "c"]
    assert names("!zone") == ["b"]
    assert names("tier in (gpu, cpu)") == ["a", "b"]
    assert names("tier notin (gpu),zone") == ["c"]


def test_a_resent_outbox_entry_is_skipped_and_a_true_repeat_counted(control_plane, ns,
                                                                   tmp_path):
    """An outbox whose clear never landed is sent again: the Event that already counts
    its entry is left alone. A new entry with the same message is a repeat."""
    cp = control_plane
    repo = tmp_path / "repo"
    write_service(repo, namespace=ns, replicas=1, grace=1)
    s = KubeScenario(cp, repo, {ns})
    admin = KubeCluster(api_client=cp.admin, lease=False)
    try:
        s.until_idle()

        def events() -> list[dict]:
            return sorted((e for e in s.events() if e["involvedObject"]["name"] == "svc"),
                          key=lambda e: e["message"])

        sent = events()[0]
        counted = sent["metadata"]["annotations"][SEQUENCE_ANNOTATION]
        replica = s.replica("svc-engine")
        assert counted.rpartition("/")[0] == replica["metadata"]["uid"]
        before = [(e["message"], e["count"]) for e in events()]
        entry = {"sequence": int(counted.rpartition("/")[2]), "type": sent["type"],
                 "reason": sent["reason"], "message": sent["message"]}
        admin.replace_status({**replica, "status": {**replica["status"], OUTBOX: [entry]}})
        requests = Requests(cp, s.job)
        s.run_pass()
        assert [(e["message"], e["count"]) for e in events()] == before
        assert OUTBOX not in s.status("svc-engine")
        # Skipped: nothing written for it (its create answered that it exists), only the
        # outbox cleared.
        made = requests()
        assert not [r for r in made if "/events" in r[1] and r[0] in ("update", "patch")]
        assert [r for r in made if r[0] == "update"] == [
            ("update", f"{RESOURCES[INFERENCE_REPLICA].path(ns, 'svc-engine')}/status", {})]
        replica = s.replica("svc-engine")
        latest = replica["status"][SEQUENCE]
        admin.replace_status({**replica, "status": {
            **replica["status"], OUTBOX: [{**entry, "sequence": latest + 1}],
            SEQUENCE: latest + 1}})
        s.run_pass()
        assert cp.get("v1", "Event", ns, sent["metadata"]["name"])["count"] == 2
    finally:
        s.close()


# -- a reconcile run, as the job --------------------------------------------------------------


def test_reconcile_as_the_job_creates_what_it_manages_and_a_converged_pass_writes_nothing(
        control_plane, ns, requests, tmp_path):
    cp = control_plane
    repo = tmp_path / "repo"
    write_service(repo, namespace=ns, name="solo", replicas=2, grace=1)
    # Both services' runtime is written to one file: the single-pod one under another name.
    solo = yaml.safe_load((repo / "runtimes" / "test.yaml").read_text())
    write_service(repo, namespace=ns, name="gang", replicas=1, workers=1, grace=1)
    solo["metadata"]["name"] = "srt-solo"
    (repo / "runtimes" / "solo.yaml").write_text(yaml.safe_dump(solo))
    service = yaml.safe_load((repo / "services" / "solo.yaml").read_text())
    service["spec"]["runtime"]["name"] = "srt-solo"
    (repo / "services" / "solo.yaml").write_text(yaml.safe_dump(service))
    argv = ["omegitops", "reconcile", "--repo", str(repo), "--cluster", "kube"]
    done = run_job(cp, [*argv, "--until-idle", "--max-seconds", "120"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "solo-engine" in done.stdout  # the replica table
    replicas = {r["metadata"]["name"]: r for r in cp.list("ome.io/v1beta1", INFERENCE_REPLICA, ns)}
    assert sorted(replicas) == ["gang-engine", "solo-engine"]
    for replica in replicas.values():
        assert replica["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "omegitops"
        assert replica["status"]["readyReplicas"] == replica["spec"]["replicas"]
    pods = cp.list("v1", "Pod", ns)
    assert len(pods) == 2 + 2
    assert {p["metadata"]["labels"]["ome.io/inferenceservice"] for p in pods} == {"solo", "gang"}
    assert all({"conditionType": "ome.io/serving"} in p["spec"]["readinessGates"]
               for p in pods if p["metadata"]["name"].startswith("solo-"))
    assert cp.list("v1", "Event", ns) and cp.list("apps/v1", CONTROLLER_REVISION, ns)
    assert [g["metadata"]["name"] for g in cp.list("scheduling.x-k8s.io/v1alpha1", POD_GROUP,
                                                   ns)] == ["gang-engine-0"]

    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    # The first run at rest may record converged fingerprints (lifecycle/converged.py):
    # InferenceReplica writes and nothing else.
    requests.reset()
    settle = run_job(cp, argv, tmp_path)
    assert settle.returncode == 0, settle.stderr[-3000:]
    recorded = {path for verb, path, _ in requests() if verb in WRITE_VERBS
                and "/leases" not in path and not path.endswith(REVIEWS)}
    assert all("/inferencereplicas/" in path for path in recorded), recorded
    # The disruption controller and a gang scheduler's controller write the status of
    # a budget and a PodGroup behind the pods, at any moment: not a change to a plan.
    admin = KubeCluster(api_client=cp.admin, lease=False)

    def write_status(api_version: str, kind: str, name: str, status) -> None:
        for _ in range(10):  # the disruption controller may write it meanwhile
            current = cp.get(api_version, kind, ns, name)
            try:
                admin.replace_status({**current, "status": status(current.get("status") or {})})
                return
            except Conflict:
                continue
        raise AssertionError(f"{kind} {name}: every status write conflicted")

    write_status("policy/v1", POD_DISRUPTION_BUDGET, "solo-engine", lambda status: {
        **status, "disruptionsAllowed": status["disruptionsAllowed"] + 1})
    write_status("scheduling.x-k8s.io/v1alpha1", POD_GROUP, "gang-engine-0",
                 lambda status: {"phase": "Running", "running": 2})
    requests.reset()
    again = run_job(cp, argv, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in cp.list("v1", "Pod", ns)} == before
    # The Lease is taken and released; nothing else is written.
    writes = [(verb, path) for verb, path, _ in requests() if verb in WRITE_VERBS
              and "/leases" not in path and not path.endswith(REVIEWS)]
    assert writes == []

    got = run_job(cp, ["omegitops", "get", "irep", "--cluster", "kube", "-o", "json"], tmp_path)
    assert got.returncode == 0, got.stderr[-3000:]
    assert {"solo-engine", "gang-engine"} <= {
        r["metadata"]["name"] for r in json.loads(got.stdout)["items"]}


# -- a missing grant during --until-idle ------------------------------------------------------


def service_account_without(cp, name: str, group: str, resource: str, verb: str):
    """A ServiceAccount of the job's namespace bound to the shipped ClusterRole less one
    verb; returns its kubeconfig and a function that removes what was made."""
    docs = [d for d in yaml.safe_load_all((PIPELINES / "common" / "rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    role["metadata"]["name"] = name
    for rule in role["rules"]:
        if rule["apiGroups"] == [group] and rule["resources"] == [resource]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    cp.apply(role)
    cp.apply({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": name, "namespace": JOB_NAMESPACE}})
    cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": name},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": name},
              "subjects": [{"kind": "ServiceAccount", "name": name,
                            "namespace": JOB_NAMESPACE}]})

    def remove() -> None:
        cp.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, name)
        cp.delete("rbac.authorization.k8s.io/v1", "ClusterRole", None, name)
        cp.delete("v1", "ServiceAccount", JOB_NAMESPACE, name)

    return cp.service_account_kubeconfig(JOB_NAMESPACE, name), remove


def test_until_idle_stops_at_once_when_a_permission_is_missing(control_plane, ns, tmp_path):
    cp = control_plane
    kubeconfig, remove = service_account_without(cp, "omegitops-no-revision-delete", "apps",
                                                 "controllerrevisions", "delete")
    client = k8s_config.new_client_from_config(str(kubeconfig))
    try:
        repo = tmp_path / "repo"
        write_service(repo, namespace=ns, replicas=1, grace=1)
        items = resolved_components(load(repo))
        passes = []
        kube = KubeCluster(api_client=client, lease=False)
        assert run_until_idle(kube, items, 60, passes.append) == FORBIDDEN
        assert len(passes) == 1 and passes[0].forbidden and passes[0].applied == 0
        assert [line for line in passes[0].errors
                if "not permitted: delete apps/controllerrevisions" in line], passes[0].errors
        assert cp.list("ome.io/v1beta1", INFERENCE_REPLICA, ns) == []
        assert cp.list("v1", "Pod", ns) == []
    finally:
        client.close()
        remove()


# -- what omegitops writes, through the CRD ---------------------------------------------------


@pytest.fixture(scope="module")
def written_replicas(tmp_path_factory) -> list[dict]:
    """The InferenceReplicas a run over examples/ writes, on the simulator, until idle."""
    from omegitops.cli import main
    from omegitops.cluster.sim import SimCluster

    path = tmp_path_factory.mktemp("crd") / "cluster.json"
    assert main(["reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{path}",
                 "--until-idle"]) == 0
    with SimCluster(path) as cluster:
        return cluster.list_objects(INFERENCE_REPLICA)


def test_what_omegitops_writes_passes_the_crd_and_loses_nothing(job, ns, written_replicas):
    """Every InferenceReplica the examples bring about, written as the job writes it:
    the CRD refuses none, and reading it back gives what was written (the API server
    silently drops a field the CRD does not declare)."""
    names = [r["metadata"]["name"] for r in written_replicas]
    assert names and len(set(names)) == len(names)
    for replica in written_replicas:
        name = replica["metadata"]["name"]
        meta = {"name": name, "namespace": ns,
                "labels": replica["metadata"].get("labels") or {},
                "annotations": replica["metadata"].get("annotations") or {}}
        created = job.create_object({**replica, "metadata": meta})
        job.replace_status({**created, "status": replica["status"]})
        stored = job.get_object(INFERENCE_REPLICA, ns, name)
        assert stored["spec"] == replica["spec"], name
        assert stored["status"] == replica["status"], name
        for key in ("labels", "annotations"):
            assert (stored["metadata"].get(key) or {}) == meta[key], (name, key)

