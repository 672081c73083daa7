"""Run every benchmark and print one JSON document with the headline figures.

    python tests/bench/run.py [--services 1000] [--sizes 10,100,1000] [--runs 3]
                              [--instances 16] [--workdir DIR] [--watch-services N]
                              [--watch-min-ready 30] [--no-control-plane]
                              [--scale 10000] [--no-install] [--no-bring-up]

Each benchmark runs as its own process (``bench_pass.py``, ``bench_api.py``,
``bench_memory.py``, ``bench_rollout.py``, ``bench_shards.py``, and ``bench_watch.py`` and
``bench_peer.py``, ``bench_cluster.py`` and ``bench_drain.py`` on the real control plane unless ``--no-control-plane``, and
``bench_install.py`` there too unless ``--no-install`` (two clusters with a real node,
a few minutes), and ``bench_bringup.py`` unless ``--no-bring-up`` (four bring-ups of the
control-plane fleet, at most 300 services, each on a control plane of its own); each also runs alone and prints its
own document), sharing one work folder so that each converged fleet is built
once. The top-level keys are the headline figures; ``details`` holds each
benchmark's full document. Building the 1,000-service fleet (reconciling it
until idle) takes about a minute; a whole run a few minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(HERE / script), *args], check=False,
                          capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


# A large fleet's pass costs tens of seconds: fewer runs of it.
LARGE = 5000
# The fleets bench_peer.py rolls beside the Deployment controller in.
PEER_SIZES = (20, 200)
# The largest fleet bench_bringup.py brings up four times (at 1,000 services, hours).
BRING_UP_SERVICES = 300


def run_all(workdir: Path, services: int, sizes: str, runs: int, instances: int,
            watch_services: int | None = None, watch_min_ready: int = 30,
            scale: list[int] | None = None, peer_sizes: tuple[int, ...] = PEER_SIZES,
            peer_trials: int = 3, peer_cadence: bool = True, install: bool = True,
            bring_up: bool = True) -> dict:
    started = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    common = ["--workdir", str(workdir)]
    api = _run("bench_api.py", "--sizes", sizes, *common)
    passed = _run("bench_pass.py", "--services", str(services), "--runs", str(runs), *common)
    memory = _run("bench_memory.py", "--services", str(services), *common)
    curve = {services: {"pass_seconds": passed["pass_seconds"],
                        "peak_rss_mb": memory["peak_rss_mb"]}}
    for size in scale or []:
        bigger = _run("bench_pass.py", "--services", str(size),
                      "--runs", str(1 if size >= LARGE else runs), *common)
        curve[size] = {"pass_seconds": bigger["pass_seconds"],
                       "pass_vs_parse_ratio": bigger["pass_vs_parse_ratio"],
                       "cold_pass_seconds": bigger["cold_pass_seconds"],
                       "stages_seconds": bigger["stages_seconds"],
                       "peak_rss_mb": _run("bench_memory.py", "--services", str(size),
                                           *common)["peak_rss_mb"]}
    largest = max(curve)
    rollout = _run("bench_rollout.py", "--instances", str(instances))
    shards = _run("bench_shards.py", "--services", str(services), "--runs", str(runs), *common)
    real, peers, drain, installed, cluster, writers = {}, {}, {}, {}, {}, {}
    if watch_services is not None:
        # One kubectl drain beside a Deployment with a PodDisruptionBudget.
        drain = _run("bench_drain.py", "--replicas", "2")
        if install:
            # From a cluster without omegitops to the first green run, base and chart.
            installed = _run("bench_install.py")
        # The fleet on the real API server: bring-up, a converged run, a runtime's bump
        # beside the Deployment controller (with no minReadySeconds: no sim: twin).
        cluster = _run("bench_cluster.py", "--services", str(watch_services), *common,
                       *(["--no-min-ready"] if watch_min_ready == 0 else []))
        if bring_up:
            # The fleet brought up with one writer and with five, both orders.
            writers = _run("bench_bringup.py", "--services",
                           str(min(watch_services, BRING_UP_SERVICES)))
        real = _run("bench_watch.py", "--services", str(watch_services),
                    "--instances", str(instances), "--min-ready", str(watch_min_ready))
        # Beside the Deployment controller, inside 20 and 200 services (the cadence's
        # one pass a minute inside 20 only: it takes a quarter of an hour).
        peers = {size: _run("bench_peer.py", "--services", str(size), "--instances",
                            str(instances), "--min-ready", str(watch_min_ready),
                            "--trials", str(peer_trials),
                            *(["--cadence"] if peer_cadence and size == peer_sizes[0] else []))
                 for size in peer_sizes}
    return {
        "pass_vs_parse_ratio": passed["pass_vs_parse_ratio"],
        "cold_pass_vs_parse_ratio": passed["cold_pass_vs_parse_ratio"],
        "pass_seconds": passed["pass_seconds"],
        "parse_seconds": passed["parse_seconds"],
        "lists_per_pass": api["lists_per_pass"],
        "lists_per_pass_with_podgroup_crd": api["lists_per_pass_with_podgroup_crd"],
        "writes_when_converged": api["writes_when_converged"],
        "writes_equal_actions": api["writes_equal_actions"],
        "peak_rss_mb": {str(size): figures["peak_rss_mb"] for size, figures in curve.items()},
        "peak_rss_mb_sim": memory["peak_rss_mb_sim"],
        # Seconds per service at the largest size over the same at --services.
        "per_service_cost_ratio": round((curve[largest]["pass_seconds"] / largest)
                                        / (curve[services]["pass_seconds"] / services), 3),
        "curve": {str(size): figures for size, figures in sorted(curve.items())},
        "rollout_vs_ideal_ratio": rollout["rollout_vs_ideal_ratio"],
        "passes_per_rollout_ratio": rollout["passes"]["passes_per_rollout_ratio"],
        "shard_vs_share_ratio": shards["shard_vs_share_ratio"],
        "shard_imbalance_floor": shards["imbalance_floor"],
        "rollout_vs_ideal_ratio_real": real.get("rollout_vs_ideal_ratio_real"),
        "peer": {str(size): {key: doc[key] for key in (
            "rollout_ratio", "rollout_vs_deployment_plus_drain_ratio", "decomposition_seconds",
            "requests_ratio", "cadence_requests_ratio")} for size, doc in peers.items()},
        "api_bytes_per_rollout_ratio": real.get("api_bytes_per_rollout_ratio"),
        "real_api_server": {key: cluster.get(key) for key in (
            "converged_vs_sim_ratio", "bump_vs_deployments_ratio", "bump_requests_ratio")}
        | {"converged_pass": cluster.get("converged_pass", {}).get("seconds"),
           "converged_peak_rss_mb": cluster.get("converged_pass", {}).get("peak_rss_mb"),
           "converged_requests": cluster.get("converged_pass", {}).get("requests"),
           "bring_up_seconds": cluster.get("bring_up", {}).get("seconds"),
           "bring_up_workers_vs_one_ratio": writers.get("workers_vs_one_ratio")},
        "drain": {key: drain.get(key) for key in (
            "drain_seconds", "omegitops", "deployment", "serving_floor_ratio",
            "off_node_ratio")},
        "install": {way: {key: figures[key] for key in (
            "apply_seconds", "pull_and_start_seconds", "run_seconds", "first_green_seconds")}
            for way, figures in installed.get("ways", {}).items()},
        "targets": {"pass_vs_parse_ratio": passed["target"], "lists_per_pass": api["list_target"],
                    "writes_when_converged": 0,
                    "peak_rss_mb": {str(services): memory["target_mb"], "10000": 1024},
                    "per_service_cost_ratio": 1.1,
                    "rollout_vs_ideal_ratio": rollout["target"],
                    "passes_per_rollout_ratio": rollout["passes"]["target"],
                    "shard_vs_share_ratio": shards["target"],
                    "rollout_vs_ideal_ratio_real": real.get("target"),
                    "converged_vs_sim_ratio": cluster.get("sim_target"),
                    "peer_requests_ratio": 1.0,
                    "peer_rollout": "<= the Deployment's plus the documents' drain wait",
                    "api_bytes_per_rollout_ratio": real.get("bytes_target"),
                    "drain": "omegitops never below its replicas (serving_floor_ratio > 1 "
                             "beside a Deployment that dips by maxUnavailable)"},
        "fleet": {k: passed[k] for k in ("services", "components", "instances", "pods",
                                         "manifest_files")},
        "python": sys.version.split()[0],
        "wall_seconds": round(time.perf_counter() - started, 1),
        "details": {"pass": passed, "api": api, "memory": memory, "rollout": rollout,
                    "rollout_real": real, "shards": shards, "peer": peers,
                    "drain": drain, "install": installed, "cluster": cluster,
                    "bring_up_writers": writers},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--instances", type=int, default=16)
    parser.add_argument("--workdir", default=None, help="keep converged fleets here")
    parser.add_argument("--watch-services", type=int, default=None,
                        help="fleet size of the control-plane rollout (default: --services)")
    parser.add_argument("--watch-min-ready", type=int, default=30)
    parser.add_argument("--scale", default="", metavar="N,M",
                        help="larger fleets to measure the pass and memory at too "
                             "(e.g. 10000), for the curve")
    parser.add_argument("--peer-sizes", default=",".join(map(str, PEER_SIZES)), metavar="N,M",
                        help="fleets bench_peer.py rolls beside the Deployment controller in")
    parser.add_argument("--peer-trials", type=int, default=3)
    parser.add_argument("--no-peer-cadence", action="store_true",
                        help="skip bench_peer.py's one-pass-a-minute rollout (15 minutes)")
    parser.add_argument("--no-install", action="store_true",
                        help="skip bench_install.py (the base and the chart installed on "
                             "clusters of their own, with a real node)")
    parser.add_argument("--no-bring-up", action="store_true",
                        help="skip bench_bringup.py (the fleet brought up four times)")
    parser.add_argument("--no-control-plane", action="store_true",
                        help="skip bench_watch.py, which starts the real control plane")
    args = parser.parse_args(argv)
    watch_services = None if args.no_control_plane else (
        args.services if args.watch_services is None else args.watch_services)
    with tempfile.TemporaryDirectory() as scratch:
        document = run_all(Path(args.workdir or scratch), args.services, args.sizes, args.runs,
                           args.instances, watch_services, args.watch_min_ready,
                           [int(n) for n in args.scale.split(",") if n],
                           tuple(int(n) for n in args.peer_sizes.split(",") if n),
                           args.peer_trials, not args.no_peer_cadence, not args.no_install,
                           not args.no_bring_up)
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
