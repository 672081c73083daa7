"""A fleet on the real API server, as the shipped job meets it, in one run.

    python tests/bench/bench_cluster.py [--services 1000] [--no-min-ready] [--one-worker]
                                        [--no-bump]

On the control plane of the tests (``tests/controlplane``: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager with each controller under its own
ServiceAccount, KWOK nodes), the ``genfleet`` fleet of ``--services`` services
(1,000 are 8,000 pods in 1,750 components) goes through what a platform team's job
does with it, each run of omegitops a fresh process as a CronJob pod is
(``python -m omegitops reconcile``, the job's ServiceAccount), each measured for its
wall time, its CPU seconds and its peak memory (the child's own ``ru_maxrss``), and
its requests counted from the API server's audit log by verb and resource:

1. **bring-up**: ``reconcile --until-idle`` from an empty cluster to a fleet at rest;
2. **converged**: one ``reconcile`` pass right after the bring-up (the CronJob without
   ``--until-idle``), and one ``--until-idle`` run, which ends after its pass; then,
   once no managed pod has changed for a minute (``settle``; a tenth of a second per
   service for a small fleet, at least 10 s: the controllers, the
   scheduler and KWOK done with the bring-up, as a CronJob's run mostly finds them),
   three more single passes (``converged_settled``), each with what moved of the
   managed pods and the nodes since the one before (``moved``: which fields of the
   pods a pass reads changed, and how many pods changed only where it does not
   read). Beside the same single pass on ``sim:`` (the same fleet, converged on a
   simulated cluster, a fresh process too): the settled median's ratio is held to 3
   (``sim_target``, which run.py's ``targets`` report);
3. **a runtime image bump**: the ClusterServingRuntime ``srt-single-0`` (the runtime of
   every single-pod engine: 250 components of 8 Instances at 1,000 services, under
   SurgeThenDrain with maxSurge 25% and maxUnavailable 0, a third of them with
   minReadySeconds 30) gets a new image, and at the same moment the Deployment
   controller rolls the same pods: a Deployment per such engine, in namespace
   ``peer``, of the pod template omegitops renders for it (without its
   ``ome.io/serving`` readiness gate, which nothing would set there), with its
   Instance count, minReadySeconds and budgets (maxSurge and maxUnavailable as they
   are; another strategy's maxUnavailable with maxSurge 0).
   ``reconcile --until-idle`` rolls omegitops's side. Both are timed to their end;
   the requests of each side in that window are counted, the controllers' being the
   Deployment and ReplicaSet controllers'.

Each run of omegitops applies its plans as ``OMEGITOPS_APPLY_WORKERS`` in this process's
environment says (``apply_workers`` in the output; 1: one plan after another). With
``--one-worker`` the image is bumped once more (to v3) with the job applying one plan
after another, beside the Deployments again: the same run's baseline.

omegitops's rollout also waits, per the documents, for each drained pod to be gone
before its surge slot is free (KWOK's ``pod-delete`` stage), where the Deployment
controller frees it once termination starts. ``--no-bump`` leaves the bump out (the
bring-up and the converged runs only). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import benchlib
import genfleet
import yaml
from bench_peer import CONTROLLERS, requests_by, stamp
from bench_watch import fleet_control_plane, prepare_fleet_cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "controlplane"))

from conftest import JOB_NAMESPACE, JOB_USER
from controlplane import ControlPlane
from kubernetes import client as k8s

from omegitops.cluster.base import trim_pod
from omegitops.cluster.kube.cluster import APPLY_WORKERS_ENV, apply_workers
from omegitops.manifests.load import load, resolved_components
from omegitops.render.desired import build_desired
from omegitops.render.templates import DEFAULT, LABEL_ISVC, MANAGED_BY, MANAGER

RUNTIME = "srt-single-0"
PEER = "peer"
# The target: one converged run on the real API server within 3x the same pass
# on sim:.
SIM_TARGET = 3.0
# The control plane is at rest once no managed pod has changed for a minute, or a tenth
# of a second per service for a small fleet, at least QUIET_MIN (polled every
# SETTLE_POLL seconds), waited for at most SETTLE_LIMIT.
QUIET_SECONDS = 60
QUIET_MIN = 10
SETTLE_POLL = 10
SETTLE_LIMIT = 1200
SETTLED_RUNS = 3


def bumped_engines(root: Path) -> list:
    """The resolved engines of the fleet's services on ``RUNTIME``."""
    return [item for item in resolved_components(load(root))
            if item.lifecycle.managed and item.runtime is not None
            and item.runtime.data["metadata"]["name"] == RUNTIME]


def _strategy(lifecycle) -> dict:
    """The RollingUpdate nearest to the component's OMENative strategy."""
    settings = lifecycle.settings
    if lifecycle.strategy == "SurgeThenDrain":
        return {"maxSurge": settings.max_surge or 0,
                "maxUnavailable": settings.max_unavailable or 0}
    return {"maxSurge": 0, "maxUnavailable": settings.max_unavailable or 1}


def deployment(item, image: str) -> dict:
    """The Deployment of the pod template omegitops renders for ``item``'s engine."""
    desired = build_desired(item.service.data, item.runtime.data, item.lifecycle, [], None,
                            item.operator)
    spec = copy.deepcopy(desired.templates[DEFAULT]["spec"])
    spec.pop("readinessGates", None)
    for container in spec["containers"]:
        container["image"] = image
    name = item.service.data["metadata"]["name"]
    app = {"app": f"{PEER}-{name}"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": PEER},
        "spec": {"replicas": item.lifecycle.replicas,
                 "minReadySeconds": item.lifecycle.min_ready_seconds,
                 "selector": {"matchLabels": app},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": _strategy(item.lifecycle)},
                 "template": {"metadata": {"labels": app}, "spec": spec}},
    }


def strip_min_ready(root: Path) -> None:
    """``--no-min-ready``: the services' minReadySeconds removed (a quick run)."""
    for path in (root / "services").rglob("*.yaml"):
        body = yaml.safe_load(path.read_text())
        for component in ("engine", "decoder", "router"):
            (body["spec"].get(component) or {}).get("lifecycle", {}).pop("minReadySeconds",
                                                                         None)
        path.write_text(yaml.safe_dump(body, sort_keys=False))


def set_runtime_image(root: Path, image: str) -> None:
    path = root / "runtimes" / f"{RUNTIME}.yaml"
    body = yaml.safe_load(path.read_text())
    body["spec"]["engineConfig"]["runner"]["image"] = image
    path.write_text(yaml.safe_dump(body, sort_keys=False))


def omegitops(env: dict, root: Path, cluster: str, *extra: str) -> dict:
    """One ``omegitops reconcile`` as a fresh process: wall and CPU seconds, peak MB."""
    figures, _ = benchlib.measured([sys.executable, "-m", "omegitops", "reconcile", "--repo",
                                    str(root), "--cluster", cluster, *extra], env=env, cwd=root)
    return {"seconds": round(figures["seconds"], 2),
            "cpu_seconds": round(figures["cpu_seconds"], 2),
            "peak_rss_mb": round(figures["peak_rss_mb"], 1)}


def counted(cp: ControlPlane, run, users: tuple[str, ...] = (JOB_USER,)) -> dict:
    """``run()``'s figures and the requests ``users`` made meanwhile."""
    since, begun = cp.audit_offset(), stamp()
    figures = run()
    time.sleep(1)  # the audit log's last lines are written after the answers
    requests: Counter[str] = Counter()
    for user in users:
        requests.update(requests_by(cp, user, since, (begun, stamp())))
    return {**figures, "requests": sum(requests.values()),
            "by_request": dict(sorted(requests.items()))}


class DeploymentsClock:
    """Lists the ``peer`` Deployments from a thread: when all have rolled."""

    def __init__(self, apps: k8s.AppsV1Api, image: str) -> None:
        self.apps, self.image = apps, image
        self.done_at: float | None = None
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> DeploymentsClock:
        self._thread.start()
        return self

    def _poll(self) -> None:
        while True:
            items = self.apps.list_namespaced_deployment(PEER).items
            if items and all(_rolled(d, self.image) for d in items):
                self.done_at = time.monotonic()
                return
            time.sleep(0.25)

    def wait(self, seconds: float) -> float:
        self._thread.join(seconds)
        if self.done_at is None:
            raise RuntimeError("the Deployments did not finish rolling")
        return self.done_at


def _rolled(d, image: str) -> bool:
    s, want = d.status, d.spec.replicas
    return (d.metadata.generation == (s.observed_generation or 0)
            and d.spec.template.spec.containers[0].image == image
            and (s.updated_replicas or 0) == want == (s.available_replicas or 0)
            and (s.replicas or 0) == want)


def bump(cp: ControlPlane, apps: k8s.AppsV1Api, env: dict, root: Path,
         engines: list, image: str) -> dict:
    """The runtime's image and the Deployments' changed at once; both timed."""
    since, begun = cp.audit_offset(), stamp()
    set_runtime_image(root, image)
    started = time.monotonic()
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "ome-container", "image": image}]}}}}
    for item in engines:
        apps.patch_namespaced_deployment(item.service.data["metadata"]["name"], PEER, patch)
    clock = DeploymentsClock(apps, image).start()
    ours = omegitops(env, root, "kube", "--until-idle", "--max-seconds", "3600")
    ours_done = time.monotonic()
    theirs_done = clock.wait(1800)
    time.sleep(1)
    window = (begun, stamp())
    mine = requests_by(cp, JOB_USER, since, window)
    theirs: Counter[str] = Counter()
    for user in CONTROLLERS:
        theirs.update(requests_by(cp, user, since, window))
    bumped = {(i.service.data["metadata"]["namespace"], i.service.data["metadata"]["name"])
              for i in engines}
    left = {c["image"] for p in cp.list("v1", "Pod")
            if (p["metadata"]["namespace"],
                (p["metadata"].get("labels") or {}).get(LABEL_ISVC)) in bumped
            for c in p["spec"]["containers"]}
    return {"omegitops_seconds": round(ours_done - started, 2),
            "deployment_seconds": round(theirs_done - started, 2),
            "omegitops_run": ours, "images_left": sorted(left),
            "omegitops_requests": sum(mine.values()),
            "controllers_requests": sum(theirs.values()),
            "omegitops_by_request": dict(sorted(mine.items())),
            "controllers_by_request": dict(sorted(theirs.items()))}


class Snapshot:
    """The managed pods by uid and each node's Ready transition time, read as admin
    (the pods' JSON decoded as it comes: 8,000 pods through the client's models take
    seconds)."""

    def __init__(self, core: k8s.CoreV1Api) -> None:
        answer = core.list_pod_for_all_namespaces(
            label_selector=f"{MANAGED_BY}={MANAGER}", _preload_content=False)
        self.pods = {p["metadata"]["uid"]: p for p in json.loads(answer.data)["items"]}
        answer = core.list_node(_preload_content=False)
        self.nodes = {n["metadata"]["name"]: _ready_since(n)
                      for n in json.loads(answer.data)["items"]}

    def versions(self) -> dict[str, str]:
        return {uid: p["metadata"]["resourceVersion"] for uid, p in self.pods.items()}


def _ready_since(node: dict) -> str | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("lastTransitionTime")
    return None


def quiet_seconds(services: int) -> float:
    """How long no managed pod must change for the control plane to be at rest."""
    return min(QUIET_SECONDS, max(QUIET_MIN, services / 10))


def settle(core: k8s.CoreV1Api, quiet: float) -> dict:
    """Wait until no managed pod has changed for ``quiet`` seconds (at most
    SETTLE_LIMIT): the seconds waited, and whether it came to rest."""
    start = time.monotonic()
    last, since = Snapshot(core).versions(), start
    while time.monotonic() - start < SETTLE_LIMIT:
        time.sleep(SETTLE_POLL)
        now = Snapshot(core).versions()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return {"seconds": round(time.monotonic() - start, 1), "settled": True}
    return {"seconds": round(time.monotonic() - start, 1), "settled": False}


# What moves on every write, and which no pass reads.
_BOOKKEEPING = ("resourceVersion", "managedFields")


def seen_by_pass(pod: dict) -> dict:
    """A pod as a pass keeps it (``trim_pod``), less what moves on every write."""
    kept = trim_pod(pod)
    kept["metadata"] = {k: v for k, v in kept["metadata"].items() if k not in _BOOKKEEPING}
    return kept


def differing(a, b, path: str = "", depth: int = 4) -> list[str]:
    """The paths (``status.conditions[Ready].status``, to ``depth`` levels) where two
    JSON values differ; a list of conditions is compared by each one's type."""
    if a == b:
        return []
    if depth == 0 or type(a) is not type(b) or not isinstance(a, dict | list):
        return [path or "."]
    if isinstance(a, list):
        typed = all(isinstance(x, dict) and "type" in x for x in a + b)
        if not typed:
            return [path]
        a, b = ({x["type"]: x for x in a}, {x["type"]: x for x in b})
        return [found for key in sorted(a.keys() | b.keys())
                for found in differing(a.get(key), b.get(key), f"{path}[{key}]", depth - 1)]
    return [found for key in sorted(a.keys() | b.keys())
            for found in differing(a.get(key), b.get(key), f"{path}.{key}" if path else key,
                                   depth - 1)]


def moved(before: Snapshot, after: Snapshot) -> dict:
    """What moved between two snapshots: pods added and gone, pods whose
    resourceVersion moved (each moves its component's converged fingerprint) and, of
    those, how many a pass sees no differently, with the fields that differ for the
    others; and the nodes whose Ready condition changed."""
    fields: Counter[str] = Counter()
    versions, unseen = 0, 0
    for uid in before.pods.keys() & after.pods.keys():
        old, new = before.pods[uid], after.pods[uid]
        if old["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]:
            continue
        versions += 1
        paths = differing(seen_by_pass(old), seen_by_pass(new))
        if not paths:
            unseen += 1
        fields.update(paths)
    flapped = sum(1 for name, since in after.nodes.items()
                  if name in before.nodes and before.nodes[name] != since)
    return {"pods_added": len(after.pods.keys() - before.pods.keys()),
            "pods_gone": len(before.pods.keys() - after.pods.keys()),
            "pods_moved": versions, "pods_moved_unseen_by_pass": unseen,
            "fields": dict(fields.most_common(12)), "nodes_ready_changed": flapped}


def settled_runs(cp: ControlPlane, core: k8s.CoreV1Api, env: dict, root: Path,
                 services: int) -> dict:
    """SETTLED_RUNS single passes once the control plane is at rest, one after another,
    and their medians; each with what moved between the snapshot taken just before it
    and the one taken before the run before it (for the first, when the control plane
    came to rest): what its fingerprints can find changed since that run listed."""
    waited = settle(core, quiet_seconds(services))
    runs, last = [], Snapshot(core)
    for _ in range(SETTLED_RUNS):
        now = Snapshot(core)
        run = counted(cp, lambda: omegitops(env, root, "kube"))
        run["moved_before"] = moved(last, now)
        runs.append(run)
        last = now
    return {"settle": waited, "runs": runs,
            **{f"median_{key}": statistics.median(r[key] for r in runs)
               for key in ("seconds", "cpu_seconds", "peak_rss_mb", "requests")}}


def sim_pass(fleets: Path, services: int) -> dict:
    """The same single pass on a simulated cluster of the same fleet (converged in
    ``fleets``, or taken from there), a fresh process each time; medians of 3."""
    root, cluster_path, _ = benchlib.converged_fleet(fleets, services)
    runs = [omegitops(dict(os.environ), root, f"sim:{cluster_path}") for _ in range(3)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def bench(workdir: Path, services: int, no_min_ready: bool, fleets: Path,
          one_worker: bool = False, no_bump: bool = False) -> dict:
    root = workdir / "repo"
    counts = genfleet.write_fleet(root, services)
    if no_min_ready:
        strip_min_ready(root)
    engines = bumped_engines(root)
    mirrored = sum(item.lifecycle.replicas for item in engines)
    # The sim: fleet keeps its minReadySeconds: --no-min-ready has no twin there.
    sim = None if no_min_ready else sim_pass(fleets, services)
    with fleet_control_plane(workdir / "controlplane") as cp:
        kubeconfig = prepare_fleet_cluster(cp, counts["pods"] + 2 * mirrored,
                                           counts["namespaces"], PEER)
        env = {**cp.env(kubeconfig), "OMEGITOPS_NAMESPACE": JOB_NAMESPACE}
        apps = k8s.AppsV1Api(cp.admin)
        for item in engines:
            apps.create_namespaced_deployment(PEER, deployment(item, "sglang:v1"))
        bring_up = counted(cp, lambda: omegitops(env, root, "kube", "--until-idle",
                                                 "--max-seconds", "7200"))
        DeploymentsClock(apps, "sglang:v1").start().wait(1800)
        single = counted(cp, lambda: omegitops(env, root, "kube"))
        idle = counted(cp, lambda: omegitops(env, root, "kube", "--until-idle"))
        settled = settled_runs(cp, k8s.CoreV1Api(cp.admin), env, root, services)
        rolled = None if no_bump else bump(cp, apps, env, root, engines, "sglang:v2")
        # The same bump again, the job applying one plan after another: its baseline.
        alone = bump(cp, apps, {**env, APPLY_WORKERS_ENV: "1"}, root, engines,
                     "sglang:v3") if one_worker and not no_bump else None
    for figures, image in ((rolled, "sglang:v2"), (alone, "sglang:v3")):
        if figures is not None and figures["images_left"] != [image]:
            raise RuntimeError(f"the bump to {image} left images {figures['images_left']}")
    return {
        "benchmark": "real_api_server_fleet",
        "services": services, "components": counts["components"], "pods": counts["pods"],
        # How many services' plans each run applies at once (OMEGITOPS_APPLY_WORKERS).
        "apply_workers": apply_workers(),
        "bumped_components": len(engines), "bumped_pods": mirrored,
        "bring_up": bring_up,
        "converged_pass": single, "converged_until_idle": idle,
        "converged_settled": settled,
        "sim_pass": sim,
        "converged_vs_sim_ratio": round(settled["median_seconds"] / sim["seconds"], 3)
        if sim else None,
        "converged_after_bring_up_vs_sim_ratio": round(single["seconds"] / sim["seconds"], 3)
        if sim else None,
        "sim_target": SIM_TARGET,
        "bump": rolled,
        "bump_vs_deployments_ratio": round(rolled["omegitops_seconds"]
                                           / rolled["deployment_seconds"], 3)
        if rolled else None,
        "bump_requests_ratio": round(rolled["omegitops_requests"]
                                     / max(1, rolled["controllers_requests"]), 3)
        if rolled else None,
        "bump_one_worker": alone,
        "bump_one_worker_vs_deployments_ratio": round(
            alone["omegitops_seconds"] / alone["deployment_seconds"], 3) if alone else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--no-min-ready", action="store_true",
                        help="drop the services' minReadySeconds: a quick run, no sim: twin")
    parser.add_argument("--one-worker", action="store_true",
                        help="bump the image again with the job applying one plan after "
                             "another (OMEGITOPS_APPLY_WORKERS=1), beside the Deployments")
    parser.add_argument("--no-bump", action="store_true",
                        help="leave the image bump out: the bring-up and converged runs only")
    parser.add_argument("--workdir", default=None,
                        help="keep the converged sim: fleet here (as the other benchmarks do)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), args.services, args.no_min_ready,
                            Path(args.workdir or scratch), args.one_worker, args.no_bump))
    return 0


if __name__ == "__main__":
    sys.exit(main())
