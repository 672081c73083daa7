"""The object API: resourceVersions and conflicts, kinds, events, next_transition_at."""

from __future__ import annotations

import pytest
from sim_helpers import NS, elapsed, get, make_pod

from omegitops.cluster.errors import AlreadyExists, Conflict, Invalid, NotFound
from omegitops.cluster.sequences import SEQUENCE_ANNOTATION


def _irep(name="svc-engine"):
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
            "metadata": {"name": name, "namespace": NS}, "spec": {"replicas": 2}}


def test_created_objects_get_identity_and_every_write_a_new_resource_version(cluster):
    created = cluster.create_object(_irep())
    assert created["metadata"]["uid"] and created["metadata"]["generation"] == 1
    assert created["metadata"]["creationTimestamp"] == "2026-09-27T08:00:00Z"
    pod = cluster.create_pod(make_pod("a"))
    assert int(pod["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert pod["status"]["phase"] == "Pending"
    with pytest.raises(AlreadyExists, match="InferenceReplica/demo/svc-engine"):
        cluster.create_object(_irep())


def test_a_pod_mounting_a_volume_it_does_not_define_is_refused_as_the_api_server_does(cluster):
    pod = make_pod("a")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    with pytest.raises(Invalid, match=r"containers\[0\]\.volumeMounts\[0\]\.name: Not found"):
        cluster.create_pod(pod)
    pod["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert cluster.create_pod(pod)["spec"]["volumes"][0]["name"] == "dshm"


def test_replace_with_a_stale_resource_version_is_a_conflict(cluster):
    first = cluster.create_object(_irep())
    first["spec"]["replicas"] = 3
    second = cluster.replace_object(first)
    assert second["metadata"]["generation"] == 2
    first["spec"]["replicas"] = 4
    with pytest.raises(Conflict, match="InferenceReplica/demo/svc-engine"):
        cluster.replace_object(first)
    second["status"] = {"readyReplicas": 1}
    second["spec"]["replicas"] = 99  # ignored by the status subresource
    third = cluster.replace_status(second)
    assert third["status"] == {"readyReplicas": 1} and third["spec"]["replicas"] == 3
    with pytest.raises(Conflict):
        cluster.replace_status(second)


def test_delete_and_not_found(cluster):
    cluster.create_object(_irep())
    cluster.delete_object("InferenceReplica", NS, "svc-engine")
    assert cluster.get_object("InferenceReplica", NS, "svc-engine") is None
    with pytest.raises(NotFound, match="InferenceReplica/demo/svc-engine"):
        cluster.delete_object("InferenceReplica", NS, "svc-engine")
    with pytest.raises(NotFound, match="Pod/demo/x"):
        cluster.delete_pod(NS, "x")
    with pytest.raises(NotFound, match="PodGroup"):
        cluster.list_objects("PodGroup")  # CRD not installed


def test_repeated_events_are_aggregated(cluster):
    event = {"involvedObject": {"kind": "InferenceService", "namespace": NS, "name": "svc"},
             "type": "Warning", "reason": "InstanceFailed", "message": "instance=0 failed"}
    first = cluster.record_event(event)
    cluster.advance(60)
    again = cluster.record_event(event)
    other = cluster.record_event({**event, "message": "instance=1 failed"})
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert (again["count"], again["firstTimestamp"], again["lastTimestamp"]) == (
        2, "2026-09-27T08:00:00Z", "2026-09-27T08:01:00Z")
    assert other["count"] == 1
    assert len(cluster.list_objects("Event")) == 2


def test_events_expire_an_hour_after_their_last_write(cluster):
    """As the API server's default --event-ttl: each write (a count going up) renews it."""
    event = {"involvedObject": {"kind": "InferenceService", "namespace": NS, "name": "svc"},
             "type": "Normal", "reason": "InstanceUpdating", "message": "instance=0"}
    cluster.record_event(event)
    cluster.record_event({**event, "message": "instance=1"})
    cluster.advance(3000)
    cluster.record_event({**event, "message": "instance=1"})  # counted again: renewed
    cluster.advance(600)
    (kept,) = cluster.list_objects("Event")
    assert (kept["message"], kept["count"]) == ("instance=1", 2)
    cluster.record_event(event)  # a new Event, not a count on the expired one
    assert {e["message"]: e["count"] for e in cluster.list_objects("Event")} == {
        "instance=0": 1, "instance=1": 2}
    cluster.advance(3600)
    assert cluster.list_objects("Event") == []


def test_advancing_to_next_transition_always_changes_something(cluster):
    assert cluster.next_transition_at() is None
    cluster.create_pod(make_pod("a", container={"readinessProbe": {
        "tcpSocket": {"port": 8000}, "periodSeconds": 7}}))
    seen = []
    while (when := cluster.next_transition_at()) is not None:
        before = get(cluster, "a")
        cluster.advance((when - cluster.now()).total_seconds())
        assert get(cluster, "a") != before
        seen.append(elapsed(cluster))
    assert seen == [0, 20, 27]  # bound, started, ready


def test_list_pods_filters_by_labels_and_returns_copies(cluster):
    cluster.create_pod(make_pod("a"))
    other = make_pod("b")
    other["metadata"]["labels"] = {"app": "router"}
    cluster.create_pod(other)
    pods = cluster.list_pods({"app": "engine"})
    assert [p["metadata"]["name"] for p in pods] == ["a"]
    pods[0]["metadata"]["labels"]["app"] = "changed"
    assert get(cluster, "a")["metadata"]["labels"]["app"] == "engine"


def test_list_objects_selects_by_field_equality_as_the_api_server_does(cluster):
    def event(name: str, kind: str, reason: str, involved: str = "svc") -> dict:
        return {"metadata": {"namespace": NS, "name": name},
                "involvedObject": {"kind": "InferenceService", "namespace": NS,
                                   "name": involved},
                "type": kind, "reason": reason, "message": name}

    cluster.record_event(event("a", "Normal", "InstanceReady"))
    cluster.record_event(event("b", "Warning", "InstanceFailed"))
    cluster.record_event(event("c", "Warning", "DrainOverdue", involved="other"))

    def messages(**fields) -> list[str]:
        return sorted(e["message"] for e in cluster.list_objects("Event", fields=fields))

    assert messages() == ["a", "b", "c"]
    assert messages(type="Warning") == ["b", "c"]
    assert messages(**{"type": "Warning", "involvedObject.name": "svc"}) == ["b"]
    # A field the object lacks reads as "", as the API server reads it.
    assert messages(**{"source.host": ""}) == ["a", "b", "c"]
    assert messages(**{"source.host": "node-1"}) == []


def test_a_resent_outbox_entry_is_not_counted_again(cluster):
    def sent(sequence: int, source: str = "uid-a") -> dict:
        return {"metadata": {"annotations": {SEQUENCE_ANNOTATION: f"{source}/{sequence}"}},
                "involvedObject": {"kind": "InferenceService", "namespace": NS, "name": "svc"},
                "type": "Normal", "reason": "InstanceCreating", "message": "instance=0"}

    first = cluster.record_event(sent(3))
    assert cluster.record_event(sent(3)) is None  # the same entry again: skipped
    assert cluster.record_event(sent(2)) is None  # an older one of the same record
    repeat = cluster.record_event(sent(4))  # a new entry: a true repeat
    assert (first["count"], repeat["count"]) == (1, 2)
    assert repeat["metadata"]["annotations"][SEQUENCE_ANNOTATION] == "uid-a/4"
    # A recreated InferenceReplica numbers from 1 again: its entries are its own.
    assert cluster.record_event(sent(1, source="uid-b"))["count"] == 3
    assert len(cluster.list_objects("Event")) == 1
