"""One ``kubectl drain`` of a node that runs omegitops' Instances and a Deployment's pods
(with a PodDisruptionBudget, maxUnavailable 1) side by side, on the real control plane.

    python tests/bench/bench_drain.py [--replicas 2]

The control plane of the tests (``tests/controlplane``) is started with four KWOK
nodes. ``bench/svc`` (``--replicas`` single-pod Instances, the default strategy) and
``peer/drain``, a Deployment of omegitops' own pod template with as many replicas
and a PodDisruptionBudget of maxUnavailable 1, are brought up on one node (the others
cordoned meanwhile), and every node is opened again. Then the real ``kubectl drain
--ignore-daemonsets --delete-emptydir-data --force`` runs against that node while
omegitops' passes run as the job's ServiceAccount, one after the other.

Reported for each, side by side, sampled every 0.2 s during the drain:

- ``lowest_serving``: the fewest pods serving (Ready, not terminating; for omegitops
  also in rotation), against ``replicas`` wanted;
- ``off_node_seconds``: from the drain's start until none of its pods is on the node.

and for the drain itself ``drain_seconds`` (it ends once both are off). The figures
that compare: ``serving_floor_ratio`` (omegitops' lowest over the Deployment's: above
1 means the Deployment dipped further) and ``off_node_ratio`` (omegitops' time over
the Deployment's: the price of make-before-break, a replacement brought up, Ready and
available before the source goes). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib
from bench_peer import rendered_template

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "controlplane"))
sys.path.insert(0, str(REPO_ROOT))

from conftest import JOB_NAMESPACE, PIPELINES, build_control_plane
from controlplane import ControlPlane
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from omegitops.app.passes import run_pass
from omegitops.cluster.kube import KubeCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.render import pods as P
from tests.fleet import write_service

NODE = "kwok-node-0"
SAMPLE_SECONDS = 0.2
DRAIN_SECONDS = 600


def peer_objects(template: dict, replicas: int) -> list[dict]:
    """The Deployment of omegitops' pod template (no readiness gate: nothing would set
    it) and its PodDisruptionBudget."""
    spec = {**template["spec"]}
    spec.pop("readinessGates", None)
    labels = {"app": "peer-drain"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "drain", "namespace": "peer"},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": spec}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "drain", "namespace": "peer"},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
    ]


def _live(pods: list[dict]) -> list[dict]:
    return [p for p in pods if not P.is_terminating(p) and not P.has_ended(p)]


def serving(cp: ControlPlane, namespace: str) -> int:
    pods = _live(cp.list("v1", "Pod", namespace))
    if namespace == "bench":
        return sum(1 for p in pods if P.is_ready(p) and P.gate_set(p))
    return sum(1 for p in pods if P.is_ready(p))


def on_node(cp: ControlPlane, namespace: str) -> int:
    return sum(1 for p in cp.list("v1", "Pod", namespace)
               if (p.get("spec") or {}).get("nodeName") == NODE)


def _passes_until(job: KubeCluster, root: Path, done, seconds: float, between=None) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError("not reached in time")
        items = resolved_components(load(root))
        result = run_pass(job, items)
        if result.errors:
            raise RuntimeError(result.errors)
        if between is not None:
            between()
        if not result.applied:
            time.sleep(SAMPLE_SECONDS)


def bench(workdir: Path, replicas: int) -> dict:
    root = workdir / "repo"
    write_service(root, name="svc", namespace="bench", replicas=replicas)
    with ControlPlane(build_control_plane(), workdir / "controlplane") as cp:
        cp.add_nodes(4, gpus=8)
        cp.apply_files([PIPELINES / "crds" / "inferencereplica-crd.yaml"])
        cp.create_namespace(JOB_NAMESPACE)
        cp.apply_file(PIPELINES / "common" / "rbac.yaml")
        for namespace in ("bench", "peer"):
            cp.create_namespace(namespace, wait=True)
        core = k8s.CoreV1Api(cp.admin)
        cp.cordon_all()
        core.patch_node(NODE, {"spec": {"unschedulable": None}})
        job = KubeCluster(api_client=k8s_config.new_client_from_config(
            str(cp.service_account_kubeconfig(JOB_NAMESPACE, "omegitops"))), lease=False)
        for obj in peer_objects(rendered_template(root), replicas):
            cp.apply(obj)
        _passes_until(job, root, lambda: serving(cp, "bench") == replicas
                      and serving(cp, "peer") == replicas, 300)
        if on_node(cp, "bench") != replicas or on_node(cp, "peer") != replicas:
            raise RuntimeError("the pods did not all land on the node")
        cp.cordon_all(False)
        lowest = {"bench": replicas, "peer": replicas}
        off: dict[str, float] = {}
        out = workdir / "drain.log"
        started = time.monotonic()
        drain = subprocess.Popen(
            [str(cp.kubectl), "--kubeconfig", str(cp.admin_kubeconfig), "drain", NODE,
             "--ignore-daemonsets", "--delete-emptydir-data", "--force",
             f"--timeout={DRAIN_SECONDS}s"], stdout=out.open("w"), stderr=subprocess.STDOUT)

        def sample() -> None:
            for namespace, least in list(lowest.items()):
                lowest[namespace] = min(least, serving(cp, namespace))
                if namespace not in off and not on_node(cp, namespace):
                    off[namespace] = time.monotonic() - started

        try:
            _passes_until(job, root, lambda: drain.poll() is not None, DRAIN_SECONDS + 30,
                          between=sample)
        finally:
            if drain.poll() is None:
                drain.kill()
        drained = time.monotonic() - started
        sample()
        job.api_client.close()
        if drain.wait() != 0:
            raise RuntimeError(f"the drain failed:\n{out.read_text()[-3000:]}")
    figures = {name: {"lowest_serving": lowest[namespace],
                      "off_node_seconds": round(off.get(namespace, drained), 2)}
               for name, namespace in (("omegitops", "bench"), ("deployment", "peer"))}
    ours, theirs = figures["omegitops"], figures["deployment"]
    return {
        "benchmark": "drain_beside_deployment",
        "replicas": replicas,
        "drain_seconds": round(drained, 2),
        "omegitops": ours, "deployment": theirs,
        "serving_floor_ratio": round(ours["lowest_serving"] / theirs["lowest_serving"], 4)
        if theirs["lowest_serving"] else None,
        "off_node_ratio": round(ours["off_node_seconds"] / theirs["off_node_seconds"], 4)
        if theirs["off_node_seconds"] else None,
        "refused_evictions": out_count(out),
    }


def out_count(log: Path) -> int:
    return log.read_text().count("Cannot evict pod as it would violate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), args.replicas))
    return 0


if __name__ == "__main__":
    sys.exit(main())
