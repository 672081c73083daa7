"""``plan --base`` for a component an autoscaler scales: the forecast starts from the
count the job last reported, not minReplicas (which is all a replay of the manifests
knows); the comment shows the range and the live count, and what a change of the
bounds does to it (lifecycle/scaling.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from omegitops.cluster.sim import SimCluster
from tests.fleet import write_service

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
NAME = "svc-engine"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def job(cli, repo: Path, cluster: Path) -> None:
    """The scheduled job: reconcile until idle, report into the repository, commit."""
    _, _, err = cli("reconcile", "--repo", str(repo / "manifests"), "--cluster",
                    f"sim:{cluster}", "--until-idle", "--max-seconds", "3600",
                    "--report-dir", str(repo / "status"))
    assert "Traceback" not in err, err
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the job's report")


def scale(cluster: Path, replicas: int) -> None:
    """What an HPA writes: the InferenceReplica's spec.replicas."""
    with SimCluster(cluster) as sim:
        body = sim.get_object("InferenceReplica", "demo", NAME)
        body["spec"]["replicas"] = replicas
        sim.replace_object(body)


def autoscaled_to_three(tmp_path: Path, cli) -> tuple[Path, Path]:
    """minReplicas 1, maxReplicas 4; an autoscaler took it to 3; the job reported it."""
    repo, cluster = tmp_path / "repo", tmp_path / "cluster.json"
    write_service(repo / "manifests", replicas=1, max_replicas=4)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the service")
    job(cli, repo, cluster)
    scale(cluster, 3)
    job(cli, repo, cluster)
    report = json.loads((repo / "status/status.json").read_text())
    (component,) = report["services"][0]["components"]
    assert (component["desired"], component["countFrom"]) == (3, "Autoscaler")
    assert (component["minReplicas"], component["maxReplicas"]) == (1, 4)
    assert "| 3 (autoscaler, 1–4) |" in (repo / "status/STATUS.md").read_text()
    git(repo, "checkout", "-q", "-b", "change")
    return repo, cluster


def plan(tmp_path: Path, cli, repo: Path) -> tuple[dict, str]:
    plan_json, comment = tmp_path / "plan.json", tmp_path / "comment.md"
    code, _, err = cli("plan", "--repo", str(repo / "manifests"), "--base", "main",
                       "--json-out", str(plan_json), "--comment-out", str(comment))
    assert code == 0, err
    return json.loads(plan_json.read_text()), comment.read_text()


def _component(found: dict) -> dict:
    (component,) = [c for c in found["components"] if c["component"] == "engine"]
    return component


def test_the_forecast_moves_the_instances_the_autoscaler_keeps(tmp_path, cli):
    repo, _ = autoscaled_to_three(tmp_path, cli)
    write_service(repo / "manifests", replicas=1, max_replicas=4, image="sglang:v2")
    git(repo, "commit", "-q", "-a", "-m", "v2")
    found, comment = plan(tmp_path, cli, repo)
    moved = {(s["index"], s["operation"].split()[2]) for s in found["forecast"]["spans"]}
    assert moved == {(0, "Update"), (1, "Update"), (2, "Update")}, moved
    count = _component(found)["count"]
    assert (count["source"], count["current"], count["replicas"]) == ("Autoscaler", 3, 3)
    assert (count["minReplicas"], count["maxReplicas"]) == (1, 4)
    assert ("An autoscaler owns the count between minReplicas 1 and maxReplicas 4; the "
            "live count is 3.") in comment


def test_lowering_max_replicas_says_it_brings_the_live_count_down(tmp_path, cli):
    repo, _ = autoscaled_to_three(tmp_path, cli)
    write_service(repo / "manifests", replicas=1, max_replicas=2)
    git(repo, "commit", "-q", "-a", "-m", "at most 2")
    found, comment = plan(tmp_path, cli, repo)
    component = _component(found)
    changes = {c["field"]: (c["old"], c["new"]) for c in component["lifecycleChanges"]}
    assert changes == {"replicas": (3, 2), "maxReplicas": (4, 2)}, changes
    assert "the live count is 3; this change brings it from 3 to 2." in comment
    moved = {(s["index"], s["operation"].split()[2]) for s in found["forecast"]["spans"]}
    assert moved == {(2, "Delete")}, moved


def test_bounds_that_still_hold_the_live_count_leave_it(tmp_path, cli):
    repo, _ = autoscaled_to_three(tmp_path, cli)
    write_service(repo / "manifests", replicas=2, max_replicas=6)
    git(repo, "commit", "-q", "-a", "-m", "wider")
    found, comment = plan(tmp_path, cli, repo)
    component = _component(found)
    changes = {c["field"]: (c["old"], c["new"]) for c in component["lifecycleChanges"]}
    assert changes == {"minReplicas": (1, 2), "maxReplicas": (4, 6)}, changes
    assert "the live count is 3; the new bounds leave it as it is." in comment
    assert not found["forecast"]["spans"]
