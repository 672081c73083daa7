"""``plan --base`` starts from what the cluster runs, as the job's report records it.

A replay of the base's manifests puts every Instance on its newest revision; the
cluster may run something else, and the plan must start from that (as ``terraform
plan`` plans from its state). The job runs on a simulated cluster here until four
services stand as a real fleet often does: one staged at a partition, one whose
revision is held after a failed surge, one with a Failed Instance, one pinned to an
older runtime. A pull request then lifts the partition, fixes the failed image and
moves the pin. The plan's forecast must move exactly the Instances the job then moves
when the change is merged, and the job runs on the very cluster it reported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import yaml

from omegitops.cluster.sim import SimCluster

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
VALUES = {"ome": {"controller": {"lifecycle": {
    "instanceReadyTimeout": "10m", "stuckPodGracePeriod": "60s"}}}}
# The kinds of event each Instance operation starts with.
STARTS = {"InstanceCreating": "Create", "InstanceUpdating": "Update",
          "InstanceRestarting": "Restart", "InstanceDeleting": "Delete"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def write(manifests: Path, name: str, image: str, lifecycle: dict, *, env: str = "a",
          pinned: bool = False, replicas: int = 2) -> None:
    runner = {"name": "ome-container", "image": image,
              "env": [{"name": "MODE", "value": env}],
              "readinessProbe": {"httpGet": {"path": "/health", "port": 8080},
                                 "initialDelaySeconds": 10, "periodSeconds": 5},
              "resources": {"limits": {"nvidia.com/gpu": 1}}}
    runtime = {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
               "metadata": {"name": f"srt-{name}"},
               "spec": {"engineConfig": {"tolerations": TOLERATIONS, "runner": runner}}}
    service = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
               "metadata": {"name": name, "namespace": "demo"},
               "spec": {"deploymentMode": "OMENative", "model": {"name": "m"},
                        "runtime": {"name": f"srt-{name}",
                                    **({"autoSync": False} if pinned else {})},
                        "engine": {"minReplicas": replicas, "maxReplicas": replicas,
                                   "lifecycle": lifecycle}}}
    for folder, doc in (("runtimes", runtime), ("services", service)):
        (manifests / folder).mkdir(parents=True, exist_ok=True)
        (manifests / folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


STAGED = {"updateStrategy": {"type": "InPlaceIfPossible",
                             "rollingUpdate": {"partition": 1, "maxUnavailable": 1}}}
SURGE = {"updateStrategy": {"type": "SurgeThenDrain",
                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}
RECREATE = {"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}}


def fleet(manifests: Path, *, second: bool = False, change: bool = False) -> None:
    """The four services at the first commit, at the second (merged and reconciled: the
    state the report records), or with the pull request's change on top."""
    staged = dict(STAGED, updateStrategy={**STAGED["updateStrategy"], "rollingUpdate": {
        "partition": 0 if change else 1, "maxUnavailable": 1}})
    write(manifests, "staged", "sglang:v2" if second or change else "sglang:v1", staged)
    write(manifests, "held", "sglang:bad" if second or change else "sglang:v1", SURGE)
    write(manifests, "failed", "sglang:v3" if change else (
        "sglang:bad" if second else "sglang:v1"), RECREATE)
    write(manifests, "pinned", "sglang:v1", SURGE, env="b" if second or change else "a",
          pinned=not change, replicas=1)
    (manifests / "ome-values.yaml").write_text(yaml.safe_dump(VALUES))


def job(cli, repo: Path, cluster: Path) -> None:
    """The scheduled job: reconcile until idle, report into the repository, commit."""
    _, _, err = cli("reconcile", "--repo", str(repo / "manifests"), "--cluster",
                    f"sim:{cluster}", "--until-idle", "--max-seconds", "3600",
                    "--report-dir", str(repo / "status"))
    assert "Traceback" not in err, err
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the job's report")


def started(events: list[dict]) -> set[tuple[str, int, str]]:
    """(service, Instance, operation) of every Instance operation the events start."""
    out = set()
    for event in events:
        kind = STARTS.get(event["reason"])
        found = re.search(r"component=engine instance=(\d+) ", event["message"] + " ")
        if kind and found:
            out.add((event["involvedObject"]["name"], int(found.group(1)), kind))
    return out


def test_the_plan_moves_what_the_job_then_moves(tmp_path, cli, capsys):
    repo, cluster = tmp_path / "repo", tmp_path / "cluster.json"
    fleet(repo / "manifests")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the fleet")
    job(cli, repo, cluster)
    fleet(repo / "manifests", second=True)
    git(repo, "commit", "-q", "-a", "-m", "v2, a bad image, a runtime change")
    assert cli("sim", "fault", "--cluster", f"sim:{cluster}", "--kind", "imagepull",
               "--image", "sglang:bad")[0] == 0
    job(cli, repo, cluster)
    report = json.loads((repo / "status/status.json").read_text())
    phases = {s["name"]: s["components"][0]["phaseSummary"] for s in report["services"]}
    assert "Failed" in phases["failed"], phases
    revisions = {s["name"]: s["components"][0] for s in report["services"]}
    assert revisions["staged"]["updated"] == 1, "staged at partition 1"
    assert any(c["reason"] == "RevisionHeld" for c in revisions["held"]["conditions"])

    git(repo, "checkout", "-q", "-b", "change")
    fleet(repo / "manifests", change=True)
    git(repo, "commit", "-q", "-a", "-m", "lift the partition, fix the image, move the pin")
    capsys.readouterr()
    plan_json = tmp_path / "plan.json"
    code, out, err = cli("plan", "--repo", str(repo / "manifests"), "--base", "main",
                         "--json-out", str(plan_json))
    assert code == 0, err
    assert "Started from the job's report: 4 components put back as the job last saw it" in out
    plan = json.loads(plan_json.read_text())
    forecast = {(s["service"].split("/")[1], s["index"], s["operation"].split()[2])
                for s in plan["forecast"]["spans"]}

    # The change merged: the job on the cluster it reported.
    with SimCluster(cluster) as sim:
        before = {e["metadata"]["name"] for e in sim.list_objects("Event")}
    job(cli, repo, cluster)
    with SimCluster(cluster) as sim:
        moved = started([e for e in sim.list_objects("Event")
                         if e["metadata"]["name"] not in before])
    assert forecast == moved
    # Each of the four states mattered: the held Instance of "staged" moves, the Failed
    # "failed" is rebuilt, the pin moves, and the held revision of "held" stays held.
    assert {("staged", 0, "Update"), ("pinned", 0, "Update")} <= moved
    assert any(name == "failed" for name, _, _ in moved)
    assert not any(name == "held" for name, _, _ in moved)


def test_a_revision_no_commit_in_reach_made_is_named_not_guessed(tmp_path, cli, capsys):
    """An Instance on a revision that no commit within reach of the report's renders (the
    history was rewritten, or the revision is older than the walk goes): the plan says
    so and starts that Instance from the newest templates under its name."""
    from omegitops.model.replica import decode_rows, encode_rows

    repo, cluster = tmp_path / "repo", tmp_path / "cluster.json"
    write(repo / "manifests", "staged", "sglang:v1", STAGED)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    job(cli, repo, cluster)
    path = repo / "status/status.json"
    report = json.loads(path.read_text())
    component = report["services"][0]["components"][0]
    rows = decode_rows(component["state"]["instances"])
    rows[0]["revision"] = "staged-engine-0000dead"
    component["state"]["instances"] = encode_rows(rows)
    path.write_text(json.dumps(report))
    git(repo, "commit", "-q", "-a", "-m", "a report from another history")
    git(repo, "checkout", "-q", "-b", "change")
    write(repo / "manifests", "staged", "sglang:v2", STAGED)
    git(repo, "commit", "-q", "-a", "-m", "v2")
    capsys.readouterr()
    code, out, err = cli("plan", "--repo", str(repo / "manifests"), "--base", "main")
    assert code == 0, err
    assert ("demo/staged engine: revision staged-engine-0000dead was not made by any commit "
            "within reach of the report's") in out
