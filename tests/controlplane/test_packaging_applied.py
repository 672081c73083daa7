"""The Kustomize bases (``pipelines/cronjob``, ``pipelines/argo``) and the Helm chart
(``pipelines/chart/omegitops``), unchanged, sent to the real API server by the real
kubectl, as a user or Argo CD would: ``kubectl apply -k`` and ``helm template |
kubectl apply -f -``, with a server-side dry run (admission, the built-in types'
validation and the CRDs' schemas, Argo's included; nothing is kept, so the
session's other tests meet the cluster as it was). The CronJob of the base running
on a real node: test_shipped_job.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import PIPELINES, build_helm
from test_pipelines_applied import argo_crds

CHART = PIPELINES / "chart" / "omegitops"
SCHEDULERS = ("cronjob", "argo")


@pytest.fixture(scope="module")
def with_argo(control_plane):
    control_plane.apply_files(argo_crds())
    return control_plane


def kubectl(cp, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([str(cp.kubectl), f"--kubeconfig={cp.admin_kubeconfig}", *args],
                          input=stdin, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def applied(output: str) -> set[tuple[str, str]]:
    """(kind, name) of every object ``kubectl apply -o yaml`` answered with."""
    answer = yaml.safe_load(output)
    items = answer["items"] if answer.get("kind") == "List" else [answer]
    for item in items:
        # Filled in by the server: the object passed admission and its schema.
        assert item["metadata"].get("creationTimestamp") or item["metadata"].get("uid"), item
    return {(i["kind"], i["metadata"]["name"]) for i in items}


def rendered(text: str) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(text) if d}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_kustomize_base_is_accepted_as_shipped(with_argo, scheduler):
    base = PIPELINES / scheduler
    want = rendered(kubectl(with_argo, "kustomize", str(base)))
    got = applied(kubectl(with_argo, "apply", "-k", str(base), "--dry-run=server",
                          "-o", "yaml"))
    assert got == want
    assert ("ConfigMap", "omegitops-settings") in got


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_chart_is_accepted_as_shipped(with_argo, scheduler):
    helm: Path = build_helm()
    done = subprocess.run([str(helm), "template", "omegitops", str(CHART), "--namespace",
                           "omegitops", "--include-crds", "--set", f"scheduler={scheduler}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    got = applied(kubectl(with_argo, "apply", "-f", "-", "--dry-run=server", "-o", "yaml",
                          stdin=done.stdout))
    assert got == rendered(done.stdout)


def test_the_dry_run_is_a_real_check(with_argo):
    """The server refuses a CronJob of the base made wrong: the dry run validates."""
    objects = yaml.safe_load_all(kubectl(with_argo, "kustomize", str(PIPELINES / "cronjob")))
    (cronjob,) = [o for o in objects if o and o["kind"] == "CronJob"]
    cronjob["spec"]["concurrencyPolicy"] = "Sometimes"
    done = subprocess.run([str(with_argo.kubectl), f"--kubeconfig={with_argo.admin_kubeconfig}",
                           "apply", "-f", "-", "--dry-run=server"], input=yaml.safe_dump(cronjob),
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "concurrencyPolicy" in done.stderr, done.stderr
