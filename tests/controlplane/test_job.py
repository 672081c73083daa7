"""The scheduled job on the real control plane: the CronJob's own command line, as the
``omegitops`` ServiceAccount, against a git repository, on the wall clock."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import JOB_NAMESPACE, PIPELINES, REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def cronjob_argv(env: dict[str, str]) -> list[str]:
    """The command line of pipelines/cronjob.yaml, with its $(VAR) references expanded
    from the container's env as the kubelet expands them (``env`` overrides values)."""
    cronjob = yaml.safe_load((PIPELINES / "cronjob.yaml").read_text())
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    values = {e["name"]: e.get("value") for e in container.get("env") or []}
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
    return remote


def example_namespaces() -> list[str]:
    return [doc["metadata"]["name"]
            for doc in yaml.safe_load_all((EXAMPLES / "namespaces.yaml").read_text()) if doc]


def run_job(cp, argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = cp.env(cp.job_kubeconfig)
    env["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
    # argv[0] is the console script; run the same entry point with this interpreter.
    return subprocess.run([sys.executable, "-m", "omegitops", *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def examples_in_cluster(ome_crds, tmp_path):
    """The examples' namespaces, runtimes and InferenceServices in the API, as a cluster
    with OME installed and the repository synced has them."""
    cp = ome_crds
    for namespace in example_namespaces():
        cp.create_namespace(namespace)
    cp.wait_for(lambda: all(cp.get("v1", "ServiceAccount", ns, "default")
                            for ns in example_namespaces()), 30, "default ServiceAccounts")
    for path in sorted((EXAMPLES / "runtimes").glob("*.yaml")) + \
            sorted((EXAMPLES / "services").rglob("*.yaml")):
        cp.apply_file(path)
    yield cp
    for namespace in example_namespaces():
        cp.delete("v1", "Namespace", None, namespace)


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

    # The report was committed and pushed back to the branch the job cloned.
    log = git("log", "--format=%s", "main", cwd=remote)
    assert len(log.splitlines()) == 2, log
    report = git("show", "main:status/status.json", cwd=remote)
    assert '"readyReplicas"' in report or "ready" in report

    # The next scheduled run finds nothing to do and writes nothing.
    again = run_job(cp, argv, workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(git("log", "--format=%s", "main", cwd=remote).splitlines()) == 2
