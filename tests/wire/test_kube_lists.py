"""Every LIST is read in pages of 500, counted; an expired continue token, on demand,
restarts the list once. (Paging through the real API server's continue tokens:
tests/controlplane/test_real_cluster_path.py.)"""

from __future__ import annotations

import copy
import gc

import pytest
from wire_helpers import make_pod

from omegitops.app.passes import MANAGED, observe
from omegitops.cluster.base import trim_pod
from omegitops.cluster.errors import Expired

PODS = r"^/api/v1/pods$"


def _pods(api, count: int) -> None:
    for n in range(count):
        api.add(make_pod(f"p{n:04d}", namespace=f"ns{n % 7}", labels=MANAGED))
    api.add(make_pod("unmanaged"))


def test_a_list_is_read_in_pages_of_500(kube, api):
    _pods(api, 1203)
    pods = kube.list_pods(MANAGED)
    assert len(pods) == 1203 == len({(p["metadata"]["namespace"], p["metadata"]["name"])
                                     for p in pods})
    pages = api.calls("list", PODS)
    assert [r.query.get("limit") for r in pages] == ["500", "500", "500"]
    assert "continue" not in pages[0].query
    assert pages[1].query["continue"] and pages[2].query["continue"]


def test_a_list_is_decoded_with_the_cyclic_collector_paused(kube, api, monkeypatch):
    """Its millions of small objects would set off full collections for no garbage;
    a watch's first LIST, outside any pass, too. The collector is back on after."""
    _pods(api, 600)
    send = kube.rest._send
    collector_on_during_pages = []

    def spy(*args, **kwargs):
        collector_on_during_pages.append(gc.isenabled())
        return send(*args, **kwargs)

    monkeypatch.setattr(kube.rest, "_send", spy)
    assert gc.isenabled()
    assert len(kube.list_pods(MANAGED)) == 600
    assert collector_on_during_pages == [False, False]
    assert gc.isenabled()


def test_a_transform_cuts_each_page_before_the_next_is_read(kube, api, monkeypatch):
    """observe keeps a trimmed pod (trim_pod) of each page as it is read: the whole
    list is never held at once. Plain lists stay whole."""
    for n in range(1203):
        api.add(make_pod(f"p{n:04d}", labels=MANAGED, nodeSelector={"pool": "gpu"}))
    send = kube.rest._send
    order = []

    def spy(*args, **kwargs):
        order.append("page")
        return send(*args, **kwargs)

    def trim(pod):
        order.append("pod")
        return trim_pod(pod)

    monkeypatch.setattr(kube.rest, "_send", spy)
    pods = kube.list_objects("Pod", MANAGED, transform=trim)
    assert order == (["page"] + ["pod"] * 500) * 2 + ["page"] + ["pod"] * 203
    assert all(set(p["spec"]) == {"containers"} for p in pods)
    assert {p["kind"] for p in pods} == {"Pod"}  # filled in before the transform
    assert all("nodeSelector" in p["spec"] for p in kube.list_pods(MANAGED))


def test_an_expired_continue_token_restarts_the_list_once(kube, api):
    _pods(api, 1203)
    api.fail("GET", PODS, status=410, reason="Expired", query="continue=")
    assert len(kube.list_pods(MANAGED)) == 1203
    pages = api.calls("list", PODS)
    assert ["continue" in r.query for r in pages] == [False, True, False, True, True]


def test_a_list_that_expires_again_fails(kube, api):
    _pods(api, 1203)
    api.fail("GET", PODS, status=410, reason="Expired", query="continue=", times=2)
    with pytest.raises(Expired, match="Pod list"):
        kube.list_pods(MANAGED)



def test_a_pass_keeps_only_the_spec_fields_it_reads_of_a_pod_and_creates_it_whole(kube, api):
    env = [{"name": "MODEL", "value": "llama"}]
    body = make_pod("full", labels=MANAGED, nodeName="n1", terminationGracePeriodSeconds=60,
                    volumes=[{"name": "dshm", "emptyDir": {}}],
                    containers=[{"name": "main", "image": "busybox:1", "env": env,
                                 "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}])
    kube.create_pod(body)
    stored = api.get("Pod", "demo", "full")
    assert stored["spec"]["volumes"] and stored["spec"]["containers"][0]["env"] == env
    (listed,) = kube.list_pods(MANAGED)
    assert listed["spec"]["volumes"]  # a plain read is whole
    (observed,) = observe(kube).pods[("demo", "", "")]
    assert observed["spec"] == {"nodeName": "n1", "terminationGracePeriodSeconds": 60,
                                "containers": [{"name": "main", "image": "busybox:1"}]}
    assert observed["metadata"]["labels"] == MANAGED
    assert trim_pod(copy.deepcopy(observed)) == observed  # trimming twice changes nothing


def test_a_pass_keeps_what_it_reads_of_a_pods_status():
    status = {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1",
              "podIPs": [{"ip": "10.1.0.1"}], "startTime": "2026-09-27T08:00:00Z",
              "qosClass": "Burstable",
              "conditions": [{"type": "Ready", "status": "True",
                              "lastTransitionTime": "2026-09-27T08:00:35Z"}],
              "containerStatuses": [{"name": "main", "image": "busybox:1", "ready": True,
                                     "restartCount": 2, "state": {"running": {}}}]}
    pod = {**make_pod("p", labels=MANAGED), "status": copy.deepcopy(status)}
    trimmed = trim_pod(pod)
    assert trimmed["status"] == {key: status[key] for key in
                                 ("phase", "conditions", "containerStatuses")}
    assert pod["status"] == status  # the pod given is left as it was
    assert trim_pod(trimmed) == trimmed


def test_the_texts_pods_repeat_are_read_once(kube, api):
    """Decoded JSON makes a new string of each value; what every pod of a fleet repeats
    (a label's value, a condition's type and status, an image) is shared, as read."""
    status = {"conditions": [{"type": "Ready", "status": "True"}],
              "containerStatuses": [{"name": "main", "image": "busybox:1", "ready": True}]}
    for n in range(3):
        api.add({**make_pod(f"p{n}", labels={**MANAGED, "team": "search-" + "x" * 20}),
                 "status": copy.deepcopy(status)})
    first, *others = kube.list_pods(MANAGED)
    for other in others:
        assert other["metadata"]["labels"]["team"] is first["metadata"]["labels"]["team"]
        for key, inner in (("conditions", "type"), ("containerStatuses", "image")):
            assert other["status"][key][0][inner] is first["status"][key][0][inner]
        assert other["spec"]["containers"][0]["image"] is \
            first["spec"]["containers"][0]["image"]
