"""A shard's full pass divided by an even share of the whole fleet's pass.

    python tests/bench/bench_shards.py [--services 1000] [--shards 4] [--runs 3]
                                       [--workdir DIR]

On the converged fleet of ``bench_pass.py`` (simulated cluster opened once,
outside the timing), alternately and ``--runs`` times each: the whole fleet's
full pass (``benchlib.full_pass``), and the full pass of each shard I of N as
``reconcile --shard I/N`` makes it (every file read, the shard's services
validated, resolved, observed, planned and reported; the cluster's lists
scoped to the shard's namespaces). The figure is the slowest shard's median
over the whole pass's median divided by N: how close splitting the fleet comes
to dividing the work. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib

from omegitops.app.shards import Shard
from omegitops.cluster.sim import SimCluster

TARGET = 1.2


def bench(workdir: Path, services: int, shards: int, runs: int = 3) -> dict:
    root, cluster_path, counts = benchlib.converged_fleet(workdir, services)
    cluster = SimCluster(cluster_path)
    cluster.__enter__()
    try:
        whole_times: list[float] = []
        shard_times: dict[int, list[float]] = {i: [] for i in range(shards)}
        components: dict[int, int] = {}
        for _ in range(runs):
            start = time.perf_counter()
            whole = benchlib.full_pass(root, cluster)  # no memo, as the shipped pods
            whole_times.append(time.perf_counter() - start)
            for index in range(shards):
                shard = Shard(index, shards)
                cluster.namespace_scope = shard.owns
                start = time.perf_counter()
                done = benchlib.full_pass(root, cluster, owns=shard.owns)
                shard_times[index].append(time.perf_counter() - start)
                cluster.namespace_scope = None
                components[index] = done["components"]
                if done["writes"] or done["errors"]:
                    raise RuntimeError(f"shard {shard}: the fleet is not converged: {done}")
    finally:
        cluster.namespace_scope = None
        cluster.__exit__(None, None, None)
    whole_s = statistics.median(whole_times)
    medians = {i: statistics.median(t) for i, t in shard_times.items()}
    slowest = max(medians.values())
    return {
        "benchmark": "shard_vs_share",
        "services": counts["services"], "shards": shards, "runs": runs,
        "components_per_shard": [components[i] for i in range(shards)],
        "components_whole": whole["components"],
        "whole_pass_seconds": round(whole_s, 4),
        "shard_pass_seconds": [round(medians[i], 4) for i in range(shards)],
        "shard_vs_share_ratio": round(slowest / (whole_s / shards), 3),
        "target": TARGET,
        # What the hash alone costs: the biggest shard's components over an even share.
        # Were a shard's pass exactly its share of the whole, the ratio would be this.
        "imbalance_floor": round(max(components.values()) / (whole["components"] / shards),
                                 3),
        # Each shard's seconds per component over the whole pass's.
        "cost_per_component_ratio": [
            round((medians[i] / components[i]) / (whole_s / whole["components"]), 3)
            for i in range(shards) if components[i]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="keep converged fleets here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(args.workdir or scratch), args.services, args.shards,
                            args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
