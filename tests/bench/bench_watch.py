"""A 16-Instance rollout inside a fleet, under ``--until-idle`` on the real control plane,
divided by the ideal of an event-driven controller on the same pod timings.

    python tests/bench/bench_watch.py [--services 1000] [--instances 16] [--min-ready 30]

The control plane of the tests (``tests/controlplane``: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager, KWOK; built once per machine) is started
with KWOK nodes for the fleet. The ``genfleet`` fleet of ``--services`` services
(1,000 are 8,000 pods) and one more service, the same as ``bench_rollout.py``'s
(16 single-pod Instances, SurgeThenDrain, maxSurge 25%, maxUnavailable 0,
minReadySeconds 30), are brought up with ``reconcile --until-idle`` as the job's
ServiceAccount. That service's image then changes, and one more run of
``--until-idle`` (the same code path as the CLI's: ``run_until_idle`` on a
``KubeCluster``) rolls it; the wall time from the run's start to its end is
measured.

The ideal is what a controller reacting at once to every change would take on
KWOK's pod timings (``tests/controlplane/kwok-stages.yaml``):

    ideal = batches x (pod-create + pod-start + minReadySeconds + pod-delete)

with batches = ceil(16 / maxSurge) = 4: a new pod is Pending 0.2 s after it is
bound and ready 1 s later; it must stay Ready minReadySeconds; the old pod,
unrouted and deleted, is gone 2 s later, which frees the surge slot of the next
batch. Scheduling and every API call count as no time.

``run`` says where the measured run's time went: loading and validating the
repository (before the clock starts, as for the ideal), the first pass (its
LISTs of the whole fleet and its plans, all before the rollout's first step),
how many passes followed and how many components they planned in all.

``api_bytes_per_rollout_ratio`` is every byte the rollout's run read from the
API server (its ``Rest.meter``: LIST pages, watch streams, answers to GETs and
writes) divided by one initial LIST of each observed kind plus the watch events:
what an informer-driven controller reads.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import benchlib
import genfleet
import yaml
from bench_rollout import SURGE, write_repo

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE = REPO_ROOT / "tests" / "controlplane"
sys.path.insert(0, str(CONTROLPLANE))

from conftest import JOB_NAMESPACE, PIPELINES, build_control_plane
from controlplane import STAGES, ControlPlane
from kubernetes import config as k8s_config

from omegitops.app.untilidle import IDLE, run_until_idle
from omegitops.cluster.kube import KubeCluster
from omegitops.manifests.load import load, resolved_components

TARGET = 1.05
BYTES_TARGET = 1.1
GPUS_PER_NODE = 64  # KWOK nodes cost the API server little: few, large ones


def stage_seconds(name: str) -> float:
    """The delay of one KWOK stage, as kwok-stages.yaml sets it."""
    for stage in yaml.safe_load_all(STAGES.read_text()):
        if stage and stage["metadata"]["name"] == name:
            return stage["spec"].get("delay", {}).get("durationMilliseconds", 0) / 1000
    raise KeyError(name)


def fleet_control_plane(workdir: Path) -> ControlPlane:
    """The control plane a fleet is measured on beside the cluster's own controllers:
    node leases and the node monitor's grace as a real cluster keeps them, and each
    controller under its own ServiceAccount (whose requests the audit log then tells
    apart). Not started: use it as a context manager."""
    return ControlPlane(build_control_plane(), workdir, node_lease_seconds=40,
                        node_monitor_grace="50s", controller_credentials=True)


def prepare_fleet_cluster(cp: ControlPlane, pods: int, namespaces: int,
                          *others: str) -> Path:
    """KWOK nodes with room for ``pods`` GPU pods and a surge, the InferenceReplica CRD,
    the job's namespace and RBAC, the fleet's ``namespaces`` and ``others``; the job's
    kubeconfig."""
    cp.add_nodes(max(2, math.ceil(pods * 1.4 / GPUS_PER_NODE)), gpus=GPUS_PER_NODE,
                 cpu=str(GPUS_PER_NODE * 9), memory=f"{GPUS_PER_NODE * 40}Gi")
    cp.apply_files([PIPELINES / "crds" / "inferencereplica-crd.yaml"])
    cp.create_namespace(JOB_NAMESPACE)
    cp.apply_file(PIPELINES / "common" / "rbac.yaml")
    for number in range(namespaces):
        cp.create_namespace(f"team-{number:02d}")
    for namespace in others:
        cp.create_namespace(namespace, wait=True)
    return cp.service_account_kubeconfig(JOB_NAMESPACE, "omegitops")


def ideal_seconds(instances: int, surge: int, min_ready: int) -> tuple[float, dict]:
    batches = math.ceil(instances / surge)
    per_batch = {"create": stage_seconds("pod-create"), "start": stage_seconds("pod-start"),
                 "minReady": float(min_ready), "drain": stage_seconds("pod-delete")}
    return batches * sum(per_batch.values()), {"batches": batches, **per_batch}


def _run(kubeconfig: Path, root: Path, max_seconds: float) -> tuple[str, float, dict, dict]:
    """``reconcile --until-idle`` as the job: (why it stopped, wall seconds, bytes read,
    where the time went)."""
    client = k8s_config.new_client_from_config(str(kubeconfig))
    loading = time.monotonic()
    items = resolved_components(load(root))
    os.environ["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
    started = time.monotonic()
    ends: list[float] = []
    planned: list[int] = []

    def on_pass(result) -> None:
        ends.append(time.monotonic() - started)
        planned.append(len(result.plans))

    with KubeCluster(api_client=client) as cluster:
        stop = run_until_idle(cluster, items, max_seconds, on_pass=on_pass)
        meter = cluster.rest.meter.as_dict()
    client.close()
    passes = {"load_validate_seconds": round(started - loading, 2),
              "first_pass_seconds": round(ends[0], 2) if ends else None,
              "passes": len(ends),
              "components_planned_after_the_first": sum(planned[1:])}
    return stop, time.monotonic() - started, meter, passes


def bench(workdir: Path, services: int, instances: int, min_ready: int) -> dict:
    root = workdir / "repo"
    counts = genfleet.write_fleet(root, services) if services else {"pods": 0, "namespaces": 0}
    write_repo(root / "rollout", instances, min_ready, "sglang:v1")
    # Kubernetes' own node Lease timings (a kubelet's 40 s, renewed every 10 s; the node
    # controller's 50 s grace): the tests' short ones would have the fleet's KWOK nodes
    # renew 70 times a second at 1,000 services, a load no cluster of that size puts on
    # its API server.
    with ControlPlane(build_control_plane(), workdir / "controlplane",
                      node_lease_seconds=40, node_monitor_grace="50s") as cp:
        kubeconfig = prepare_fleet_cluster(cp, counts["pods"] + instances * 2,
                                           counts["namespaces"], "bench")
        stop, converge_s, _, _ = _run(kubeconfig, root, 7200)
        if stop != IDLE:
            raise RuntimeError(f"the fleet did not come up: {stop}")
        write_repo(root / "rollout", instances, min_ready, "sglang:v2")
        stop, measured, meter, passes = _run(kubeconfig, root, 1800)
        if stop != IDLE:
            raise RuntimeError(f"the rollout did not finish: {stop}")
        images = {c["image"] for p in cp.list("v1", "Pod", "bench")
                  for c in p["spec"]["containers"]}
        if images != {"sglang:v2"}:
            raise RuntimeError(f"the rollout left images {images}")
    surge = math.ceil(instances * int(SURGE.rstrip("%")) / 100)
    ideal, parts = ideal_seconds(instances, surge, min_ready)
    floor = meter["lists"] + meter["watches"]
    return {
        "benchmark": "rollout_vs_ideal_real",
        "services": services, "fleet_pods": counts["pods"], "instances": instances,
        "maxSurge": SURGE, "maxUnavailable": 0, "minReadySeconds": min_ready,
        "converge_seconds": round(converge_s, 1),
        "measured_seconds": round(measured, 2),
        "ideal_seconds": round(ideal, 2), "ideal": parts,
        "rollout_vs_ideal_ratio_real": round(measured / ideal, 4),
        "run": passes,
        "target": TARGET,
        "api_bytes": meter,
        "api_bytes_per_rollout_ratio": round(meter["total"] / floor, 4) if floor else None,
        "bytes_target": BYTES_TARGET,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--min-ready", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), args.services, args.instances, args.min_ready))
    return 0


if __name__ == "__main__":
    sys.exit(main())
