"""omegitops beside the Deployment controller, on one control plane, in one run.

    python tests/bench/bench_peer.py [--services 20] [--trials 3] [--cadence]

The peer a platform team would otherwise pick is an in-cluster controller. The control
plane of the tests (``tests/controlplane``) runs kube-controller-manager with each
controller under its own ServiceAccount, so that the audit log keeps the Deployment
and ReplicaSet controllers' requests beside the job's. Inside a ``genfleet`` fleet of
``--services`` services, two workloads of the same 16 pods run side by side:

- ``bench/rollout``, an OMENative service (``bench_rollout.py``'s: single-pod Instances,
  SurgeThenDrain, maxSurge 25%, maxUnavailable 0, minReadySeconds 30), reconciled by
  ``run_until_idle`` as the job's ServiceAccount, exactly as ``reconcile --until-idle``;
- ``peer/rollout``, a Deployment of the same pod template (the one omegitops renders,
  without its ``ome.io/serving`` readiness gate), strategy RollingUpdate with the same
  maxSurge, maxUnavailable and minReadySeconds.

Both images change at the same moment. Each rollout's wall time is measured (the
Deployment's until its status says all 16 pods are updated and available and no old
one is left; omegitops's until its run ends idle), and the job's requests in that
window are counted by verb and resource against the two controllers' together.

Where omegitops's extra time goes: the documents' drain wait (a SurgeThenDrain update
and its surge slot end only once the drained pod is gone: ``pod-delete`` of
``kwok-stages.yaml`` per batch, which the Deployment controller does not wait for), the
run's start (loading the repository and the first pass's LISTs), and the rest.

``--cadence`` also rolls the service once more as the CronJob without ``--until-idle``
runs it: one ``reconcile`` pass a minute (each a process of its own), counting passes,
time and requests against the Deployment's rollout of the same change.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import benchlib
import genfleet
from bench_rollout import SURGE, write_repo
from bench_watch import _run, fleet_control_plane, prepare_fleet_cluster, stage_seconds

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "controlplane"))

from conftest import JOB_NAMESPACE, JOB_USER
from controlplane import ControlPlane
from kubernetes import client as k8s

from omegitops.app.untilidle import IDLE
from omegitops.manifests.load import load, resolved_components
from omegitops.model.replica import decode_rows
from omegitops.render.desired import build_desired
from omegitops.render.templates import DEFAULT

CONTROLLERS = ("system:serviceaccount:kube-system:deployment-controller",
               "system:serviceaccount:kube-system:replicaset-controller")
# Targets: requests no more than the controllers', the rollout as below.
REQUESTS_TARGET = 1.0
ROLLOUT_TARGET_NOTE = "rollout <= the Deployment's plus the documents' drain wait"


def deployment(template: dict, instances: int, min_ready: int, image: str) -> dict:
    """The Deployment of omegitops's pod template for ``bench/rollout``: the same
    container, tolerations and volumes, the same budgets and window, no readiness gate
    (nothing would set it)."""
    spec = copy.deepcopy(template["spec"])
    spec.pop("readinessGates", None)
    for container in spec["containers"]:
        container["image"] = image
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "rollout", "namespace": "peer"},
        "spec": {
            "replicas": instances, "minReadySeconds": min_ready,
            "selector": {"matchLabels": {"app": "peer-rollout"}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": SURGE, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "peer-rollout"}}, "spec": spec},
        },
    }


def rendered_template(root: Path) -> dict:
    (item,) = [i for i in resolved_components(load(root)) if i.lifecycle.managed]
    desired = build_desired(item.service.data, item.runtime.data if item.runtime else None,
                            item.lifecycle, [], None, item.operator)
    return desired.templates[DEFAULT]


class DeploymentClock:
    """Watches ``peer/rollout`` from a thread: the wall time its rollout completes."""

    def __init__(self, apps: k8s.AppsV1Api, instances: int) -> None:
        self.apps, self.instances = apps, instances
        self.done_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            status = self.apps.read_namespaced_deployment_status("rollout", "peer")
            s = status.status
            if (status.metadata.generation == (s.observed_generation or 0)
                    and (s.updated_replicas or 0) == self.instances
                    and (s.available_replicas or 0) == self.instances
                    and (s.replicas or 0) == self.instances):
                self.done_at = time.monotonic()
                return
            time.sleep(0.1)

    def wait(self, seconds: float) -> float | None:
        self._thread.join(seconds)
        self._stop.set()
        return self.done_at


def set_image(apps: k8s.AppsV1Api, image: str) -> None:
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "ome-container", "image": image}]}}}}
    apps.patch_namespaced_deployment("rollout", "peer", patch)


def requests_by(cp: ControlPlane, user: str, since: int, window: tuple[str, str]
                ) -> Counter[str]:
    """The user's requests in the audit log within ``window`` (RFC3339 times), by
    ``verb resource[/subresource]``."""
    counts: Counter[str] = Counter()
    for event in cp.audit_events(user, since):
        if not window[0] <= event["requestReceivedTimestamp"] <= window[1]:
            continue
        ref = event.get("objectRef") or {}
        what = ref.get("resource", event["requestURI"].split("?")[0])
        if ref.get("subresource"):
            what += f"/{ref['subresource']}"
        counts[f"{event['verb']} {what}"] += 1
    return counts


def stamp() -> str:
    return datetime.now().astimezone().isoformat(timespec="microseconds")


def _settle_deployment(apps: k8s.AppsV1Api, instances: int, seconds: float = 600) -> None:
    clock = DeploymentClock(apps, instances)
    clock.start()
    if clock.wait(seconds) is None:
        raise RuntimeError("the Deployment did not become available")


def trial(cp: ControlPlane, apps: k8s.AppsV1Api, kubeconfig: Path, root: Path,
          instances: int, min_ready: int, image: str) -> dict:
    """Both images changed at once; both rollouts timed, the requests counted."""
    since = cp.audit_offset()
    clock = DeploymentClock(apps, instances)
    write_repo(root / "rollout", instances, min_ready, image)
    begun = stamp()
    started = time.monotonic()
    set_image(apps, image)
    clock.start()
    stop, _, meter, passes = _run(kubeconfig, root, 1800)
    ours_done = time.monotonic()
    theirs_done = clock.wait(900)
    ended = stamp()
    if stop != IDLE or theirs_done is None:
        raise RuntimeError(f"a rollout did not finish: omegitops {stop}, "
                           f"Deployment {'done' if theirs_done else 'not done'}")
    ours = requests_by(cp, JOB_USER, since, (begun, ended))
    theirs: Counter[str] = Counter()
    for user in CONTROLLERS:
        theirs.update(requests_by(cp, user, since, (begun, ended)))
    run_start = passes["load_validate_seconds"] + (passes["first_pass_seconds"] or 0.0)
    return {"omegitops_seconds": round(ours_done - started, 2),
            "deployment_seconds": round(theirs_done - started, 2),
            "run_start_seconds": round(run_start, 2),
            "omegitops_requests": sum(ours.values()),
            "controllers_requests": sum(theirs.values()),
            "omegitops_by_request": dict(sorted(ours.items())),
            "controllers_by_request": dict(sorted(theirs.items())),
            "api_bytes": meter, "run": passes}


def cadence_trial(cp: ControlPlane, apps: k8s.AppsV1Api, kubeconfig: Path, root: Path,
                  instances: int, min_ready: int, image: str, period: float = 60.0) -> dict:
    """The CronJob without --until-idle: ``reconcile`` once a minute, a process each."""
    since = cp.audit_offset()
    clock = DeploymentClock(apps, instances)
    write_repo(root / "rollout", instances, min_ready, image)
    begun = stamp()
    started = time.monotonic()
    set_image(apps, image)
    clock.start()
    env = {**cp.env(kubeconfig), "OMEGITOPS_NAMESPACE": JOB_NAMESPACE}
    passes = 0
    benchlib.compiled_as_installed()  # as the image's modules are
    while True:
        tick = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "omegitops", "reconcile", "--repo",
                               str(root), "--cluster", "kube"], env=env, capture_output=True,
                              text=True, check=False, cwd=root)
        passes += 1
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        if _rolled(cp, instances, image):
            break
        if time.monotonic() - started > 3600:
            raise RuntimeError("the cadence rollout did not finish in an hour")
        time.sleep(max(0.0, period - (time.monotonic() - tick)))
    ours_done = time.monotonic()
    theirs_done = clock.wait(900)
    ended = stamp()
    ours = requests_by(cp, JOB_USER, since, (begun, ended))
    theirs: Counter[str] = Counter()
    for user in CONTROLLERS:
        theirs.update(requests_by(cp, user, since, (begun, ended)))
    return {"passes": passes, "period_seconds": period,
            "omegitops_seconds": round(ours_done - started, 1),
            "deployment_seconds": round((theirs_done or ours_done) - started, 1),
            "omegitops_requests": sum(ours.values()),
            "controllers_requests": sum(theirs.values()),
            "omegitops_by_request": dict(sorted(ours.items())),
            "controllers_by_request": dict(sorted(theirs.items()))}


def _rolled(cp: ControlPlane, instances: int, image: str) -> bool:
    """Every Instance of bench/rollout Ready on the new image, nothing in flight."""
    replica = cp.get("ome.io/v1beta1", "InferenceReplica", "bench", "rollout-engine")
    status = (replica or {}).get("status") or {}
    rows = decode_rows(status.get("instances"))
    pods = cp.list("v1", "Pod", "bench")
    return (len(rows) == instances and all(r["phase"] == "Ready" and not r.get("operation")
                                           for r in rows)
            and {c["image"] for p in pods for c in p["spec"]["containers"]} == {image}
            and status.get("availableReplicas") == instances)


def bench(workdir: Path, services: int, instances: int, min_ready: int, trials: int,
          cadence: bool) -> dict:
    root = workdir / "repo"
    counts = genfleet.write_fleet(root, services) if services else {"pods": 0, "namespaces": 0}
    write_repo(root / "rollout", instances, min_ready, "sglang:v1")
    template = rendered_template(root / "rollout")
    with fleet_control_plane(workdir / "controlplane") as cp:
        kubeconfig = prepare_fleet_cluster(cp, counts["pods"] + instances * 4,
                                           counts["namespaces"], "bench", "peer")
        apps = k8s.AppsV1Api(cp.admin)
        apps.create_namespaced_deployment("peer", deployment(template, instances, min_ready,
                                                             "sglang:v1"))
        os.environ["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
        stop, _, _, _ = _run(kubeconfig, root, 7200)
        if stop != IDLE:
            raise RuntimeError(f"the fleet did not come up: {stop}")
        _settle_deployment(apps, instances)
        results = [trial(cp, apps, kubeconfig, root, instances, min_ready, f"sglang:v{n + 2}")
                   for n in range(trials)]
        paced = cadence_trial(cp, apps, kubeconfig, root, instances, min_ready,
                              f"sglang:v{trials + 2}") if cadence else None
    surge = math.ceil(instances * int(SURGE.rstrip("%")) / 100)
    batches = math.ceil(instances / surge)
    drain = batches * stage_seconds("pod-delete")
    ours = statistics.median(r["omegitops_seconds"] for r in results)
    theirs = statistics.median(r["deployment_seconds"] for r in results)
    start = statistics.median(r["run_start_seconds"] for r in results)
    requests_ratio = statistics.median(
        r["omegitops_requests"] / r["controllers_requests"] for r in results)
    return {
        "benchmark": "peer_deployment_controller",
        "services": services, "fleet_pods": counts["pods"], "instances": instances,
        "maxSurge": SURGE, "maxUnavailable": 0, "minReadySeconds": min_ready,
        "trials": trials,
        "rollout_ratio": round(ours / theirs, 4),
        "rollout_seconds": {"omegitops": ours, "deployment": theirs},
        "decomposition_seconds": {
            "drain_wait": round(drain, 2), "run_start": round(start, 2),
            "rest": round(ours - theirs - drain - start, 2)},
        "rollout_vs_deployment_plus_drain_ratio": round(ours / (theirs + drain), 4),
        "requests_ratio": round(requests_ratio, 4),
        "requests_target": REQUESTS_TARGET,
        "rollout_target": ROLLOUT_TARGET_NOTE,
        "cadence": paced,
        "cadence_requests_ratio": round(paced["omegitops_requests"]
                                        / paced["controllers_requests"], 4) if paced else None,
        "trials_detail": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=20)
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--min-ready", type=int, default=30)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cadence", action="store_true",
                        help="also roll at one pass a minute (the CronJob without "
                             "--until-idle; about 15 minutes)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), args.services, args.instances, args.min_ready,
                            args.trials, args.cadence))
    return 0


if __name__ == "__main__":
    sys.exit(main())
