"""A converged component is recognised without planning it (lifecycle/converged.py),
and planned again as soon as anything it reads changes."""

from __future__ import annotations

import pytest

from omegitops.app import passes as reconcile
from omegitops.lifecycle.converged import CONVERGED_ANNOTATION
from tests.scenario import converged

NAME = "svc-engine"


@pytest.fixture
def planned(monkeypatch):
    """The components the planner was asked about, pass by pass."""
    calls: list[str] = []
    original = reconcile.plan_component

    def counting(desired, observed, now):
        calls.append(desired.component)
        return original(desired, observed, now)

    monkeypatch.setattr(reconcile, "plan_component", counting)
    return calls


def settled(tmp_path, **service):
    scenario, change = converged(tmp_path, **service)
    scenario.run_pass()  # the first pass at rest records the fingerprint
    return scenario, change


def test_a_component_at_rest_is_not_planned_and_nothing_is_written(tmp_path, planned):
    scenario, _ = settled(tmp_path, replicas=2)
    mark = scenario.replica(NAME)["metadata"]["annotations"][CONVERGED_ANNOTATION]
    before = scenario.replica(NAME)
    planned.clear()
    result = scenario.run_pass()
    assert planned == [] and result.applied == 0 and not result.busy
    assert scenario.replica(NAME) == before
    assert scenario.replica(NAME)["metadata"]["annotations"][CONVERGED_ANNOTATION] == mark


def test_a_lost_pod_is_seen_at_once(tmp_path, planned):
    scenario, _ = settled(tmp_path, replicas=2, lifecycle={
        "restartPolicy": "RecreateInstanceOnPodRestart"})
    scenario.fault("evict", pod=f"{NAME}-0-default-0")
    planned.clear()
    scenario.run_pass()
    assert planned == ["engine"]
    assert {r["index"]: r["phase"] for r in scenario.rows(NAME)}[0] == "Restarting"
    assert CONVERGED_ANNOTATION not in (scenario.replica(NAME)["metadata"].get("annotations")
                                        or {})


def test_a_manifest_change_is_planned(tmp_path, planned):
    scenario, change = settled(tmp_path, replicas=2)
    change(image="sglang:v2")
    planned.clear()
    scenario.run_pass()
    assert planned == ["engine"]
    assert any(r.get("operation") for r in scenario.rows(NAME))


def test_a_reset_annotation_is_planned(tmp_path, planned):
    from omegitops.cluster.sim import SimCluster

    scenario, _ = settled(tmp_path, replicas=1)
    with SimCluster(scenario.path) as cluster:
        replica = cluster.get_object("InferenceReplica", "demo", NAME)
        replica["metadata"]["annotations"]["ome.io/reset-instances"] = "all"
        cluster.replace_object(replica)
    planned.clear()
    scenario.run_pass()
    assert planned == ["engine"]
    annotations = scenario.replica(NAME)["metadata"]["annotations"]
    assert "ome.io/reset-instances" not in annotations  # done once, as before


def test_a_component_waiting_for_a_moment_is_never_fingerprinted(tmp_path, planned):
    """A minReadySeconds window is time the plan waits on: planned every pass."""
    scenario, change = converged(tmp_path, replicas=1, lifecycle={"minReadySeconds": 600})
    change(image="sglang:v2", lifecycle={"minReadySeconds": 600})
    scenario.until(lambda s: any((r.get("operation") or {}).get("step") == "SurgeWaitAvailable"
                                 for r in s.rows(NAME)))
    for _ in range(3):
        planned.clear()
        scenario.run_pass()
        assert planned == ["engine"]
        assert CONVERGED_ANNOTATION not in (
            scenario.replica(NAME)["metadata"].get("annotations") or {})
        scenario.advance(60)


def test_plan_calls_a_cluster_at_rest_unchanged_before_the_fingerprint_is_recorded(
        tmp_path, cli):
    from omegitops.cluster.sim import SimCluster

    scenario, _ = settled(tmp_path, replicas=2)
    # As a cluster last reconciled by a version that recorded no fingerprint.
    with SimCluster(scenario.path) as cluster:
        replica = cluster.get_object("InferenceReplica", "demo", NAME)
        del replica["metadata"]["annotations"][CONVERGED_ANNOTATION]
        cluster.replace_object(replica)
    code, _, _ = cli("plan", "--repo", str(scenario.repo), "--cluster",
                     f"sim:{scenario.path}", "--detailed-exitcode", "--no-forecast")
    assert code == 0


def test_a_cordoned_node_is_seen_at_once(tmp_path, planned):
    """A cordon changes no object of the component, only its node: the fingerprint
    holds what a migration reads of the nodes its pods run on."""
    scenario, _ = settled(tmp_path, replicas=1)
    scenario.fault("cordon", pod=f"{NAME}-0-default-0")
    planned.clear()
    scenario.run_pass()
    assert planned == ["engine"]
    assert {r["index"]: r["phase"] for r in scenario.rows(NAME)}[0] == "Migrating"


@pytest.mark.parametrize(("kind", "name", "status", "spec", "undone"), [
    ("PodDisruptionBudget", NAME,
     {"currentHealthy": 2, "desiredHealthy": 2, "disruptionsAllowed": 0},
     {"selector": {"matchLabels": {"ome.io/component": "engine"}}, "maxUnavailable": 1}, True),
    # A PodGroup's size is set when its Instance's pods are made (render/services.py).
    ("PodGroup", f"{NAME}-0", {"phase": "Running", "running": 2}, {"minMember": 1}, False),
])
def test_a_status_its_controller_writes_behind_the_pass_is_not_a_change(
        tmp_path, planned, kind, name, status, spec, undone):
    """The disruption controller and the gang scheduler's controller rewrite a
    PodDisruptionBudget's and a PodGroup's status as pods come and go, often after the
    pass that fingerprinted the component: the plan reads only their spec, so only a
    change to it is planned."""
    from omegitops.cluster.sim import SimCluster
    from tests.fleet import write_service
    from tests.scenario import Scenario

    repo = tmp_path / "repo"
    write_service(repo, replicas=2, workers=1)
    scenario = Scenario(tmp_path, repo, podgroups=True)
    scenario.until_idle()
    scenario.run_pass()

    def read():
        with SimCluster(scenario.path) as cluster:
            return cluster.get_object(kind, "demo", name)

    def rewrite(**fields):
        with SimCluster(scenario.path) as cluster:
            cluster.replace_object({**cluster.get_object(kind, "demo", name), **fields})

    wanted = read()["spec"]
    rewrite(status=status)
    planned.clear()
    scenario.run_pass()
    assert planned == []

    rewrite(spec=spec)
    scenario.run_pass()
    assert planned == ["engine"]
    assert (read()["spec"] == wanted) is undone


@pytest.mark.parametrize("document", [
    {"desired": ["abc", False, None, {"b": 1, "a": [1, 2, 3]}], "pods": [("p-0", "17")]},
    {"z": {"y": {"x": [None, True, 0.5, 30.0, -7]}}, "a": "text \"quoted\" \\ / \t"},
    {"name": "café ☕", "nested": ["ü"]},  # past ASCII: json.dumps escapes it
    {"big": 2**70, "small": -(2**70)},  # past 64 bits: orjson refuses it
    {"dated": __import__("datetime").date(2026, 12, 6), "set": ("a", "b")},
])
def test_the_fingerprint_encodes_as_json_dumps_did(document):
    """Fingerprints recorded before are still recognised: the encoding is byte for byte
    the canonical json.dumps one it replaced."""
    import json

    from omegitops.lifecycle.converged import _encoded

    assert _encoded(document) == json.dumps(
        document, sort_keys=True, separators=(",", ":"), default=str,
        check_circular=False).encode()
