"""The install as a user meets it: from a cluster without omegitops to the first green
run of the job, with the Kustomize base and with the Helm chart, on the real control
plane and the real node.

    python tests/bench/bench_install.py [--ways kustomize,helm]

Each way gets a control plane and a real node of its own (``running_node_cluster`` of
tests/controlplane/conftest.py, ``installed=False``): KWOK's GPU nodes and OME's CRDs,
the examples' InferenceServices in the API (a cluster with OME, the repository synced),
and nothing of omegitops (no namespace, no CRD, no RBAC). Then the commands of
docs/getting-started.md's cluster part (tests/controlplane/guide.py), timed:

- ``apply_seconds``: step 1 (``kubectl create namespace``, the Secret) and step 2,
  either the user's kustomization and ``kubectl apply -k`` or ``helm install``;
- ``pull_and_start_seconds``: from ``kubectl create job --from=cronjob/...`` until the
  pod's container runs (scheduling, the sandbox, the container's start; the image is
  on the node already, imported from the archive node/images.sh writes: there is no
  registry here, so ``image_import_seconds`` is that import, timed on its own, the
  stand-in for a pull);
- ``run_seconds``: from the container's start until the Job is Complete (clone,
  reconcile the examples until idle, push the report to ``omegitops-status``);
- ``first_green_seconds``: from the first command until the Job is Complete.

Between step 2 and the Job the CronJob's pods are sent to the real node by a patch
(KWOK's nodes run no containers), not timed; with the chart, whose schema takes only
https URLs, ``helm install`` is given the guide's example URL and the same untimed
step sets the test's ``git://`` remote in the settings. ``cold`` holds what a fresh machine pays
once, before any of that: the builds of the control plane, of Helm and of the node's
images, timed here (seconds each call took, and whether it built or found its cache).
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO_ROOT / "tests" / "controlplane"
sys.path.insert(0, str(CONTROLPLANE))
sys.path.insert(0, str(REPO_ROOT))

import guide
import test_job
from conftest import running_node_cluster
from kubernetes import client as k8s
from test_job import git
from test_shipped_job import examples_remote

WAYS = ("kustomize", "helm")
JOB_SECONDS = 900


def timed_build(*argv: str) -> tuple[dict, Path]:
    """One build script, timed; whether it built (its ``built in N s`` line) or found
    its cache. Returns the figures and the last line it printed (its output folder)."""
    started = time.monotonic()
    done = subprocess.run(["bash", *argv], capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    built = re.findall(r"built in (\d+) s", done.stderr)
    return ({"seconds": round(seconds, 1), "built": bool(built),
             "reported_build_seconds": [int(s) for s in built]},
            Path(done.stdout.strip().splitlines()[-1]))


def cold_builds() -> tuple[dict, Path]:
    """The control plane's, Helm's and the node's images' builds (each script's lock
    makes a concurrent caller wait, then find the cache). Returns the figures and helm."""
    control_plane, _ = timed_build(str(CONTROLPLANE / "build.sh"))
    helm, helm_bin = timed_build(str(CONTROLPLANE / "build.sh"), "helm")
    images, _ = timed_build(str(CONTROLPLANE / "node" / "images.sh"))
    return ({"control_plane": control_plane, "helm": helm, "images": images},
            helm_bin / "helm")


def import_seconds(cp) -> float:
    """The project's image imported into the node's containerd again, timed."""
    archive = str(Path(cp.images["DIR"]) / "omegitops.tar")
    cp.node.ctr("images", "rm", "--sync", cp.images["IMAGE"])
    started = time.monotonic()
    cp.node.ctr("images", "import", archive)
    return time.monotonic() - started


def step(script: str, cwd: Path, env: dict[str, str]) -> str:
    done = guide.run(script, cwd, env)
    if done.returncode != 0:
        raise RuntimeError(f"{script}\n{done.stdout}{done.stderr}")
    return done.stdout


def install_once(way: str, workdir: Path, helm: Path) -> dict:
    with running_node_cluster(workdir / "cluster", installed=False) as cp:
        test_job.put_examples(cp)
        url, remote = examples_remote(cp, "manifests")
        users = workdir / "user"
        users.mkdir()
        env = guide.environment(cp, [helm])
        steps = {name: guide.localised(command, url, users)
                 for name, command in guide.commands(guide.cluster_part()).items()}
        # The chart's schema takes https URLs only; the test's remote speaks git://.
        # helm gets the guide's example URL, the settings the remote's, by the patch.
        steps["helm"] = guide.localised(guide.commands(guide.cluster_part())["helm"],
                                        guide.EXAMPLE_REPO_URL, users)
        imported = import_seconds(cp)

        started = time.monotonic()
        step(steps["secret"], users, env)
        step(steps[way], users, env)
        applied = time.monotonic()
        guide.on_the_real_node(cp)
        if way == "helm":
            k8s.CoreV1Api(cp.admin).patch_namespaced_config_map(
                "omegitops-settings", "omegitops", {"data": {"REPO_URL": url}})
        created = time.monotonic()
        step(steps["job"], users, env)
        seen = guide.job_milestones(cp, "first-run", JOB_SECONDS)
        if "complete" not in seen:
            raise RuntimeError(f"{way}: the first run did not complete: {seen}")
        report = git("show", f"{test_job.REPORT_BRANCH}:status/status.json", cwd=remote)
    # The patch to the real node is the harness's, not the user's: left out.
    patch = created - applied
    return {
        "apply_seconds": round(applied - started, 2),
        "image_import_seconds": round(imported, 2),
        "pull_and_start_seconds": round(seen["started"] - created, 2),
        "scheduled_seconds": round(seen["scheduled"] - created, 2),
        "run_seconds": round(seen["complete"] - seen["started"], 2),
        "first_green_seconds": round(seen["complete"] - started - patch, 2),
        "report_pushed": bool(report),
    }


def bench(workdir: Path, ways: list[str]) -> dict:
    cold, helm = cold_builds()
    figures = {}
    for way in ways:
        figures[way] = install_once(way, workdir / way, helm)
        sys.stderr.write(f"install: {way} {figures[way]}\n")
    return {"benchmark": "install", "ways": figures, "cold": cold}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ways", default=",".join(WAYS))
    args = parser.parse_args(argv)
    ways = [w for w in args.ways.split(",") if w]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways {sorted(unknown)}; choose from {WAYS}")
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), ways))
    return 0


if __name__ == "__main__":
    sys.exit(main())
