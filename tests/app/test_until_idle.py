"""``reconcile --until-idle`` on a cluster that cannot announce its transitions.

A real cluster is polled: the simulated one below keeps its kubelet and scheduler
but hides when they will next act (``next_transition_at`` is None, as on a real
API server) and sets ``poll_seconds``, so the loop must look again by itself.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from omegitops.app.passes import MANAGED
from omegitops.app.untilidle import BUDGET_SPENT, IDLE, run_until_idle
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.model.replica import decode_rows
from omegitops.render import pods as P
from tests.conftest import EXAMPLES
from tests.fleet import write_service


class PolledSim(SimCluster):
    """The simulator seen as a real cluster is: nothing announced, polled every 5 s."""

    poll_seconds = 5.0

    def __init__(self, path) -> None:
        super().__init__(path)
        self.looks: list[datetime] = []

    def next_transition_at(self) -> datetime | None:
        return None

    def advance(self, seconds: float) -> datetime:
        moved = super().advance(seconds)
        self.looks.append(moved)
        return moved


def _cluster(tmp_path) -> PolledSim:
    SimCluster.init(tmp_path / "cluster.json")
    return PolledSim(tmp_path / "cluster.json")


def _phases(cluster) -> list[str]:
    return [row["phase"] for replica in cluster.list_objects(INFERENCE_REPLICA, MANAGED)
            for row in decode_rows(replica["status"]["instances"])]


def test_the_examples_are_polled_to_the_end_of_the_budget_and_finish_on_the_next_run(
        tmp_path):
    # The examples' instanceReadyTimeout is 30m, past a 900 s budget: that deadline is
    # the only planned wake-up, yet the fleet must be looked at every 5 s until the
    # budget's end (llama-chat's minReadySeconds of 900 keeps it in flight to there).
    items = resolved_components(load(EXAMPLES))
    with _cluster(tmp_path) as cluster:
        start = cluster.now()
        passes = []
        assert run_until_idle(cluster, items, 900, passes.append) == BUDGET_SPENT
        assert all(P.is_ready(p) and P.gate_set(p) for p in cluster.list_pods(MANAGED))
        assert (passes[-1].now - start).total_seconds() == 900
        gaps = [(b - a).total_seconds() for a, b in zip([start, *cluster.looks], cluster.looks)]
        assert max(gaps) <= 5.0
        assert run_until_idle(cluster, items, 900) == IDLE
        assert set(_phases(cluster)) == {"Ready"}


def test_a_near_deadline_does_not_put_off_the_next_look(tmp_path):
    # Containers are ready long before the 90 s deadline: polling puts them into
    # rotation then, rather than sleeping to the deadline and failing every Instance.
    repo = write_service(tmp_path / "repo", lifecycle={"instanceReadyTimeout": "90s"})
    items = resolved_components(load(repo))
    with _cluster(tmp_path) as cluster:
        start = cluster.now()
        assert run_until_idle(cluster, items, 900) == IDLE
        assert _phases(cluster) == ["Ready", "Ready"]
        assert (cluster.now() - start).total_seconds() < 90


@pytest.mark.parametrize("how, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_run_keeps_its_passes_writes_the_report_and_says_so(
        tmp_path, cli, monkeypatch, how, code):
    """Ctrl-C or SIGTERM during --until-idle: the passes already applied stay (on sim:
    the state is saved, not discarded), the report is written, one line says so, and
    the exit code is 128 + the signal's number."""
    import os
    import signal

    from omegitops.app import untilidle

    real, calls = untilidle.run_pass, []

    def interrupted_third_pass(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            if how == "SIGINT":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(untilidle, "run_pass", interrupted_third_pass)
    state, report = tmp_path / "c.json", tmp_path / "report"
    before = signal.getsignal(signal.SIGTERM)
    got, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{state}",
                      "--until-idle", "--report-dir", str(report))
    assert got == code, err
    assert f"interrupted by {how} after 2 passes" in err
    assert err.strip().splitlines()[-1].startswith("omegitops: interrupted")
    saved = json.loads(state.read_text())["objects"].get("InferenceReplica", {})
    assert len(saved) == 7  # the two passes' writes were kept
    assert (report / "status.json").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back


def test_sigterm_while_a_component_is_planned_stops_the_run(tmp_path, cli, monkeypatch):
    """SIGTERM arriving while one component is planned is the run's, not that
    component's error: the run stops as documented (the report written, exit 143), it
    does not go on with 'not planned, Interrupted'."""
    import os
    import signal

    from omegitops.app import passes as reconcile

    real, calls = reconcile.plan_item, []

    def terminated_while_planning(*args, **kwargs):
        calls.append(1)
        if len(calls) == 10:  # inside the second pass's planning
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(reconcile, "plan_item", terminated_while_planning)
    state, report = tmp_path / "c.json", tmp_path / "report"
    got, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{state}",
                      "--until-idle", "--report-dir", str(report))
    assert got == 143, err
    assert "not planned" not in err
    assert "interrupted by SIGTERM" in err
    assert (report / "status.json").exists()


def test_a_second_ctrl_c_while_stopping_is_ignored_and_the_report_agrees(tmp_path, cli,
                                                                         monkeypatch):
    """A second Ctrl-C 50 ms after the first used to print a traceback and, on sim:,
    leave the cluster as before the run while the report was written. Once stopping,
    the run ignores further interrupts: saved cluster and report agree."""
    import os
    import signal

    from omegitops.app import passes as reconcile
    from omegitops.app import untilidle
    from omegitops.report import status as report

    real_pass, real_write, calls = reconcile.run_pass, report.write_report, []

    def interrupted_third_pass(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_pass(*args, **kwargs)

    def write_interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the report is made
        return real_write(*args, **kwargs)

    monkeypatch.setattr(untilidle, "run_pass", interrupted_third_pass)
    monkeypatch.setattr(report, "write_report", write_interrupted)
    before = signal.getsignal(signal.SIGINT)
    state, out = tmp_path / "c.json", tmp_path / "report"
    got, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{state}",
                      "--until-idle", "--report-dir", str(out))
    assert got == 130, err
    assert "Traceback" not in err
    saved = json.loads(state.read_text())["objects"].get("InferenceReplica", {})
    written = json.loads((out / "status.json").read_text())
    assert len(saved) == 7
    assert sum(len(s["components"]) for s in written["services"]) == 7
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("failing, code", [(range(2, 3), 0), (range(2, 11), 0),
                                           (range(4, 10_000), 1)])
def test_a_passing_fault_of_the_cluster_fails_the_run_only_if_it_ends_in_one(
        tmp_path, cli, monkeypatch, failing, code):
    """An API server restarting mid-rollout (connections refused, then 403s no review
    confirms: tests/wire) fails a pass's LISTs: the pass writes nothing and the next one
    carries on. The run is a success when a later pass goes clean, and says what it met
    as warnings; a run whose last pass met such a fault exits 1."""
    from omegitops.cluster.errors import Transient

    listed = []
    real = SimCluster.list_objects

    def flaky(self, kind, *args, **kwargs):
        if kind == "Pod":
            listed.append(1)
            if len(listed) in failing:
                raise Transient("Pod list: GET /api/v1/pods: ConnectionRefusedError (injected)")
        return real(self, kind, *args, **kwargs)

    monkeypatch.setattr(SimCluster, "list_objects", flaky)
    state = tmp_path / "c.json"
    got, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{state}",
                      "--until-idle", "--max-seconds", "3600")
    assert got == code, err
    assert "(injected); the next pass tries again" in err
    if code:
        assert "the last pass met the cluster's faults" in err
    else:
        assert "omegitops: error" not in err and "\nerror" not in err, err
        assert json.loads(state.read_text())["objects"]["InferenceReplica"]
