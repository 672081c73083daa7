"""Events survive a pass that stops after its InferenceReplica write: the plan records
them in the InferenceReplica's outbox, and what is not sent goes with the next pass."""

from __future__ import annotations

from omegitops.cluster.base import EVENT, INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.model.actions import Event
from omegitops.model.outbox import OUTBOX, SEQUENCE, post
from tests.fleet import write_service
from tests.scenario import Scenario

NAME = "svc-engine"


def _replica(scenario: Scenario) -> dict:
    with SimCluster(scenario.path) as cluster:
        (replica,) = cluster.list_objects(INFERENCE_REPLICA)
    return replica


def _events(scenario: Scenario) -> list[tuple[str, str, int]]:
    with SimCluster(scenario.path) as cluster:
        return sorted((e["reason"], e["message"].split(" at ")[0], e["count"])
                      for e in cluster.list_objects(EVENT))


def test_a_kill_after_the_replica_write_delays_the_events_to_the_next_pass(tmp_path):
    scenario = Scenario(tmp_path, write_service(tmp_path / "repo"))
    # Three writes get through (the new revision, stored first, then the InferenceReplica
    # and its status), then the job dies.
    scenario.run_pass(kill_after=3)
    status = _replica(scenario)["status"]
    assert [(e["sequence"], e["reason"]) for e in status[OUTBOX]] == [
        (1, "InstanceCreating"), (2, "InstanceCreating")]
    assert _events(scenario) == []
    scenario.run_pass()
    assert _events(scenario) == [
        ("InstanceCreating", "OMENative component=engine instance=0 creating", 1),
        ("InstanceCreating", "OMENative component=engine instance=1 creating", 1)]
    status = _replica(scenario)["status"]
    assert OUTBOX not in status and status[SEQUENCE] == 2
    # Killed between sending the events and clearing the outbox: sent again, not counted.
    scenario.until_idle()
    before = _events(scenario)
    with SimCluster(scenario.path) as cluster:
        (replica,) = cluster.list_objects(INFERENCE_REPLICA)
        replica["status"][OUTBOX] = [{"sequence": 1, "type": "Normal",
                                      "reason": "InstanceCreating",
                                      "message": _message(cluster, "instance=0 creating")}]
        cluster.replace_status(replica)
    assert scenario.run_pass().applied == 1  # the outbox cleared; the event skipped
    assert _events(scenario) == before
    assert OUTBOX not in _replica(scenario)["status"]


def _message(cluster, part: str) -> str:
    return next(e["message"] for e in cluster.list_objects(EVENT) if part in e["message"])


def test_post_carries_unsent_events_first_and_numbers_new_ones_on():
    previous = {SEQUENCE: 7, OUTBOX: [
        {"sequence": 7, "type": "Warning", "reason": "InstanceFailed", "message": "m7"}]}
    events, fields = post(previous, [Event("Normal", "InstanceReady", "m8"),
                                     Event("Normal", "InstanceReady", "m9")])
    assert [(e.sequence, e.message) for e in events] == [(7, "m7"), (8, "m8"), (9, "m9")]
    assert fields[SEQUENCE] == 9
    assert [e["sequence"] for e in fields[OUTBOX]] == [7, 8, 9]
    # Nothing pending: no outbox, and the counter stays.
    assert post({SEQUENCE: 9}, []) == ([], {SEQUENCE: 9})
    assert post({}, []) == ([], {})
