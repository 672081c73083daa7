"""The scheduled job on the real control plane: the CronJob's own command line, as the
``omegitops`` ServiceAccount, against a git repository, on the wall clock."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from conftest import JOB_NAMESPACE, JOB_USER, PIPELINES, REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def cronjob_argv(env: dict[str, str]) -> list[str]:
    """The command line of pipelines/cronjob/cronjob.yaml, with its $(VAR) references expanded
    from the container's env as the kubelet expands them: the settings ConfigMap's keys
    (``envFrom``), the literal env values over them, ``env`` over both."""
    cronjob = yaml.safe_load((PIPELINES / "cronjob" / "cronjob.yaml").read_text())
    settings = yaml.safe_load((PIPELINES / "common" / "settings.yaml").read_text())
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": settings["metadata"]["name"]}}]
    values = dict(settings["data"])
    values.update({e["name"]: e.get("value") for e in container.get("env") or []})
    values.update(env)
    argv = [*container["command"], *container["args"]]
    expanded = []
    for arg in argv:
        for name, value in values.items():
            if value is not None:
                arg = arg.replace(f"$({name})", value)
        assert "$(" not in arg, f"{arg}: no value in the CronJob's env"
        expanded.append(arg)
    return expanded


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def examples_remote(tmp_path: Path) -> Path:
    """A bare repository holding ``examples/`` as its main branch, with the warm-up
    windows cut to seconds: the examples wait 15 and 20 minutes before an Instance
    counts as Ready, which a test on the wall clock cannot."""
    work = tmp_path / "work"
    shutil.copytree(EXAMPLES, work)
    for path in work.rglob("*.yaml"):
        text = path.read_text()
        text = text.replace("minReadySeconds: 1200", "minReadySeconds: 2")
        text = text.replace("minReadySeconds: 900", "minReadySeconds: 2")
        path.write_text(text)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "examples",
        cwd=work)
    remote = tmp_path / "remote.git"
    git("clone", "-q", "--bare", str(work), str(remote), cwd=tmp_path)
    protect_main(remote)
    return remote


def protect_main(remote: Path) -> None:
    """Refuse every push to main, as branch protection does: the shipped pipelines
    commit their report onto a branch of their own."""
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n"
                    "  [ \"$ref\" = refs/heads/main ] && "
                    "{ echo 'main is protected' >&2; exit 1; }\n"
                    "done\nexit 0\n")
    hook.chmod(0o755)


def example_namespaces() -> list[str]:
    return [doc["metadata"]["name"]
            for doc in yaml.safe_load_all((EXAMPLES / "namespaces.yaml").read_text()) if doc]


def run_job(cp, argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = cp.env(cp.job_kubeconfig)
    env["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
    # argv[0] is the console script; run the same entry point with this interpreter.
    return subprocess.run([sys.executable, "-m", "omegitops", *argv[1:]], cwd=cwd, env=env,
                          check=False,
                          capture_output=True, text=True, timeout=timeout)


def examples_with_short_windows(tmp_path: Path) -> Path:
    """A copy of examples/ whose warm-up windows are seconds, not 15-20 minutes."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    for path in repo.rglob("*.yaml"):
        text = path.read_text()
        path.write_text(text.replace("minReadySeconds: 1200", "minReadySeconds: 1")
                        .replace("minReadySeconds: 900", "minReadySeconds: 1"))
    return repo


def wait_for_terminating_namespaces(cp) -> None:
    """Until no namespace is terminating. The job lists across namespaces: an earlier
    test's namespace still going would show in its first report as an unknown
    InferenceReplica, and the examples' own cannot be made again until they are gone."""
    deadline = time.monotonic() + 120
    while any(n["metadata"].get("deletionTimestamp") for n in cp.list("v1", "Namespace")):
        assert time.monotonic() < deadline, "an earlier test's namespace is still going"
        time.sleep(1)


# Where the shipped pipelines commit the report (pipelines/: --report-branch).
REPORT_BRANCH = "omegitops-status"


def put_examples(cp) -> None:
    """The examples' namespaces, runtimes and InferenceServices in the API, as a cluster
    with OME installed and the repository synced has them."""
    wait_for_terminating_namespaces(cp)
    for namespace in example_namespaces():
        cp.create_namespace(namespace, wait=True)
    # OME 1.2's CRDs predate the OMENative fields (spec.*.lifecycle): the API server
    # drops them, as it does on such a cluster; omegitops reads them from Git.
    cp.apply_files(sorted((EXAMPLES / "runtimes").glob("*.yaml"))
                   + sorted((EXAMPLES / "services").rglob("*.yaml")), validation="Ignore")


def remove_examples(cp) -> None:
    for namespace in example_namespaces():
        cp.delete("v1", "Namespace", None, namespace)


@pytest.fixture
def examples_in_cluster(ome_crds, tmp_path):
    put_examples(ome_crds)
    yield ome_crds
    remove_examples(ome_crds)


def test_cronjob_command_line_brings_the_examples_to_ready(examples_in_cluster, tmp_path):
    cp = examples_in_cluster
    remote = examples_remote(tmp_path)
    argv = cronjob_argv({"REPO_URL": f"file://{remote}", "MAX_SECONDS": "300"})
    assert argv[:2] == ["omegitops", "reconcile"] and "--until-idle" in argv
    workdir = tmp_path / "job"
    workdir.mkdir()
    done = run_job(cp, argv, workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "403" not in done.stderr and "Forbidden" not in done.stderr, done.stderr[-3000:]

    replicas = cp.list("ome.io/v1beta1", "InferenceReplica")
    by_name = {r["metadata"]["name"]: r for r in replicas}
    assert by_name, "no InferenceReplica was written"
    for name, replica in by_name.items():
        status, spec = replica["status"], replica["spec"]
        assert status["readyReplicas"] == spec["replicas"], (name, status)
        assert status["availableReplicas"] == spec["replicas"], (name, status)
    pods = [p for ns in example_namespaces() for p in cp.list("v1", "Pod", ns)]
    assert pods and all(any(c["type"] == "Ready" and c["status"] == "True"
                            for c in p["status"]["conditions"]) for p in pods)

    # The report was committed and pushed onto its own branch; main was only read.
    assert len(git("log", "--format=%s", "main", cwd=remote).splitlines()) == 1
    log = git("log", "--format=%s", REPORT_BRANCH, cwd=remote)
    assert len(log.splitlines()) == 1, log
    report = git("show", f"{REPORT_BRANCH}:status/status.json", cwd=remote)
    assert '"readyReplicas"' in report or "ready" in report

    # The next scheduled run finds nothing to do and writes nothing.
    again = run_job(cp, argv, workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(git("log", "--format=%s", REPORT_BRANCH, cwd=remote).splitlines()) == 1


# -- one run at a time: the Lease ---------------------------------------------------------

LEASE = ("coordination.k8s.io/v1", "Lease", JOB_NAMESPACE, "omegitops")


def small_repo(tmp_path: Path, namespace: str, names=("svc",)) -> Path:
    from tests.fleet import write_service

    repo = tmp_path / "repo"
    for name in names:
        write_service(repo, name=name, namespace=namespace, replicas=1, grace=1)
    return repo


def reconcile_argv(repo: Path, *more: str) -> list[str]:
    return ["omegitops", "reconcile", "--repo", str(repo), "--cluster", "kube",
            "--until-idle", "--max-seconds", "120", *more]


def put_lease(cp, holder: str, renewed_seconds_ago: int) -> None:
    from datetime import UTC, datetime, timedelta

    renewed = datetime.now(UTC) - timedelta(seconds=renewed_seconds_ago)
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cp.delete(*LEASE)
    cp.apply({"apiVersion": LEASE[0], "kind": "Lease",
              "metadata": {"name": LEASE[3], "namespace": LEASE[2]},
              "spec": {"holderIdentity": holder, "leaseDurationSeconds": 60,
                       "acquireTime": stamp, "renewTime": stamp}})


@pytest.fixture
def job_namespace(namespace, control_plane):
    """The test's namespace; the Lease goes with it."""
    yield namespace
    control_plane.delete(*LEASE)


def test_a_run_held_by_another_does_nothing_and_names_the_holder(control_plane, job_namespace,
                                                                 tmp_path):
    cp, ns = control_plane, job_namespace
    put_lease(cp, "other-job-7d9f/1", renewed_seconds_ago=5)
    done = run_job(cp, reconcile_argv(small_repo(tmp_path, ns)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "other-job-7d9f/1" in done.stderr, done.stderr
    assert cp.list("v1", "Pod", ns) == []
    assert cp.get(*LEASE)["spec"]["holderIdentity"] == "other-job-7d9f/1"


def test_an_expired_lease_is_taken_over_and_released(control_plane, job_namespace, tmp_path):
    cp, ns = control_plane, job_namespace
    put_lease(cp, "dead-job/1", renewed_seconds_ago=600)
    done = run_job(cp, reconcile_argv(small_repo(tmp_path, ns)), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dead-job/1" in done.stderr, done.stderr
    pods = cp.list("v1", "Pod", ns)
    assert [p["metadata"]["name"] for p in pods] == ["svc-engine-0-default-0"]
    # Released at the end, so that the next run need not wait for it to expire.
    assert not cp.get(*LEASE)["spec"].get("holderIdentity")


# -- --prune ------------------------------------------------------------------------------


def test_prune_tears_down_a_service_the_repository_no_longer_has(control_plane, job_namespace,
                                                                 tmp_path):
    cp, ns = control_plane, job_namespace
    # --prune tears down every managed component the repository lacks, in the whole
    # cluster: let the namespaces of earlier tests finish going first.
    cp.wait_for(lambda: all(r["metadata"]["namespace"] == ns
                            for r in cp.list("ome.io/v1beta1", "InferenceReplica")), 180,
                "earlier tests' InferenceReplicas gone")
    repo = small_repo(tmp_path, ns, names=("keep", "gone"))
    done = run_job(cp, reconcile_argv(repo), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {p["metadata"]["name"] for p in cp.list("v1", "Pod", ns)} == {
        "keep-engine-0-default-0", "gone-engine-0-default-0"}
    (repo / "services" / "gone.yaml").unlink()

    # Without --prune, the service is left alone.
    done = run_job(cp, reconcile_argv(repo), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cp.get("ome.io/v1beta1", "InferenceReplica", ns, "gone-engine")

    done = run_job(cp, reconcile_argv(repo, "--prune"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "403" not in done.stderr
    left = {(o["kind"], o["metadata"]["name"])
            for kind in ("Pod", "Service", "ControllerRevision")
            for o in cp.list("apps/v1" if kind == "ControllerRevision" else "v1", kind, ns)
            if o["metadata"]["name"].startswith("gone")}
    assert left == set(), left
    assert cp.get("ome.io/v1beta1", "InferenceReplica", ns, "gone-engine") is None
    assert cp.get("ome.io/v1beta1", "InferenceReplica", ns, "keep-engine")


# -- what one run reads ---------------------------------------------------------------------


def test_one_pass_with_a_report_lists_each_kind_once_and_only_warning_events(
        control_plane, job_namespace, tmp_path):
    """A run without --until-idle: the pass LISTs what it observes, then one more LIST of
    the InferenceReplicas serves both the table and the report, and the report's events
    are Warnings, chosen by the API server. (A LIST answered 429, as the API server
    answers while a kind's watch cache is still starting, is tried again: counted are
    the LISTs answered.)"""
    cp, ns = control_plane, job_namespace
    repo = small_repo(tmp_path, ns)
    since = cp.audit_offset()
    done = run_job(cp, ["omegitops", "reconcile", "--repo", str(repo), "--cluster", "kube",
                        "--report-dir", str(tmp_path / "status")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "status" / "status.json").is_file()
    lists: dict[str, list[dict]] = {}
    for event in cp.audit_events(JOB_USER, since):
        uri = urlsplit(event["requestURI"])
        if event["verb"] == "list" and event["responseStatus"]["code"] == 200:
            lists.setdefault(uri.path.rstrip("/").split("/")[-1], []).append(
                dict(parse_qsl(uri.query)))
    counts = {plural: len(queries) for plural, queries in lists.items()}
    # PodGroups are observed where their CRD is installed (by an earlier test here).
    assert counts.pop("podgroups", 1) == 1
    # One LIST of each: the table and the report read the InferenceReplicas as the pass
    # left them, not a second LIST.
    # Nodes (migration off a cordoned or tainted node) and the components'
    # PodDisruptionBudgets are observed by the pass too.
    assert counts == {"pods": 1, "inferencereplicas": 1, "controllerrevisions": 1,
                      "services": 1, "events": 1, "nodes": 1,
                      "poddisruptionbudgets": 1}, lists
    assert lists["events"][0]["fieldSelector"] == "type=Warning"
