"""Peak memory of a full pass at 1,000 services, each measured in a fresh child process.

    python tests/bench/bench_memory.py [--services 1000] [--workdir DIR]

The child imports omegitops, runs one full pass (``benchlib.full_pass``: load,
validate, resolve, observe, plan, apply, report build) and exits; the parent
reads the child's peak resident set, started by a small interpreter of its own
(``benchlib.measured``: a child's peak starts from its parent's).

Two backends:

- ``kube``: omegitops as a CronJob runs it, against the HTTP double of the
  API server (``tests/wire/apiserver.py``) serving the converged fleet from
  this (parent) process; the child holds only omegitops' own data. This is
  ``peak_rss_mb``.
- ``sim``: the same pass on the simulated cluster, whose whole state (8,000
  pods with their kubelet records, 12,000 events) lives in the same process:
  ``peak_rss_mb_sim``, for reference.

A bare interpreter with omegitops imported is measured too (``baseline_rss_mb``).
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import benchlib

TARGET_MB = 300
SCRIPT = Path(__file__).resolve()


def _child(backend: str, root: str, cluster: str) -> None:
    """Run one full pass and print its outcome; the parent measures the memory."""
    if backend == "none":
        print(json.dumps({}))
        return
    if backend == "kube":
        from omegitops.cluster import open_cluster

        opened = open_cluster("kube", exclusive=False)
    else:
        from omegitops.cluster.sim import SimCluster

        opened = SimCluster(cluster)
    with opened as handle:
        outcome = benchlib.full_pass(Path(root), handle)  # no memo, as the shipped pods
    print(json.dumps({k: v for k, v in outcome.items() if k != "stages"}))


def _peak_of(args: list[str], env: dict | None = None) -> tuple[float, dict]:
    """Peak RSS (MB) of a child running ``args``, and the outcome it printed."""
    figures, output = benchlib.measured([sys.executable, str(SCRIPT), "--child", *args], env)
    return round(figures["peak_rss_mb"], 1), json.loads(output)


def bench(workdir: Path, services: int) -> dict:
    from apiserver import ApiServerDouble
    from bench_api import _seed

    root, cluster_path, counts = benchlib.converged_fleet(workdir, services)
    # One fresh pass first: the in-process passes that converged the fleet skip what
    # they saw converged, and a fresh process's first pass may catch up a write they
    # left (a component's PodDisruptionBudget); the pass measured is the next.
    _peak_of(["sim", str(root), str(cluster_path)])
    baseline, _ = _peak_of(["none", str(root), str(cluster_path)])
    sim_peak, sim_outcome = _peak_of(["sim", str(root), str(cluster_path)])
    with ApiServerDouble() as api:
        # Under the simulator's own resourceVersions: the fleet is at rest on the double
        # as it was on the simulator, with no pass to settle it (at 10,000 services that
        # pass is 35,000 writes through the double).
        _seed(api, cluster_path, keep_versions=True)
        env = {**os.environ, "OMEGITOPS_KUBE_API": api.url}
        _peak_of(["kube", str(root), str(cluster_path)], env)  # the fresh pass first, as above
        kube_peak, kube_outcome = _peak_of(["kube", str(root), str(cluster_path)], env)
    for outcome in (sim_outcome, kube_outcome):
        if outcome["writes"] or outcome["errors"]:
            raise RuntimeError(f"the measured pass was not a converged one: {outcome}")
    return {
        "benchmark": "peak_memory",
        "services": counts["services"], "pods": counts["pods"],
        "peak_rss_mb": kube_peak,
        "peak_rss_mb_sim": sim_peak,
        "baseline_rss_mb": baseline,
        "target_mb": TARGET_MB,
    }


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--child":
        _child(*argv[1:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--workdir", default=None, help="keep converged fleets here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(args.workdir or scratch), args.services))
    return 0


if __name__ == "__main__":
    sys.exit(main())
