"""Discovery, counted, and the InferenceService status under a CRD that keeps it.

What KubeCluster does with each kind on a real API server is tested on one
(tests/controlplane/test_kube_backend.py). Here: how often it asks discovery (once
per group and run, never for built-in kinds), a CRD appearing mid-run, and the
component totals written to ``status.components.*.lifecycle``, which OME's released
CRD (the one on the control plane) drops.
"""

from __future__ import annotations

import pytest
from apiserver import INFERENCE_SERVICES, POD_GROUPS
from wire_helpers import NS

from omegitops.cluster.errors import NotFound

MANAGED = {"app.kubernetes.io/managed-by": "omegitops"}


def test_pod_groups_follow_discovery_asked_once_per_run(kube, api):
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
