"""The planner on a fleet that moves: every service's image changes, and passes step
every component's rollout. Times the planner itself (``plan_component``) apart from
the pass around it.

    python tests/bench/bench_moving.py [--services 200] [--passes 8] [--runs 3]
                                       [--workdir DIR] [--src DIR]

The converged fleet (``benchlib.converged_fleet``) is copied, every runtime's image
is changed, and ``--passes`` passes run on the copy with the simulated clock moved
30 s between them (pods come up, surges hand over, drains finish), ``--runs`` times
on fresh copies. Reported: the seconds inside ``plan_component`` per call, the
whole pass (observe, plan, apply), and the planner's share of it, the baseline
measured in the same run. ``--src`` imports omegitops from another checkout, so two
versions of the planner can be run alternately on the same machine and compared
by their ratio (the closing figures of a change to the planner).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--src", type=Path, help="a checkout whose omegitops to import")
    args = parser.parse_args(argv)
    if args.src is not None:
        sys.path.insert(0, str(args.src.resolve()))
    import benchlib

    from omegitops.app import passes as reconcile
    from omegitops.cluster.sim import SimCluster
    from omegitops.manifests.load import load, resolved_components

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-moving-"))
    root, cluster_path, counts = benchlib.converged_fleet(workdir, args.services)
    planned = {"seconds": 0.0, "calls": 0}
    plan_component = reconcile.plan_component

    def timed(*given, **named):
        start = time.perf_counter()
        try:
            return plan_component(*given, **named)
        finally:
            planned["seconds"] += time.perf_counter() - start
            planned["calls"] += 1

    reconcile.plan_component = timed
    per_call, passes, shares, writes = [], [], [], 0
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="moving-") as scratch:
            copy, copied = Path(scratch) / "repo", Path(scratch) / "cluster.json"
            shutil.copytree(root, copy)
            shutil.copy(cluster_path, copied)
            for path in copy.rglob("*.yaml"):
                text = path.read_text()
                if "sglang:v1" in text:
                    path.write_text(text.replace("sglang:v1", "sglang:v2"))
            items = resolved_components(load(copy))
            planned.update(seconds=0.0, calls=0)
            spent = 0.0
            with SimCluster(copied) as cluster:
                for _ in range(args.passes):
                    start = time.perf_counter()
                    result = reconcile.run_pass(cluster, items)
                    spent += time.perf_counter() - start
                    writes += result.applied
                    cluster.advance(30)
            per_call.append(planned["seconds"] / max(planned["calls"], 1))
            passes.append(spent / args.passes)
            shares.append(planned["seconds"] / spent)
    benchlib.emit({
        "services": args.services, "components": counts.get("components"),
        "passes": args.passes, "runs": args.runs, "writes": writes,
        "plan_ms_per_component": round(statistics.median(per_call) * 1000, 4),
        "pass_seconds": round(statistics.median(passes), 4),
        "planner_share_of_pass": round(statistics.median(shares), 4),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
