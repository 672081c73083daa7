"""The status report: schema, health words, Markdown, determinism, both row encodings."""

from __future__ import annotations

import copy
import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from omegitops.app.passes import MANAGED
from omegitops.cluster.base import EVENT, INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load
from omegitops.manifests.schemas import validator
from omegitops.model.ids import ComponentKey
from omegitops.model.replica import COLUMNAR, decode_rows
from omegitops.report.status import (
    build_report,
    render_markdown,
    report_events,
    validate_report,
    write_report,
)
from omegitops.util.times import format_time
from tests.conftest import EXAMPLES, RUNTIME, SERVICE, write_repo

# The llama-pd router may stay Pending in the simulator (no CPU node); no test
# depends on its health.
ROUTER = ("llama-demo", "llama-pd", "router")
SERVICES = ["deepseek-r1/deepseek-r1", "llama-demo/llama-3-2-3b-instruct",
            "llama-demo/llama-chat", "llama-demo/llama-pd", "qwen3-0-6b/qwen3-0-6b"]


def reconcile(cli, tmp_path: Path, *extra: str) -> tuple[Path, Path]:
    """Reconcile examples/ into a fresh sim cluster with a report; returns (cluster, report dir)."""
    cluster = tmp_path / "cluster.json"
    report_dir = tmp_path / "out" / "report"  # nested: the folder is created
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{cluster}",
                       "--report-dir", str(report_dir), *extra)
    assert code == 0, err
    return cluster, report_dir


def components(report: dict) -> dict[ComponentKey, dict]:
    return {(s["namespace"], s["name"], c["component"]): c
            for s in report["services"] for c in s["components"]}


def listed(cluster_path: Path) -> tuple[list[dict], list[dict], object]:
    with SimCluster(cluster_path) as sim:
        return (sim.list_objects(INFERENCE_REPLICA, MANAGED), sim.list_objects(EVENT, MANAGED),
                sim.now())


def warning(namespace: str, isvc: str, message: str, at: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"namespace": namespace, "name": f"{isvc}.ffff", "labels": dict(MANAGED)},
        "involvedObject": {"kind": "InferenceService", "namespace": namespace, "name": isvc},
        "type": "Warning", "reason": "InstanceFailed", "message": message,
        "count": 1, "firstTimestamp": at, "lastTimestamp": at,
    }


# -- after a whole run and after one pass ---------------------------------------


def test_healthy_after_until_idle(cli, tmp_path):
    _, report_dir = reconcile(cli, tmp_path, "--until-idle")
    report = json.loads((report_dir / "status.json").read_text(encoding="utf-8"))
    validator("StatusReport").validate(report)
    assert [f"{s['namespace']}/{s['name']}" for s in report["services"]] == SERVICES
    found = components(report)
    assert len(found) == 7
    for key, component in found.items():
        if key == ROUTER:
            continue
        assert component["health"] == "Healthy", (key, component["healthReason"])
        assert component["ready"] == component["available"] == component["desired"]
        assert component["revision"] == component["currentRevision"]
        assert component["conditions"] == []
    qwen = found[("qwen3-0-6b", "qwen3-0-6b", "engine")]
    assert qwen["phaseSummary"] == "Ready ×2" and qwen["phases"] == [{"phase": "Ready",
                                                                       "count": 2}]
    assert found[("llama-demo", "llama-chat", "engine")]["minReadySeconds"] == 900
    assert report["summary"]["services"] == 5 and report["summary"]["components"] == 7
    assert report["summary"]["health"]["Degraded"] == 0
    assert report["validationErrors"] == []


def test_a_component_scaled_to_zero_is_healthy_at_rest(cli, tmp_path):
    """Zero Instances at rest is healthy, as a Deployment scaled to zero is: its current
    revision is its update revision (there is nothing older), and no message shows a
    Python None."""
    zero = SERVICE.replace("minReplicas: 2", "minReplicas: 0").replace(
        "maxReplicas: 2", "maxReplicas: 1")
    repo = write_repo(tmp_path / "repo", {"runtimes/small.yaml": RUNTIME,
                                          "services/small.yaml": zero})
    report_dir = tmp_path / "report"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster",
                       f"sim:{tmp_path / 'cluster.json'}", "--until-idle",
                       "--report-dir", str(report_dir))
    assert code == 0, err
    report = json.loads((report_dir / "status.json").read_text(encoding="utf-8"))
    (component,) = components(report).values()
    assert component["desired"] == 0
    assert component["health"] == "Healthy", component["healthReason"]
    assert component["currentRevision"] == component["revision"]
    assert "None" not in (report_dir / "STATUS.md").read_text(encoding="utf-8")
    replicas, _, _ = listed(tmp_path / "cluster.json")
    (replica,) = replicas
    assert replica["status"]["currentRevision"] == replica["status"]["updateRevision"]


def test_progressing_after_one_pass(cli, tmp_path):
    _, report_dir = reconcile(cli, tmp_path)
    report = json.loads((report_dir / "status.json").read_text(encoding="utf-8"))
    validator("StatusReport").validate(report)
    for key, component in components(report).items():
        if key == ROUTER:
            continue
        assert component["health"] == "Progressing", key
        assert component["operations"] == component["desired"]
        assert component["phaseSummary"] == f"Creating ×{component['desired']}"
        assert {c["type"] for c in component["conditions"]} >= {"Ready", "Progressing"}
    assert {s["health"] for s in report["services"]} == {"Progressing"}
    assert report["summary"]["health"]["Healthy"] == 0


def test_markdown_names_every_service(cli, tmp_path):
    _, report_dir = reconcile(cli, tmp_path, "--until-idle")
    markdown = (report_dir / "STATUS.md").read_text(encoding="utf-8")
    assert markdown.startswith("# omegitops status\n")
    report = json.loads((report_dir / "status.json").read_text(encoding="utf-8"))
    assert f"Generated at {report['generatedAt']} (cluster time)" in markdown
    assert report["summary"]["text"] in markdown
    for name in SERVICES:
        assert f"## {name}: " in markdown
    assert "| engine | Healthy | 2 | 2 | 2 | 2 | 2 | 2 | 0 | `qwen3-0-6b-engine-" in markdown
    assert "## Validation errors" not in markdown
    assert markdown.endswith("\n") and not markdown.endswith("\n\n")


def test_report_twice_on_unchanged_state_is_byte_identical(cli, tmp_path):
    cluster_path, report_dir = reconcile(cli, tmp_path, "--until-idle")
    first = {name: (report_dir / name).read_bytes() for name in ("status.json", "STATUS.md")}
    revision = json.loads(first["status.json"])["revision"]
    loaded = load(EXAMPLES)
    for _ in range(2):
        with SimCluster(cluster_path) as sim:
            write_report(report_dir, loaded, sim, repository=str(EXAMPLES), revision=revision)
        assert {name: (report_dir / name).read_bytes() for name in first} == first
    assert sorted(p.name for p in report_dir.iterdir()) == ["STATUS.md", "status.json"]


# -- build_report, pure -----------------------------------------------------------


def test_columnar_and_plain_rows_give_the_same_report(cli, tmp_path):
    cluster_path, _ = reconcile(cli, tmp_path, "--until-idle")
    replicas, events, now = listed(cluster_path)
    assert any(isinstance(r["status"]["instances"], dict) for r in replicas)
    plain, columnar = copy.deepcopy(replicas), copy.deepcopy(replicas)
    for replica in plain:
        replica["status"]["instances"] = decode_rows(replica["status"]["instances"])
    for replica in columnar:
        rows = decode_rows(replica["status"]["instances"])
        columns = sorted({key for row in rows for key in row})
        replica["status"]["instances"] = {
            "encoding": COLUMNAR, "columns": columns,
            "rows": [[row.get(c) for c in columns] for row in rows]}
    loaded = load(EXAMPLES)
    assert build_report(loaded, plain, events, now) == build_report(loaded, columnar, events, now)


def test_degraded_by_failed_instance_or_recent_warning(cli, tmp_path):
    cluster_path, _ = reconcile(cli, tmp_path, "--until-idle")
    replicas, events, now = listed(cluster_path)
    loaded = load(EXAMPLES)
    key = ("qwen3-0-6b", "qwen3-0-6b", "engine")

    failed = copy.deepcopy(replicas)
    for replica in failed:
        if replica["metadata"]["name"] == "qwen3-0-6b-engine":
            rows = decode_rows(replica["status"]["instances"])
            rows[1]["phase"] = "Failed"
            replica["status"]["instances"] = rows
    component = components(build_report(loaded, failed, events, now))[key]
    assert (component["health"], component["failedInstances"]) == ("Degraded", [1])

    message = "OMENative component=engine instance=0 failed: ImagePullBackOff"
    recent = warning("qwen3-0-6b", "qwen3-0-6b", message,
                     format_time((now - timedelta(minutes=9)).timestamp()))
    report = build_report(loaded, replicas, events + [recent], now)
    validate_report(report)
    assert components(report)[key]["health"] == "Degraded"
    service = next(s for s in report["services"] if s["name"] == "qwen3-0-6b")
    assert service["health"] == "Degraded"
    assert [e["message"] for e in service["events"]] == [message]
    assert message in render_markdown(report)
    # Another component of the same namespace is not touched by it.
    assert components(report)[("llama-demo", "llama-chat", "engine")]["health"] == "Healthy"

    old = warning("qwen3-0-6b", "qwen3-0-6b", message,
                  format_time((now - timedelta(minutes=11)).timestamp()))
    report = build_report(loaded, replicas, events + [old], now)
    assert components(report)[key]["health"] == "Healthy"
    assert len(next(s for s in report["services"] if s["name"] == "qwen3-0-6b")["events"]) == 1


def test_last_five_warnings_per_service(cli, tmp_path):
    cluster_path, _ = reconcile(cli, tmp_path, "--until-idle")
    replicas, events, now = listed(cluster_path)
    extra = [warning("qwen3-0-6b", "qwen3-0-6b", f"OMENative component=engine instance=0 n={i}",
                     format_time((now - timedelta(hours=1, minutes=10 - i)).timestamp()))
             for i in range(7)]
    for i, event in enumerate(extra):
        event["metadata"]["name"] = f"qwen3-0-6b.{i}"
    report = build_report(load(EXAMPLES), replicas, events + extra, now)
    service = next(s for s in report["services"] if s["name"] == "qwen3-0-6b")
    assert [e["message"][-3:] for e in service["events"]] == [f"n={i}" for i in range(2, 7)]


def test_the_report_reads_warnings_only_and_says_the_same(cli, tmp_path):
    cluster_path, _ = reconcile(cli, tmp_path, "--until-idle")
    message = "OMENative component=engine instance=0 failed: ImagePullBackOff"
    with SimCluster(cluster_path) as sim:
        now = sim.now()
        sim.record_event(warning("qwen3-0-6b", "qwen3-0-6b", message, format_time(
            (now - timedelta(minutes=1)).timestamp())))
        replicas, every, now = (sim.list_objects(INFERENCE_REPLICA, MANAGED),
                                sim.list_objects(EVENT, MANAGED), sim.now())
        read = report_events(sim)
    # A bring-up leaves Normal events (InstanceCreating, InstanceReady) the report skips.
    assert {e["type"] for e in every} == {"Normal", "Warning"}
    assert [e["message"] for e in read] == [message]
    loaded = load(EXAMPLES)
    assert build_report(loaded, replicas, read, now) == build_report(loaded, replicas, every,
                                                                     now)


@pytest.fixture
def mixed_repo(tmp_path):
    """A managed service, a RawDeployment one, and a service with a schema error."""
    raw = SERVICE.replace("name: small\n", "name: raw\n").replace(
        "deploymentMode: OMENative", "deploymentMode: RawDeployment")
    broken = SERVICE.replace("name: small\n", "name: broken\n") + (
        "    lifecycle:\n      minReadySeconds: -5\n")
    return write_repo(tmp_path / "repo", {"runtimes/small.yaml": RUNTIME,
                                          "services/small.yaml": SERVICE,
                                          "services/raw.yaml": raw,
                                          "services/broken.yaml": broken})


def test_not_managed_missing_replica_and_validation_errors(mixed_repo, tmp_path):
    loaded = load(mixed_repo)
    assert loaded.result.errors
    with SimCluster(tmp_path / "cluster.json") as sim:
        report = build_report(loaded, [], [], sim.now(), repository="git@example:repo.git")
    validate_report(report)
    assert report["repository"] == "git@example:repo.git"
    found = components(report)
    assert found[("demo", "raw", "engine")] == {"component": "engine", "managed": False,
                                                "deploymentMode": "RawDeployment"}
    small = found[("demo", "small", "engine")]
    assert (small["found"], small["health"], small["desired"]) == (False, "Progressing", 2)
    assert [s["name"] for s in report["services"]] == ["raw", "small"]
    assert report["services"][0]["health"] is None
    (error,) = report["validationErrors"]
    assert error["path"] == "services/broken.yaml"
    assert error["field"] == "spec.engine.lifecycle.minReadySeconds"
    assert report["summary"]["notManaged"] == 1 and report["summary"]["validationErrors"] == 1
    markdown = render_markdown(report)
    assert "## Validation errors" in markdown
    assert "`services/broken.yaml:16` InferenceService demo/broken" in markdown
    assert "| engine | not managed (RawDeployment) |" in markdown
    assert "## demo/raw: not managed" in markdown


def test_replicas_without_a_service_are_listed(cli, tmp_path, mixed_repo):
    cluster_path, _ = reconcile(cli, tmp_path, "--until-idle")
    replicas, events, now = listed(cluster_path)
    report = build_report(load(mixed_repo), replicas, events, now)
    validate_report(report)
    assert "qwen3-0-6b/qwen3-0-6b-engine" in report["unknownReplicas"]
    markdown = render_markdown(report)
    assert ("## Orphaned, still serving: InferenceReplicas with no service in the "
            "repository") in markdown
    assert "a run with `--prune` tears them down" in markdown


def test_schema_rejects_a_wrong_health_word(cli, tmp_path):
    _, report_dir = reconcile(cli, tmp_path, "--until-idle")
    report = json.loads((report_dir / "status.json").read_text(encoding="utf-8"))
    report["services"][0]["components"][0]["health"] = "Fine"
    with pytest.raises(Exception, match="schema"):
        validate_report(report)


def test_the_report_names_the_commit_it_read_and_takes_the_umask(cli, tmp_path):
    """As Argo CD and Flux show the synced revision; and a report is for reading: the
    mode the user's umask gives (0644 under 022), not a temporary file's 0600."""
    import os
    import subprocess

    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "fleet"], check=True)
    head = subprocess.run([*git[:3], "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    previous = os.umask(0o027)
    try:
        code, _, err = cli("reconcile", "--repo", str(repo), "--cluster",
                           f"sim:{tmp_path / 'c.json'}", "--report-dir", str(tmp_path / "r"))
    finally:
        os.umask(previous)
    assert code == 0, err
    report = json.loads((tmp_path / "r" / "status.json").read_text())
    assert report["revision"] == head
    assert f"at commit `{head[:12]}`" in (tmp_path / "r" / "STATUS.md").read_text()
    for name in ("status.json", "STATUS.md"):
        assert (tmp_path / "r" / name).stat().st_mode & 0o777 == 0o640
    plain = tmp_path / "plain"
    shutil.copytree(EXAMPLES, plain)  # a folder outside git: no commit to name
    assert cli("reconcile", "--repo", str(plain), "--cluster", f"sim:{tmp_path / 'd.json'}",
               "--report-dir", str(tmp_path / "r2"))[0] == 0
    assert json.loads((tmp_path / "r2" / "status.json").read_text())["revision"] is None


def test_the_templates_read_a_dicts_keys_and_its_methods_as_jinja_does():
    """The report's environment looks a dict's key up first (a speed-up): the answers
    stay Jinja's, a dict's method names included, and a missing key is still an error."""
    import jinja2

    from omegitops.report.status import environment

    env = environment()

    def render(source: str, **values) -> str:
        return env.from_string(source).render(**values)

    assert render("{{ c.desired }}", c={"desired": 3}) == "3"
    assert render("{{ c.get('x', 1) }} {{ c.items() | list }}",
                  c={"get": "a key", "items": "another"}) == \
        "1 [('get', 'a key'), ('items', 'another')]"
    assert render("{{ c.real }}", c=2) == "2"  # not a dict: Jinja's way
    with pytest.raises(jinja2.UndefinedError):
        render("{{ c.missing }}", c={"desired": 3})
