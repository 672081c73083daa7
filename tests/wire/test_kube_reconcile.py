"""The reconcile shell on KubeCluster: a constant number of LIST calls, whatever the fleet.

(A whole run as the job, on the real API server: tests/controlplane/test_kube_backend.py
and test_job.py.)"""

from __future__ import annotations

import time

import pytest
from apiserver import POD_GROUPS
from wire_helpers import NS, make_pod, make_replica

from omegitops.app.passes import MANAGED, observe

EXPECTED_LISTS = [
    "/api/v1/pods",
    "/apis/ome.io/v1beta1/inferencereplicas",
    "/apis/apps/v1/controllerrevisions",
    "/api/v1/services",
    "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
    "/apis/policy/v1/poddisruptionbudgets",
]
# The nodes, unlabelled (migrations read them all), listed before the managed kinds.
NODE_LIST = "/api/v1/nodes"


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
    lists = [r for r in api.calls("list") if r.path != NODE_LIST]
    assert sorted(r.path for r in lists) == sorted(EXPECTED_LISTS)  # side by side
    assert {r.query["labelSelector"] for r in lists} == {"app.kubernetes.io/managed-by=omegitops"}
    assert len(api.calls("list", NODE_LIST)) == 1
    assert len(api.requests) == len(EXPECTED_LISTS) + 2  # the nodes, one discovery GET
    api.clear_log()
    observe(kube)
    assert len(api.requests) == len(EXPECTED_LISTS) + 1  # discovery is remembered


def test_observe_lists_the_kinds_side_by_side(kube, api, monkeypatch):
    """Each kind's LIST in a thread of its own, as informers list: while the pods' LIST is
    still being answered, the others are already asked."""
    api.serve(POD_GROUPS)
    _populate(api, 3)
    api.fail("GET", r"^/api/v1/pods$", delay=1.0)
    handle, spans = api.handle, {}

    def timed(method, target, *args):
        start = time.monotonic()
        try:
            return handle(method, target, *args)
        finally:
            spans[target.split("?")[0]] = (start, time.monotonic())

    monkeypatch.setattr(api, "handle", timed)
    seen = observe(kube)
    assert len(seen.replicas) == 3 and sum(map(len, seen.pods.values())) == 6
    _, pods_answered = spans["/api/v1/pods"]
    assert all(spans[path][0] < pods_answered for path in EXPECTED_LISTS[1:])


def test_observe_without_pod_groups_skips_their_list(kube, api):
    seen = observe(kube)
    assert seen.podgroups is None
    assert sorted(r.path for r in api.calls("list")) == sorted(
        [*EXPECTED_LISTS[:4], EXPECTED_LISTS[-1], NODE_LIST])
