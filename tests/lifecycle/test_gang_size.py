"""A gang's size is part of its template: a new ``worker.size`` is a new revision,
rolled within the budgets like any other (update-strategies.txt: "When the pod template
of an OMENative component changes, OME records a new revision and moves each of the
component's Instances onto it"; "A change to its worker pods alone rolls the leader
too"). Every Instance that leaves takes its PodGroup with it.

The scenario's invariants run after every pass: each gang whole at its own revision's
size, budgets held.
"""

from __future__ import annotations

import pytest
import yaml

from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.fleet import runner, strategy, write_service
from tests.scenario import Scenario

SURGE = strategy(maxSurge=1, maxUnavailable=0)


def gangs(scenario) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for pod in scenario.pods():
        if not P.is_terminating(pod):
            out.setdefault(P.index_of(pod), []).append(pod["metadata"]["name"])
    return {index: sorted(names) for index, names in sorted(out.items())}


def podgroups(scenario) -> dict[str, int]:
    with SimCluster(scenario.path) as cluster:
        return {g["metadata"]["name"]: g["spec"]["minMember"]
                for g in cluster.list_objects("PodGroup")}


def resize(tmp_path, before: int, after: int, lifecycle=SURGE, **service):
    repo = write_service(tmp_path / "repo", replicas=2, workers=before, lifecycle=lifecycle,
                         **service)
    scenario = Scenario(tmp_path, repo, podgroups=True)
    scenario.until_idle()
    first = scenario.replica("svc-engine")["status"]["updateRevision"]
    serving_low = []
    scenario.watches.append(lambda s: serving_low.append(
        s.replica("svc-engine")["status"]["servingReplicas"]))
    write_service(repo, replicas=2, workers=after, lifecycle=lifecycle, **service)
    scenario.until_idle()
    return scenario, first, serving_low


@pytest.mark.parametrize("before, after", [(1, 2), (2, 1)])
def test_a_new_worker_size_is_a_new_revision_rolled_within_the_budgets(tmp_path, before,
                                                                         after):
    scenario, first, serving = resize(tmp_path, before, after)
    status = scenario.replica("svc-engine")["status"]
    assert status["updateRevision"] != first
    assert status["currentRevision"] == status["updateRevision"]
    # maxUnavailable 0: both Instances served throughout, nothing was "lost".
    assert min(serving) == 2
    assert not scenario.events("RestartTriggered")
    rows = scenario.rows("svc-engine")
    assert all(row["revision"] == status["updateRevision"] for row in rows)
    assert all((row.get("lastFailure") or {}).get("reason") != "PodLost" for row in rows)
    for names in gangs(scenario).values():
        assert len(names) == 1 + after
    for pod in scenario.pods():
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["OME_POD_COUNT"] == str(1 + after)
    # One PodGroup per Instance, of its size; the replaced gangs took theirs along.
    groups = podgroups(scenario)
    assert sorted(groups) == sorted(f"svc-engine-{i}" for i in gangs(scenario))
    assert set(groups.values()) == {1 + after}


def test_a_resize_under_restart_policy_none_rebuilds_whole_gangs(tmp_path):
    lifecycle = {**strategy(maxSurge=0, maxUnavailable=1), "restartPolicy": "None"}
    scenario, _, serving = resize(tmp_path, 1, 2, lifecycle=lifecycle)
    assert min(serving) == 1
    assert [len(names) for names in gangs(scenario).values()] == [3, 3]
    counts = {e["value"] for p in scenario.pods() for e in p["spec"]["containers"][0]["env"]
              if e["name"] == "OME_POD_COUNT"}
    assert counts == {"3"}


def test_after_a_shrink_the_next_rollout_is_not_stopped_by_leftover_workers(tmp_path):
    scenario, _, _ = resize(tmp_path, 2, 1)
    write_service(scenario.repo, replicas=2, workers=1, image="sglang:v2", lifecycle=SURGE)
    scenario.until_idle()
    status = scenario.replica("svc-engine")["status"]
    assert status["currentRevision"] == status["updateRevision"]
    assert not status.get("rolloutHold")
    images = {c["image"] for p in scenario.pods() for c in p["spec"]["containers"]}
    assert images == {"sglang:v2"}


def test_the_plan_shows_a_resize_as_a_change_of_revision(tmp_path, cli):
    repo = write_service(tmp_path / "repo", replicas=2, workers=1, lifecycle=SURGE)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    write_service(repo, replicas=2, workers=2, lifecycle=SURGE)
    code, out, err = cli("plan", "--repo", str(repo), "--cluster", f"sim:{scenario.path}")
    assert code == 0, err
    assert "2 Instances to move" in out and "size: 2" in out, out


def test_a_gang_too_big_for_the_cluster_takes_no_gpu_from_the_others(tmp_path):
    """A gang of 100 one-GPU pods on eight 8-GPU nodes, beside a one-pod service. With the
    PodGroup kind installed, the simulated scheduler places a gang whole or not at all, as
    the coscheduling plugin does: before, it bound 64 of the gang's pods and the other
    service never got a GPU. The gang's Instance waits, and its operation says why."""
    repo = write_service(tmp_path / "repo", replicas=1, workers=99, name="big")
    small = (repo / "services" / "big.yaml").read_text().replace("name: big", "name: small")
    (repo / "services" / "small.yaml").write_text(small.replace("srt-test", "srt-one"))
    runtime = (repo / "runtimes" / "test.yaml").read_text()
    (repo / "runtimes" / "one.yaml").write_text(yaml.safe_dump({
        "apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
        "metadata": {"name": "srt-one"},
        "spec": {"engineConfig": {"tolerations": yaml.safe_load(runtime)["spec"][
            "engineConfig"]["tolerations"], "runner": runner()}}}))
    scenario = Scenario(tmp_path, repo, podgroups=True)
    scenario.until(lambda s: any(r["phase"] == "Ready" for r in s.rows("small-engine")))
    scenario.advance(60)
    scenario.run_pass()
    assert [r["phase"] for r in scenario.rows("small-engine")] == ["Ready"]
    gang = scenario.pods("big-")
    assert len(gang) == 100 and not [p for p in gang if p["spec"].get("nodeName")]
    [row] = scenario.rows("big-engine")
    assert row["phase"] == "Creating"
    assert "PodGroup demo/big-engine-0 gets rejected" in row["operation"]["waiting"]
