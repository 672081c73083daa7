"""A 16-Instance SurgeThenDrain rollout (maxSurge 25%) under ``--until-idle`` on the
simulated cluster, divided by the ideal duration of an event-driven controller.

    python tests/bench/bench_rollout.py [--instances 16] [--min-ready 30]

One service, one engine of 16 single-pod Instances, SurgeThenDrain with
maxSurge 25% (4 replacements at a time) and maxUnavailable 0, minReadySeconds
30, is brought up and settled. Its image then changes, and ``omegitops
reconcile --until-idle`` runs the rollout to the end; the measured duration is
the simulated clock from the change to the end of the loop.

The ideal is what a controller reacting at once to every change (a watch,
zero latency, every step in no time) would take on the same pod timings, the
simulator's own (``omegitops/cluster/sim/kubelet.py``):

    ideal = sum over batches b of  pull(b) + startup + minReadySeconds + drain

- batches: ceil(16 / maxSurge) = 4; with maxUnavailable 0 a batch starts
  when the previous batch's old pods are gone and their surge slots free;
- scheduling: 0 s (the simulated scheduler binds at once);
- pull(b): the 20 s image pull when a pod of batch b is the first with the new
  image on its node (pulls on one node are shared), else 0; the nodes are
  those the rollout actually used, as an ideal controller makes the same
  creations and deletions in the same order, so the scheduler places alike;
- startup: ready after readinessProbe initialDelaySeconds + periodSeconds
  (10 + 5 s); putting the pod into rotation (the serving gate) takes no time;
- minReadySeconds: the new pod must stay Ready that long to be available,
  before the old one is handed over;
- drain: the old pod, unrouted, is deleted; with no preStop hook its
  container exits 2 s after SIGTERM, and the pod is gone.

The until-idle loop jumps the clock to the next transition (or to the plan's
own wake-up), so it should come close.

The second figure, ``passes_per_rollout_ratio``, is what a CronJob feels: one
pass per period. Four single-pod Instances roll under SurgeThenDrain (maxSurge 1,
maxUnavailable 0, minReadySeconds 0) with one pass every 60 s of simulated time,
longer than any pod transition, so every pass sees the cluster done with the last
one's writes. The ideal is a reconciler that takes every step whose precondition
holds and waits only where the documents make it wait for the cluster:

    ideal = 4 x batches + 1

per batch: create the new pod; route it once its containers are ready; hand over
(unroute the old pod) once the new one is Ready and available; delete the old pod
once the Service stops routing to it; and the pass that sees it gone ends the
update and starts the next batch (the last batch's end is the +1). Prints one
JSON document.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import benchlib
import genfleet
import yaml

from omegitops.app.passes import MANAGED
from omegitops.cluster.base import POD
from omegitops.cluster.sim import SimCluster
from omegitops.cluster.sim.kubelet import DEFAULT_EXIT_SECONDS, startup_delay
from omegitops.cluster.sim.store import DEFAULT_PULL_SECONDS
from omegitops.model.replica import decode_rows
from omegitops.render.templates import LABEL_REVISION
from omegitops.util.times import parse_time

TARGET = 1.05
SURGE = "25%"


def write_repo(root: Path, instances: int, min_ready: int, image: str,
               surge: int | str = SURGE) -> None:
    runtime = genfleet.runtime("srt-rollout", "single", image=image)
    service = {
        "apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "rollout", "namespace": "bench"},
        "spec": {"deploymentMode": "OMENative", "model": {"name": "m"},
                 "runtime": {"name": "srt-rollout"},
                 "engine": {"minReplicas": instances, "maxReplicas": instances,
                            "lifecycle": {"minReadySeconds": min_ready, "updateStrategy": {
                                "type": "SurgeThenDrain",
                                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": 0}}}}},
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "runtime.yaml").write_text(yaml.safe_dump(runtime, sort_keys=False))
    (root / "service.yaml").write_text(yaml.safe_dump(service, sort_keys=False))


def _pods(cluster_path: Path) -> list[dict]:
    with SimCluster(cluster_path) as cluster:
        return cluster.list_objects(POD, MANAGED)


def _clock(cluster_path: Path) -> float:
    with SimCluster(cluster_path) as cluster:
        return cluster.now().timestamp()


def ideal_seconds(new_pods: list[dict], min_ready: int) -> tuple[float, list[dict]]:
    """The formula of the module docstring over the new revision's pods."""
    batches: dict[float, list[dict]] = {}
    for pod in new_pods:
        batches.setdefault(parse_time(pod["metadata"]["creationTimestamp"]), []).append(pod)
    pulled: set[str] = set()
    total, rows = 0.0, []
    for created in sorted(batches):
        pods = batches[created]
        nodes = {pod["spec"]["nodeName"] for pod in pods}
        pull = DEFAULT_PULL_SECONDS if nodes - pulled else 0
        pulled |= nodes
        container = pods[0]["spec"]["containers"][0]
        startup = startup_delay(pods[0], container)
        seconds = pull + startup + min_ready + DEFAULT_EXIT_SECONDS
        rows.append({"pods": len(pods), "pull": pull, "startup": startup,
                     "minReady": min_ready, "drain": DEFAULT_EXIT_SECONDS, "seconds": seconds})
        total += seconds
    return total, rows


def bench(workdir: Path, instances: int = 16, min_ready: int = 30) -> dict:
    root, cluster_path = workdir / "rollout-repo", workdir / "rollout-cluster.json"
    write_repo(root, instances, min_ready, "sglang:v1")
    SimCluster.init(cluster_path, nodes=max(4, math.ceil(instances * 1.5 / 8)))
    if benchlib.reconcile_until_idle(root, cluster_path) != 0:
        raise RuntimeError("the service did not come up")
    start = _clock(cluster_path)
    write_repo(root, instances, min_ready, "sglang:v2")
    if benchlib.reconcile_until_idle(root, cluster_path) != 0:
        raise RuntimeError("the rollout failed")
    measured = _clock(cluster_path) - start
    pods = _pods(cluster_path)
    revisions = {pod["metadata"]["labels"][LABEL_REVISION] for pod in pods}
    images = {pod["spec"]["containers"][0]["image"] for pod in pods}
    if len(pods) != instances or len(revisions) != 1 or images != {"sglang:v2"}:
        raise RuntimeError(f"the rollout did not finish: {len(pods)} pods, images {images}")
    ideal, batches = ideal_seconds(pods, min_ready)
    return {
        "benchmark": "rollout_vs_ideal",
        "instances": instances, "maxSurge": SURGE, "maxUnavailable": 0,
        "minReadySeconds": min_ready,
        "measured_seconds": round(measured, 3),
        "ideal_seconds": round(ideal, 3),
        "rollout_vs_ideal_ratio": round(measured / ideal, 4),
        "target": TARGET,
        "batches": batches,
        "passes": passes_per_rollout(workdir),
    }


PASS_TARGET = 1.1
PERIOD = 60.0


def passes_per_rollout(workdir: Path, instances: int = 4) -> dict:
    """Passes of a one-pass-per-period rollout, over the ideal of the docstring."""
    root, cluster_path = workdir / "passes-repo", workdir / "passes-cluster.json"
    write_repo(root, instances, 0, "sglang:v1", surge=1)
    SimCluster.init(cluster_path, nodes=max(2, math.ceil(instances * 2 / 8)))
    if benchlib.reconcile_until_idle(root, cluster_path) != 0:
        raise RuntimeError("the service did not come up")
    write_repo(root, instances, 0, "sglang:v2", surge=1)
    passes = 0
    while True:
        passes += 1
        code = benchlib.reconcile_once(root, cluster_path)
        if code != 0:
            raise RuntimeError(f"pass {passes} failed ({code})")
        images = {pod["spec"]["containers"][0]["image"] for pod in _pods(cluster_path)}
        if images == {"sglang:v2"} and _settled(cluster_path):
            break
        if passes > 20 * instances:
            raise RuntimeError(f"the rollout did not finish in {passes} passes")
        with SimCluster(cluster_path) as cluster:
            cluster.advance(PERIOD)
    ideal = 4 * instances + 1
    return {"instances": instances, "maxSurge": 1, "maxUnavailable": 0,
            "minReadySeconds": 0, "period_seconds": PERIOD, "passes": passes,
            "ideal_passes": ideal, "passes_per_rollout_ratio": round(passes / ideal, 4),
            "target": PASS_TARGET}


def _settled(cluster_path: Path) -> bool:
    """Every Instance at rest, none left to move: the rollout's last pass is done."""
    with SimCluster(cluster_path) as cluster:
        replicas = cluster.list_objects("InferenceReplica", MANAGED)
    return all(not (row.get("operation") or {}) and row.get("phase") == "Ready"
               for replica in replicas
               for row in decode_rows((replica.get("status") or {}).get("instances")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--min-ready", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), args.instances, args.min_ready))
    return 0


if __name__ == "__main__":
    sys.exit(main())
