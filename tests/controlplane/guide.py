"""The cluster part of docs/getting-started.md as a reader runs it: its shell blocks and
its inline commands, in order, by bash, with ``kubectl`` (and ``helm``) on PATH and the
kubeconfig of a real control plane. Two things differ from a reader's machine and are
put in here: the Kustomize base comes from this checkout, not from GitHub at a tag, and
the repository's URL is the test's git daemon. Used by
``test_getting_started_cluster.py`` and ``tests/bench/bench_install.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import time
from pathlib import Path

from conftest import JOB_NAMESPACE, PIPELINES, REPO_ROOT
from kubernetes import client as k8s
from realnode import NODE_NAME

GUIDE = REPO_ROOT / "docs" / "getting-started.md"
# What the guide names that a test cannot reach, and what stands for it.
PUBLISHED_BASE = "https://github.com/omegitops/omegitops//pipelines/cronjob?ref=v0.1.0"
EXAMPLE_REPO_URL = "https://git.example.com/platform/ome-manifests.git"


def cluster_part() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("## On a real cluster")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def shell_blocks(section: str) -> list[str]:
    """The ``sh`` blocks, dedented (they sit in a numbered list)."""
    return [textwrap.dedent(block)
            for block in re.findall(r"```sh\n(.*?)^\s*```", section, re.DOTALL | re.MULTILINE)]


def inline_command(section: str, start: str) -> str:
    """The first inline command that starts with ``start``, its line breaks undone."""
    prose = re.sub(r"```.*?```", "", section, flags=re.DOTALL)
    for code in re.findall(r"`([^`]+)`", prose):
        command = " ".join(code.split())
        if command.startswith(start):
            return command
    raise AssertionError(f"the guide has no `{start} ...`")


def commands(section: str) -> dict[str, str]:
    """The guide's steps by name: ``secret`` (namespace and Secret), ``kustomize`` (the
    user's kustomization and ``kubectl apply -k``), ``helm`` (``helm install``), ``job``
    (the first run at once)."""
    secret, kustomize = shell_blocks(section)[:2]
    assert "create secret generic omegitops-git" in secret, secret
    assert "kubectl apply -k" in kustomize, kustomize
    return {"secret": secret, "kustomize": kustomize,
            "helm": inline_command(section, "helm install "),
            "job": inline_command(section, "kubectl -n omegitops create job ")}


def localised(command: str, repo_url: str, cwd: Path) -> str:
    """``command`` with the published base replaced by this checkout's and the
    example repository's URL by ``repo_url``; the chart's path is relative to the
    checkout, so it is made absolute."""
    user_dir = cwd / "my-omegitops"
    base = os.path.relpath(PIPELINES / "cronjob", user_dir)
    command = command.replace(PUBLISHED_BASE, base).replace(EXAMPLE_REPO_URL, repo_url)
    return command.replace(" pipelines/chart/", f" {PIPELINES}/chart/")


def environment(cp, tools: list[Path]) -> dict[str, str]:
    """kubectl (and the other ``tools``' folders) first on PATH, the admin kubeconfig."""
    folders = [str(cp.kubectl.parent), *(str(t.parent) for t in tools)]
    return dict(os.environ, PATH=os.pathsep.join([*folders, os.environ["PATH"]]),
                KUBECONFIG=str(cp.admin_kubeconfig), TOKEN="unused-by-git-daemon")


def run(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def on_the_real_node(cp) -> None:
    """The CronJob's pods to the real node, the one that runs containers (KWOK's nodes
    only pretend): what no user needs, patched after the install."""
    k8s.BatchV1Api(cp.admin).patch_namespaced_cron_job(
        "omegitops-reconcile", JOB_NAMESPACE,
        {"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME}}}}}}})


def job_milestones(cp, name: str, seconds: float, every: float = 0.2) -> dict[str, float]:
    """Watch the Job ``name`` from now until it ends: monotonic times of its pod's
    scheduling, its container's start and the Job's end (``complete`` or ``failed``)."""
    batch, core = k8s.BatchV1Api(cp.admin), k8s.CoreV1Api(cp.admin)
    seen: dict[str, float] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        cp.check()
        cp.node.check()
        now = time.monotonic()
        for pod in core.list_namespaced_pod(JOB_NAMESPACE,
                                            label_selector=f"job-name={name}").items:
            if pod.spec.node_name:
                seen.setdefault("scheduled", now)
            for status in pod.status.container_statuses or []:
                if status.state.running or status.state.terminated:
                    seen.setdefault("started", now)
        conditions = {c.type: c.status
                      for c in batch.read_namespaced_job(name, JOB_NAMESPACE).status.conditions
                      or []}
        if conditions.get("Complete") == "True":
            seen["complete"] = now
            return seen
        if conditions.get("Failed") == "True":
            seen["failed"] = now
            return seen
        time.sleep(every)
    return seen
