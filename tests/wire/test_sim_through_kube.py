"""The rollout scenarios of tests/test_updates.py and friends, through the real client path.

Each scenario runs twice on a fresh simulated cluster: once on the ``sim:`` backend
itself, once on ``KubeCluster`` talking HTTP to the API double whose storage is that
SimCluster (``simstore.SimStore``). The invariants of ``tests/scenario.py`` are
checked after every pass of both, the scenario's own assertions hold on both, and
the two runs must agree pass by pass: the same Instances, rows, pods, uids, images,
gates and events at the same sim times. The kube run also asserts the shape of its
traffic: the same LISTs every pass, and status written through ``/status``.

The backend under test reports the sim's clock (``SimClockKube``, see simstore.py):
the planner compares ``now()`` with timestamps the sim wrote.
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from pathlib import Path

import pytest
from apiserver import ApiServerDouble
from crdschema import load_crd_schemas
from simstore import SimClockKube, SimStore
from wire_helpers import CRDS, EXAMPLES

from omegitops.cluster.base import EVENT, INFERENCE_REPLICA
from omegitops.cluster.kube import RetryPolicy, plain_client
from omegitops.cluster.sim import SimCluster
from omegitops.lifecycle import pods as P
from omegitops.lifecycle.replica import decode_rows
from omegitops.manifests.load import load, resolved_components
from omegitops.reconcile import run_pass
from tests.fleet import strategy, write_service
from tests.scenario import check_invariants

NAME = "svc-engine"
LISTS = ["/api/v1/pods", "/apis/ome.io/v1beta1/inferencereplicas",
         "/apis/apps/v1/controllerrevisions", "/api/v1/services"]
PODGROUP_LIST = "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"


class Passes:
    """``tests/scenario.Scenario`` on one live SimCluster, through ``cluster``: the sim
    itself, or a KubeCluster on the double serving it (``api``)."""

    def __init__(self, sim: SimCluster, cluster, repo: Path,
                 api: ApiServerDouble | None = None) -> None:
        self.sim, self.cluster, self.repo, self.api = sim, cluster, repo, api
        self.lock = api.lock if api is not None else contextlib.nullcontext()
        self.max_rows: Counter = Counter()
        self.watches: list = []
        self.trace: list = []
        self.lists: list[tuple[str, ...]] = []
        # After a fault from outside, a gang may be partial until the planner restarts it.
        self.strict_gangs = True

    def run_pass(self):
        loaded = load(self.repo)
        assert loaded.result.ok, loaded.result.errors
        items = resolved_components(loaded)
        for item in items:
            key = (item.service.id.name, item.lifecycle.component)
            self.max_rows[key] = max(self.max_rows[key], item.lifecycle.replicas)
        if self.api is not None:
            self.api.clear_log()
        result = run_pass(self.cluster, items)
        assert not result.errors, result.errors
        if self.api is not None:
            self.lists.append(tuple(r.path for r in self.api.calls("list")))
        with self.lock:
            check_invariants(self.sim, self.max_rows, items, whole=self.strict_gangs)
            self.trace.append((self.sim.now().isoformat(), result.applied, self._state()))
        for watch in self.watches:
            watch(self)
        return result

    def settle(self, result) -> bool:
        with self.lock:
            sim = self.sim
            if result.applied:
                nxt = sim.next_transition_at()
                gap = 0.0 if nxt is None else min(1.0, (nxt - sim.now()).total_seconds())
                sim.advance(max(gap, 0.0))
                return True
            wakes = [t for t in (result.wake_at, sim.next_transition_at()) if t]
            if not wakes:
                return False
            sim.advance(max(0.0, (min(wakes) - sim.now()).total_seconds()))
            return True

    def until_idle(self, max_passes: int = 300):
        for _ in range(max_passes):
            result = self.run_pass()
            if not result.busy or not self.settle(result):
                return result
        raise AssertionError(f"still busy after {max_passes} passes")

    def until(self, predicate, max_passes: int = 300):
        for _ in range(max_passes):
            result = self.run_pass()
            if predicate(self):
                return result
            assert self.settle(result), "nothing left to happen and the condition never held"
        raise AssertionError(f"condition not reached in {max_passes} passes")

    def fault(self, kind: str, **where) -> None:
        self.strict_gangs = False
        with self.lock:
            self.sim.inject_fault(kind, **where)

    # -- reading the sim ------------------------------------------------------------

    def replica(self, name: str) -> dict:
        with self.lock:
            (found,) = [r for r in self.sim.list_objects(INFERENCE_REPLICA)
                        if r["metadata"]["name"] == name]
        return found

    def rows(self, name: str = NAME) -> dict[int, dict]:
        return {r["index"]: r for r in decode_rows(self.replica(name)["status"]["instances"])}

    def status(self, name: str = NAME) -> dict:
        return self.replica(name)["status"]

    def pods(self, prefix: str = "") -> list[dict]:
        with self.lock:
            return [p for p in self.sim.list_pods() if p["metadata"]["name"].startswith(prefix)]

    def messages(self, reason: str) -> list[str]:
        with self.lock:
            return [e["message"] for e in self.sim.list_objects(EVENT) if e["reason"] == reason]

    def _state(self):
        """What both runs must agree on after a pass (not names of Events, nor
        resourceVersions: see the module docstring of simstore.py)."""
        replicas = []
        for replica in sorted(self.sim.list_objects(INFERENCE_REPLICA),
                              key=lambda r: r["metadata"]["name"]):
            rows = decode_rows((replica.get("status") or {}).get("instances"))
            replicas.append((replica["metadata"]["name"], replica["spec"]["revision"], tuple(
                (r["index"], r["phase"], r["revision"], r["incarnation"],
                 (r.get("operation") or {}).get("step")) for r in rows)))
        pods = tuple(sorted(
            (p["metadata"]["name"], p["metadata"]["uid"], p["status"].get("phase"),
             P.gate_set(p), P.is_terminating(p), tuple(c["image"] for c in p["spec"]["containers"]))
            for p in self.sim.list_pods()))
        events = tuple(sorted((e["reason"], e["message"], e.get("count"))
                              for e in self.sim.list_objects(EVENT)))
        return tuple(replicas), pods, events


@pytest.fixture
def twin(tmp_path):
    """``twin(body, service=... | examples=True, podgroups=...)``: ``body(passes, repo)`` on
    the sim: backend, then through the double; both must pass and agree pass by pass.
    Returns the kube run (its ``api`` and store keep the request log and the writes)."""
    def run(body, *, service: dict | None = None, examples: bool = False,
            podgroups: bool = False) -> Passes:
        runs = []
        for mode in ("sim", "kube"):
            root = tmp_path / mode
            repo = root / "repo"
            if examples:
                shutil.copytree(EXAMPLES, repo)
            else:
                write_service(repo, **service)
            path = root / "cluster.json"
            SimCluster.init(path, podgroups=podgroups)
            with contextlib.ExitStack() as stack:
                sim = stack.enter_context(SimCluster(path))
                if mode == "sim":
                    passes = Passes(sim, sim, repo)
                else:
                    store = SimStore(sim)
                    api = stack.enter_context(ApiServerDouble(
                        store=store, podgroups=podgroups, crd_schemas=load_crd_schemas(CRDS)))
                    client = plain_client(api.url)
                    stack.callback(client.close)
                    kube = SimClockKube(sim, api, api_client=client, timeout=5.0,
                                        retry=RetryPolicy(attempts=1, sleep=lambda _: None))
                    passes = Passes(sim, kube, repo, api)
                body(passes, repo)
                runs.append(passes)
                if mode == "kube":
                    _check_traffic(passes, store, podgroups)
        sim_run, kube_run = runs
        for number, (one, other) in enumerate(zip(sim_run.trace, kube_run.trace, strict=True)):
            assert one == other, f"pass {number + 1}: {_difference(one, other)}"
        return kube_run
    return run


def _difference(one: tuple, other: tuple) -> str:
    """The first part of two pass states that differs, sim: first, kube second."""
    (time, applied, state), (time2, applied2, state2) = one, other
    for what, mine, theirs in zip(("replicas", "pods", "events"), state, state2, strict=True):
        if mine != theirs:
            return (f"at {time}, {what} only on sim: {sorted(set(mine) - set(theirs))}, "
                    f"only through kube: {sorted(set(theirs) - set(mine))}")
    return f"time/writes {(time, applied)} on sim:, {(time2, applied2)} through kube"


def _check_traffic(passes: Passes, store: SimStore, podgroups: bool) -> None:
    want = tuple(LISTS + [PODGROUP_LIST] * podgroups)
    assert passes.lists and all(lists == want for lists in passes.lists), set(passes.lists)
    assert store.unsupported == []
    by_method = Counter(label for _, _, label in store.writes)
    for method, path, label in store.writes:
        through_status = path.endswith("/status")
        assert through_status == (label in ("set_pod_condition", "replace_status")), (
            method, path, label)
        if through_status:
            assert method == ("PATCH" if label == "set_pod_condition" else "PUT")
    assert by_method["replace_status"] and by_method["create_pod"]


def converge(service: dict):
    def setup(passes: Passes, repo: Path):
        passes.until_idle()

        def change(**more):
            write_service(repo, **{**service, **more})
        return change
    return setup


def serving_never_below(desired: int):
    def watch(passes):
        assert passes.status()["servingReplicas"] >= desired, passes.rows()
    return watch


def unavailable_at_most(budget: int, desired: int):
    def watch(passes):
        assert desired - passes.status()["servingReplicas"] <= budget, passes.rows()
    return watch


def test_examples_come_up_from_nothing(twin):
    def body(passes, repo):
        passes.until_idle()
        for name, desired in [("qwen3-0-6b-engine", 2), ("llama-3-2-3b-instruct-engine", 2),
                              ("llama-chat-engine", 1), ("llama-pd-engine", 2),
                              ("llama-pd-decoder", 1), ("llama-pd-router", 1),
                              ("deepseek-r1-engine", 2)]:
            status = passes.status(name)
            assert (status["replicas"], status["readyReplicas"],
                    status["availableReplicas"]) == (desired, desired, desired), name
            assert all(row["phase"] == "Ready" for row in passes.rows(name).values())
        assert sorted(p["metadata"]["name"] for p in passes.pods("qwen3-0-6b")) == [
            "qwen3-0-6b-engine-0-default-0", "qwen3-0-6b-engine-1-default-0"]
        assert passes.run_pass().applied == 0

    kube = twin(body, examples=True)
    # The first pass creates every component: one GET (404) and one POST per Event.
    assert len(kube.trace) > 5


def test_surge_then_drain_single_pod_takes_the_other_ordinal(twin):
    service = {"replicas": 2, "lifecycle": strategy("SurgeThenDrain", maxSurge="25%",
                                                    maxUnavailable="25%")}

    def body(passes, repo):
        change = converge(service)(passes, repo)
        passes.watches.append(serving_never_below(2))
        before = passes.replica(NAME)["spec"]["revision"]
        change(image="sglang:v2")
        passes.run_pass()
        after = passes.replica(NAME)["spec"]["revision"]
        assert after != before
        moving = [r for r in passes.rows().values() if r["operation"]]
        assert len(moving) == 1 and moving[0]["operation"]["strategy"] == "SurgeThenDrain"
        passes.until_idle()
        assert {i: (r["revision"], r["incarnation"], r["phase"])
                for i, r in passes.rows().items()} == {0: (after, 1, "Ready"),
                                                      1: (after, 1, "Ready")}
        assert sorted(p["metadata"]["name"] for p in passes.pods()) == [
            "svc-engine-0-default-1", "svc-engine-1-default-1"]

    twin(body, service=service)


def test_in_place_image_change_keeps_pod_name_node_and_incarnation(twin):
    life = strategy("InPlaceIfPossible", maxUnavailable=1)
    service = {"replicas": 2, "lifecycle": life}

    def body(passes, repo):
        change = converge(service)(passes, repo)
        passes.watches.append(unavailable_at_most(1, 2))
        before = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"])
                  for p in passes.pods()}
        change(image="sglang:v2")
        passes.run_pass()
        assert [r["operation"]["mode"] for r in passes.rows().values() if r["operation"]] == [
            "InPlace"]
        passes.until_idle()
        assert {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"])
                for p in passes.pods()} == before
        revision = passes.replica(NAME)["spec"]["revision"]
        assert all(r["incarnation"] == 1 and r["revision"] == revision
                   for r in passes.rows().values())
        assert all(p["spec"]["containers"][0]["image"] == "sglang:v2" for p in passes.pods())

    kube = twin(body, service=service)
    assert ("PATCH", "/api/v1/namespaces/demo/pods/svc-engine-0-default-0",
            "patch_pod_images") in kube.api.store.writes


def test_gang_surge_gets_a_replacement_at_a_new_index(twin):
    service = {"replicas": 2, "workers": 1, "lifecycle": strategy(maxSurge=1, maxUnavailable=0)}

    def body(passes, repo):
        change = converge(service)(passes, repo)
        passes.watches.append(serving_never_below(2))
        change(image="sglang:v2")
        passes.run_pass()
        current = passes.rows()
        assert current[0]["operation"]["replacement"] == 2
        assert current[2]["phase"] == "Creating" and current[2]["incarnation"] == 1
        passes.until_idle()
        final = passes.rows()
        assert sorted(final) == [0, 2]
        revision = passes.replica(NAME)["spec"]["revision"]
        assert all(r["revision"] == revision for r in final.values())
        assert sorted(p["metadata"]["name"] for p in passes.pods()) == [
            "svc-engine-0-leader-0", "svc-engine-0-worker-0",
            "svc-engine-2-leader-0", "svc-engine-2-worker-0"]

    twin(body, service=service, podgroups=True)


def test_oom_restarts_the_instance_under_recreate_policy(twin):
    service = {"replicas": 1, "lifecycle": {"restartPolicy": "RecreateInstanceOnPodRestart"}}

    def body(passes, repo):
        converge(service)(passes, repo)
        passes.fault("oom", pod="svc-engine-0-default-0")
        passes.until(lambda s: bool(s.messages("RestartTriggered")))
        assert passes.rows()[0]["phase"] == "Restarting"
        assert passes.messages("RestartTriggered") == [
            ("OMENative component=engine instance=0 restart triggered: pod svc-engine-0-default-0 "
             "container ome-container restarted after Ready: OOMKilled (exit 137) "
             "(incarnation=2)")]
        passes.until_idle()
        row = passes.rows()[0]
        assert (row["phase"], row["incarnation"]) == ("Ready", 2)
        failure = row["lastFailure"]
        assert (failure["pod"], failure["container"], failure["reason"],
                failure["exitCode"]) == ("svc-engine-0-default-0", "ome-container",
                                         "OOMKilled", 137)
        (pod,) = passes.pods()
        assert pod["metadata"]["labels"]["ome.io/instance-incarnation"] == "2"

    twin(body, service=service)


def test_failed_surge_retries_until_held_counting_repeat_events(twin):
    values = {"lifecycle": {"stuckPodGracePeriod": "60s",
                            "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}}}
    service = {"replicas": 1, "values": values}

    def body(passes, repo):
        change = converge(service)(passes, repo)
        passes.watches.append(serving_never_below(1))
        passes.fault("imagepull", image="sglang:bad")
        change(image="sglang:bad")
        passes.until(lambda s: bool(s.messages("RevisionHeld")), max_passes=400)
        revision = passes.replica(NAME)["spec"]["revision"]
        assert passes.status()["revisionRetries"][revision]["held"]
        assert passes.rows()[0]["phase"] == "Ready"

    kube = twin(body, service=service)
    # A repeated Event is counted on the one KubeCluster named: GET, then a merge PATCH.
    assert any(label == "(event fields)" for _, _, label in kube.api.store.writes)
