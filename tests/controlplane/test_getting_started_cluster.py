"""The cluster part of docs/getting-started.md, run as a reader would (guide.py): the
namespace and the Secret, the kustomization over the base and ``kubectl apply -k``, the
first run at once (``kubectl create job --from=cronjob/...``), then what step 4 reads:
the report on its branch and ``kubectl get inferencereplica -A``. On the real control
plane, the job's pod on the real node (the image built from the Dockerfile).

The Helm way of step 2 is timed from an empty cluster by tests/bench/bench_install.py;
it cannot share this cluster with the base (both own the same objects).
"""

from __future__ import annotations

import re
import subprocess

import guide
import pytest
import test_job
from test_job import git
from test_shipped_job import examples_in_node_cluster, examples_remote, wait_for_job

from tests.project.test_getting_started import omegitops_on_path

pytestmark = pytest.mark.node

__all__ = ["examples_in_node_cluster"]  # the fixture, used below by name


def run_secret_step(cp, script: str, cwd, env) -> None:
    """Step 1, command by command. This session's cluster already has the namespace
    (the other node tests run in it): only there is ``AlreadyExists`` let through."""
    for command in re.split(r"(?<!\\)\n", script.strip()):
        done = guide.run(command, cwd, env)
        if done.returncode and "create namespace" in command \
                and "AlreadyExists" in done.stderr:
            continue
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"


def test_the_guides_cluster_steps_bring_the_examples_to_ready(examples_in_node_cluster,
                                                                 tmp_path):
    cp, _namespaces = examples_in_node_cluster
    # The Secret is the reader's to make (the fixture made one for the other tests).
    cp.delete("v1", "Secret", "omegitops", "omegitops-git")
    url, remote = examples_remote(cp, "getting-started")
    # kubectl first on PATH, then this checkout's omegitops (step 4 runs both).
    shim = omegitops_on_path(tmp_path)
    env = guide.environment(cp, [])
    env.update(PATH=f"{cp.kubectl.parent}:{shim['PATH']}", PYTHONPATH=shim["PYTHONPATH"])
    steps = guide.commands(guide.cluster_part())

    run_secret_step(cp, guide.localised(steps["secret"], url, tmp_path), tmp_path, env)
    applied = guide.run(guide.localised(steps["kustomize"], url, tmp_path), tmp_path, env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    for shown in ("namespace/omegitops", "configmap/omegitops-settings",
                  "customresourcedefinition.apiextensions.k8s.io/inferencereplicas.ome.io",
                  "cronjob.batch/omegitops-reconcile"):
        assert shown in applied.stdout, applied.stdout
    settings = cp.get("v1", "ConfigMap", "omegitops", "omegitops-settings")
    assert settings["data"]["REPO_URL"] == url
    guide.on_the_real_node(cp)

    created = guide.run(steps["job"], tmp_path, env)
    assert created.returncode == 0, created.stderr
    assert "job.batch/first-run created" in created.stdout
    wait_for_job(cp, "first-run", seconds=600)

    # Step 4: the report on its branch, main untouched; the state with cluster access.
    assert len(git("log", "--format=%s", "main", cwd=remote).splitlines()) == 1
    report = git("show", f"{test_job.REPORT_BRANCH}:status/STATUS.md", cwd=remote)
    assert "deepseek-r1" in report and "qwen3-0-6b" in report, report
    assert git("show", f"{test_job.REPORT_BRANCH}:status/status.json", cwd=remote)
    replicas = subprocess.run(["bash", "-c", "kubectl get inferencereplica -A"], env=env,
                              capture_output=True, text=True, check=True).stdout
    assert "deepseek-r1" in replicas, replicas
    listed = subprocess.run(["bash", "-c", "omegitops get irep -A --cluster kube"], env=env,
                            capture_output=True, text=True, check=False)
    assert listed.returncode == 0, listed.stderr
    assert "deepseek-r1" in listed.stdout, listed.stdout
