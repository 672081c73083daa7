"""Rollout, repair and failure scenarios on the real control plane, each run the same
way on ``sim:``: both must go through the same Instance phases and operation steps
(timings differ). Where they differ, the simulator is wrong.

Every pass runs as the ``omegitops`` ServiceAccount; the invariants of
``tests/scenario.py`` hold after every pass on both backends.
"""

from __future__ import annotations

import itertools

import pytest
from kubescenario import History, KubeScenario

from omegitops.app.passes import MANAGED
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.fleet import strategy, write_service
from tests.scenario import Scenario

NAME = "svc-engine"
_namespaces = itertools.count()


class Twin:
    """One scenario, on the control plane and on sim:."""

    def __init__(self, cp, tmp_path, **service):
        self.service = service
        self.namespace = f"cp-{next(_namespaces)}"
        self.kube_repo = tmp_path / "kube-repo"
        self.sim_repo = tmp_path / "sim-repo"
        self.write(**service)
        self.kube = KubeScenario(cp, self.kube_repo, {self.namespace})
        # The control plane has the PodGroup CRD: so has the simulated cluster.
        self.sim = Scenario(tmp_path, self.sim_repo, podgroups=True)
        self.sim_history = History()

        def record(scenario):
            with SimCluster(scenario.path) as cluster:
                self.sim_history.record(cluster.list_objects(INFERENCE_REPLICA, MANAGED))

        self.sim.watches.append(record)

    def write(self, **service):
        write_service(self.kube_repo, namespace=self.namespace, **service)
        write_service(self.sim_repo, namespace="demo", **service)

    def change(self, **more):
        self.service = {**self.service, **more}
        self.write(**self.service)

    def watch(self, check):
        """Run ``check(scenario)`` after every pass, on both backends."""
        self.kube.watches.append(check)
        self.sim.watches.append(check)

    def both(self, step):
        """Run ``step(scenario)`` on the control plane, then on sim:."""
        step(self.kube)
        step(self.sim)

    def assert_same_history(self, indices=None):
        kube, sim = self.kube.history.by_instance, self.sim_history.by_instance
        kube = {key[1]: states for key, states in kube.items()
                if indices is None or key[1] in indices}
        sim = {key[1]: states for key, states in sim.items()
               if indices is None or key[1] in indices}
        assert kube == sim, f"control plane {kube}\n!= sim: {sim}"

    def close(self):
        self.kube.cleanup()


@pytest.fixture
def twin(control_plane, tmp_path):
    made = []

    def make(**service):
        made.append(Twin(control_plane, tmp_path, **service))
        return made[-1]

    yield make
    for t in made:
        t.close()


def settled(name=NAME, replicas=None):
    """Every Instance of ``name`` Ready at the current revision with no operation."""
    def check(s):
        replica = s.replica(name)
        rows = s.rows(name)
        want = replica["spec"]["replicas"] if replicas is None else replicas
        return (len(rows) == want and all(
            r["phase"] == "Ready" and not r.get("operation")
            and r["revision"] == replica["spec"]["revision"] for r in rows)
            and replica["status"]["readyReplicas"] == want)
    return check


def until(predicate, seconds=120):
    def step(s):
        if isinstance(s, KubeScenario):
            s.until(predicate, seconds)
        else:
            s.until(predicate)
    return step


def serving_never_below(desired: int):
    def watch(s):
        assert s.status(NAME)["servingReplicas"] >= desired, s.rows(NAME)
    return watch


def test_bring_up_single_pods_and_a_gang(twin):
    t = twin(replicas=2, workers=1, grace=2)
    t.both(until(settled()))
    pods = {p["metadata"]["name"] for p in t.kube.pods()}
    assert pods == {"svc-engine-0-leader-0", "svc-engine-0-worker-0",
                    "svc-engine-1-leader-0", "svc-engine-1-worker-0"}
    # Only the leaders are routed: the Service selects them, the real endpoints show it.
    t.assert_same_history()


def test_surge_then_drain_rollout_of_single_pods(twin):
    t = twin(replicas=2, grace=2,
             lifecycle=strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0))
    t.both(until(settled()))
    t.watch(serving_never_below(2))
    t.change(image="sglang:v2")
    t.both(until(settled()))
    names = sorted(p["metadata"]["name"] for p in t.kube.pods())
    assert names == ["svc-engine-0-default-1", "svc-engine-1-default-1"]
    assert all(p["spec"]["containers"][0]["image"] == "sglang:v2" for p in t.kube.pods())
    t.assert_same_history()


def test_surge_then_drain_rollout_of_a_gang(twin):
    t = twin(replicas=1, workers=1, grace=2,
             lifecycle=strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0))
    t.both(until(settled()))
    t.watch(serving_never_below(1))
    t.change(image="sglang:v2")
    t.both(until(settled()))
    # The replacement gang started at a new index; the old one is gone.
    assert [r["index"] for r in t.kube.rows(NAME)] == [1]
    names = sorted(p["metadata"]["name"] for p in t.kube.pods())
    assert names == ["svc-engine-1-leader-0", "svc-engine-1-worker-0"]
    t.assert_same_history()


def test_in_place_update(twin):
    t = twin(replicas=2, grace=2,
             lifecycle=strategy("InPlaceIfPossible", maxUnavailable=1))
    t.both(until(settled()))
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in t.kube.pods()}
    t.change(image="sglang:v2")
    t.both(until(settled()))
    after = {p["metadata"]["name"]: p for p in t.kube.pods()}
    # Same pods (name and uid), new image, the revision label moved with it.
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == before
    revision = t.kube.replica(NAME)["spec"]["revision"]
    for pod in after.values():
        assert pod["spec"]["containers"][0]["image"] == "sglang:v2"
        assert P.revision_of(pod) == revision
        restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        assert restarts == 1, pod["status"]["containerStatuses"]
    t.assert_same_history()


def test_a_crash_after_ready_restarts_the_instance(twin):
    t = twin(replicas=1, grace=2, lifecycle={"restartPolicy": "RecreateInstanceOnPodRestart"})
    t.both(until(settled()))
    t.both(lambda s: s.fault("oom", "svc-engine-0-default-0"))
    t.both(until(lambda s: s.events("RestartTriggered")))
    t.both(until(settled()))
    [event] = t.kube.events("RestartTriggered")
    assert event["involvedObject"]["kind"] == "InferenceService"
    assert "OOMKilled (exit 137)" in event["message"]
    assert "(incarnation=2)" in event["message"]
    [pod] = t.kube.pods()
    assert pod["metadata"]["labels"]["ome.io/instance-incarnation"] == "2"
    t.assert_same_history()


def test_an_unschedulable_surge_fails_after_the_grace_and_the_old_pod_serves(twin):
    values = {"lifecycle": {"unschedulableGracePeriod": "10s"}}
    life = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)
    t = twin(replicas=1, grace=1, values=values, lifecycle=life)
    t.both(until(settled()))
    t.watch(serving_never_below(1))
    t.both(lambda s: s.fault("unschedulable"))
    try:
        t.change(image="sglang:v2")
        t.both(until(lambda s: any(e["message"].endswith("Unschedulable") or
                                   "unschedulable" in e["message"].lower()
                                   for e in s.events("UpdateFailed"))))
        [row] = t.kube.rows(NAME)
        assert row["lastFailure"]["reason"] == "Unschedulable"
        # The real scheduler's own words reach the record.
        assert "nodes are available" in row["lastFailure"]["message"], row["lastFailure"]
    finally:
        t.both(lambda s: s.fault("unschedulable", clear=True))
    t.both(until(settled(), seconds=180))
    t.assert_same_history()


def test_a_lost_node_takes_its_instance_out_of_service_until_the_node_is_removed(twin):
    """The pod's node stops reporting: the real node lifecycle controller revokes the pod's
    Ready condition, taints the node and has the pod deleted, but the pod stays
    Terminating (nobody can confirm it stopped) and keeps its name. The Instance has
    fewer pods than it needs from the deletion: its restart opens at once and waits for
    the name, saying which pod on which node holds it. Once the Node is removed, the pod
    garbage collector deletes the pod and the Instance is rebuilt."""
    t = twin(replicas=2, grace=1, lifecycle={"restartPolicy": "RecreateInstanceOnPodRestart",
                                             "instanceReadyTimeout": "30m"})
    t.both(until(settled()))
    t.both(lambda s: s.fault("node-down", "svc-engine-0-default-0"))
    t.both(until(lambda s: s.status(NAME)["servingReplicas"] < 2, seconds=90))
    t.both(until(lambda s: any(P.is_terminating(p) for p in s.pods("svc-engine-0-")),
                 seconds=120))

    def named(s) -> bool:
        row = next(r for r in s.rows(NAME) if r["index"] == 0)
        waiting = (row.get("operation") or {}).get("waiting") or ""
        return "svc-engine-0-default-0 on node " in waiting and "deletion grace" in waiting

    # Its name is taken: the restart waits at WaitGone, named, one incarnation higher.
    t.both(until(named, seconds=60))
    [row0] = [r for r in t.kube.rows(NAME) if r["index"] == 0]
    assert (row0["phase"], row0["incarnation"], row0["operation"]["step"]) == (
        "Restarting", 2, "WaitGone"), row0
    t.both(lambda s: s.fault("node-removed", "svc-engine-0-default-0"))
    t.both(until(settled(), seconds=240))
    [row0] = [r for r in t.kube.rows(NAME) if r["index"] == 0]
    assert row0["incarnation"] == 2
    # Instance 1 may or may not have shared the lost node: kube-scheduler spreads pods
    # (LeastAllocated), where the simulated scheduler fills nodes first-fit.
    t.assert_same_history(indices={0})
