"""Rules of the documents on the real control plane only: each pass as the job's
ServiceAccount, with the invariants after every pass, on KWOK's pod timings and the
wall clock. The scenarios that run the same on ``sim:`` and here are written once, in
the module of their document under ``tests/rules/``; these two have sim: counterparts
of their own shape (``tests/lifecycle/test_converged.py``,
``tests/lifecycle/test_lost_nodes.py``)."""

from __future__ import annotations

import pytest

from omegitops.render import pods as P
from tests.backends import NAME, ControlPlaneBackend, messages, rows, serving_gangs

RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}


@pytest.fixture
def converged(control_plane, tmp_path):
    """``converged(**service)``: the service brought to rest on the control plane, and
    a ``change(**more)`` that rewrites it (``tests/backends.py``)."""
    backend = ControlPlaneBackend(control_plane, tmp_path)
    yield backend.converged
    backend.close()


def test_a_component_at_rest_is_recognised_without_planning_it(converged, monkeypatch):
    """tests/lifecycle/test_converged.py on the real API server: the fingerprint the job records
    survives the round trip through the InferenceReplica CRD, so a pass at rest plans
    nothing and writes nothing, and a lost pod is planned at once."""
    from omegitops.app import passes as reconcile
    from omegitops.lifecycle.converged import CONVERGED_ANNOTATION

    scenario, _ = converged(replicas=2, grace=2)
    scenario.run_pass()  # records the fingerprint if the last pass did not
    assert CONVERGED_ANNOTATION in scenario.replica(NAME)["metadata"]["annotations"]
    calls: list[str] = []
    original = reconcile.plan_component
    monkeypatch.setattr(reconcile, "plan_component",
                        lambda d, o, now: calls.append(d.component) or original(d, o, now))
    result = scenario.run_pass()
    assert calls == [] and result.applied == 0, (calls, result.applied)
    scenario.fault("evict", f"{NAME}-0-default-0")
    scenario.until(lambda s: bool(calls), seconds=30)


def test_a_gang_whose_worker_node_stops_reporting_restarts_named_and_out_of_rotation(
        converged):
    """A KWOK node stops reporting; the real node lifecycle controller has the worker
    deleted, and it stays Terminating. The Ready gang has fewer pods than it needs from
    that moment: its restart opens at the deletion, its leader leaves rotation, and
    once the pod is past its grace the restart's waiting names it and its node (as on
    sim:, tests/lifecycle/test_lost_nodes.py)."""
    scenario, _ = converged(replicas=1, workers=1, grace=1,
                            lifecycle={**RECREATE, "instanceReadyTimeout": "30m"})
    worker = f"{NAME}-0-worker-0"
    scenario.fault("node-down", worker)
    try:
        scenario.until(lambda s: any(P.is_terminating(p) for p in s.pods(f"{NAME}-0-")),
                       seconds=150)
        scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting", seconds=30)
        triggered = messages(scenario, "RestartTriggered")
        assert any("is being deleted on node" in m for m in triggered), triggered

        def named(s) -> bool:
            waiting = (rows(s)[0].get("operation") or {}).get("waiting") or ""
            return "still terminating past its deletion grace" in waiting

        scenario.until(named, seconds=60)
        assert serving_gangs(scenario) == 0, "a gang that lost a pod is out of rotation"
        assert rows(scenario)[0]["incarnation"] == 2
    finally:
        # The silent node's pods go only with its Node object: without this, its
        # namespace could never finish going, and later tests wait on it.
        scenario.fault("node-removed", worker)
