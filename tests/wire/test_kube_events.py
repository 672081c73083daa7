"""Events on the kube backend when requests fail: sent from the InferenceReplica's outbox
exactly once, whatever failed; the InferenceService's uid read once per run; and the
writes of a pass counted as they happen. (A resent outbox entry, and Events on the
InferenceService where kubectl describe finds them, on the real API server:
tests/controlplane/.)"""

from __future__ import annotations

import shutil

import pytest
from wire_helpers import EXAMPLES, serve_inference_services

from omegitops.app.passes import run_pass
from omegitops.manifests.load import load, resolved_components
from omegitops.model.outbox import OUTBOX, SEQUENCE

QWEN = "qwen3-0-6b"
REPLICA = f"{QWEN}-engine"
QWEN_PODS = rf"/namespaces/{QWEN}/pods$"
WRITE_VERBS = ("create", "update", "patch", "delete")


@pytest.fixture(scope="module")
def items():
    return resolved_components(load(EXAMPLES))


def _events(api) -> list[dict]:
    return sorted((e for e in api.objects("Event") if e["involvedObject"]["name"] == QWEN),
                  key=lambda e: e["message"])


def _counts(api) -> list[tuple[str, int]]:
    return [(e["message"], e["count"]) for e in _events(api)]


def _status(api) -> dict:
    return api.get("InferenceReplica", QWEN, REPLICA)["status"]


def test_events_planned_before_a_failed_pod_create_are_sent_by_the_next_pass(kube, api, items):
    api.fail("POST", QWEN_PODS, status=500, times=3)  # every try of the first pod create
    first = run_pass(kube, items)
    assert [e for e in first.errors if e.startswith(f"{REPLICA}:")]
    # The operations are recorded, and with them the events they announce; none sent yet.
    status = _status(api)
    assert [(e["sequence"], e["reason"]) for e in status[OUTBOX]] == [
        (1, "InstanceCreating"), (2, "InstanceCreating")]
    assert status[SEQUENCE] == 2 and _events(api) == []
    # The other components sent theirs and cleared their outboxes.
    others = [r for r in api.objects("InferenceReplica") if r["metadata"]["name"] != REPLICA]
    assert others and all(OUTBOX not in r["status"] for r in others)
    assert not run_pass(kube, items).errors
    assert [(m.split(" at revision")[0], c) for m, c in _counts(api)] == [
        ("OMENative component=engine instance=0 creating", 1),
        ("OMENative component=engine instance=1 creating", 1)]
    assert OUTBOX not in _status(api) and _status(api)[SEQUENCE] == 2


def test_a_conflict_on_the_object_write_after_the_status_write_keeps_the_events(
        kube, api, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    run_pass(kube, resolved_components(load(repo)))
    path = repo / "services" / QWEN / f"{QWEN}.yaml"
    path.write_text(path.read_text().replace("maxReplicas: 2", "maxReplicas: 3")
                    .replace("minReplicas: 2", "minReplicas: 3"))
    scaled = resolved_components(load(repo))
    # The status write (rows and outbox) lands; the object write after it loses a race.
    api.fail("PUT", rf"/inferencereplicas/{REPLICA}$", status=409, reason="Conflict")
    run_pass(kube, scaled)
    assert [e["message"].split(" at revision")[0] for e in _status(api)[OUTBOX]] == [
        "OMENative component=engine instance=2 creating"]
    assert len(_events(api)) == 2
    run_pass(kube, scaled)
    assert [c for m, c in _counts(api) if "instance=2" in m] == [1]
    assert OUTBOX not in _status(api)


def test_a_lost_answer_to_an_event_post_is_not_counted_twice(kube, api, items):
    # The first Event POST is carried out but its answer is lost; the client tries again
    # and meets its own Event.
    api.fail("POST", rf"/namespaces/{QWEN}/events$", drop=True, landed=True)
    assert not run_pass(kube, items).errors
    assert len(api.calls("create", rf"/namespaces/{QWEN}/events$")) == 3
    assert [c for _, c in _counts(api)] == [1, 1]
    assert OUTBOX not in _status(api)


def test_events_carry_the_inference_service_uid_read_once_per_run(kube, api, items):
    services = {s["metadata"]["name"]: s["metadata"]["uid"]
                for s in serve_inference_services(api)}
    run_pass(kube, items)
    run_pass(kube, items)
    events = api.objects("Event")
    assert events
    for event in events:
        involved = event["involvedObject"]
        assert involved["uid"] == services[involved["name"]], involved
    gets = [r.path for r in api.calls("get", r"/inferenceservices/")]
    assert len(gets) == len(set(gets)) == len(services)


def test_a_failed_pass_counts_the_writes_made_before_the_failure(kube, api, items):
    api.fail("POST", QWEN_PODS, status=500, times=3)
    result = run_pass(kube, items)
    assert result.errors
    writes = [r for r in api.requests if r.verb in WRITE_VERBS
              and "selfsubject" not in r.path]
    failed = 3
    assert result.applied == len(writes) - failed > 0
