"""A full pass on a converged fleet, divided by only parsing its manifests with PyYAML's C loader.

    python tests/bench/bench_pass.py [--services 1000] [--runs 3] [--workdir DIR]

The fleet (``genfleet``: 1,000 services are 8,000 pods) is reconciled until idle
on a simulated cluster first. Then, alternately and ``--runs`` times each:

- the baseline: read every manifest file and ``yaml.load_all`` it with
  ``yaml.CSafeLoader`` (parse and construct, nothing else);
- the full pass, as ``omegitops reconcile`` makes it: load (with line
  tracking) and validate, resolve, observe, plan, apply (nothing to write on a
  converged fleet, which is checked), list and build the status report.

Both medians are taken in the same run, so the ratio holds on a shared, noisy
machine. The simulated cluster is opened (its JSON state read) once, outside the
timing: that is the simulator's storage, where a real cluster would answer LISTs.
The report's schema check and Markdown rendering (``--report-dir``) are timed
separately. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib
import yaml

from omegitops.cluster.sim import SimCluster
from omegitops.manifests.repository import manifest_files

TARGET = 3.0  # a converged pass at most 3x the parse floor, at 1,000 services


def parse_only(root: Path) -> int:
    documents = 0
    for path in manifest_files(root):
        documents += sum(1 for _ in yaml.load_all(path.read_bytes(), Loader=yaml.CSafeLoader))
    return documents


def bench(workdir: Path, services: int, runs: int = 3) -> dict:
    root, cluster_path, counts = benchlib.converged_fleet(workdir, services)
    start = time.perf_counter()
    cluster = SimCluster(cluster_path)
    cluster.__enter__()
    sim_open = time.perf_counter() - start
    try:
        parse_times, pass_times, passes = [], [], []
        for _ in range(runs):
            start = time.perf_counter()
            parse_only(root)
            parse_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            passes.append(benchlib.full_pass(root, cluster))
            pass_times.append(time.perf_counter() - start)
        checked = benchlib.full_pass(root, cluster, check_report=True)
    finally:
        cluster.__exit__(None, None, None)
    last = passes[-1]
    if last["writes"] or last["busy"] or last["errors"]:
        raise RuntimeError(f"the fleet is not converged: {last}")
    parse_s, pass_s = statistics.median(parse_times), statistics.median(pass_times)
    stages = {name: round(statistics.median(p["stages"][name] for p in passes), 4)
              for name in last["stages"]}
    return {
        "benchmark": "pass_vs_parse",
        "services": counts["services"], "components": counts["components"],
        "instances": counts["instances"], "pods": counts["pods"],
        "manifest_files": len(manifest_files(root)),
        "runs": runs,
        "parse_seconds": round(parse_s, 4),
        "pass_seconds": round(pass_s, 4),
        "pass_vs_parse_ratio": round(pass_s / parse_s, 2),
        "target": TARGET,
        "stages_seconds": stages,
        "report_check_render_seconds": round(checked["stages"]["report_check_render"], 4),
        "sim_open_seconds": round(sim_open, 4),
        "writes_in_timed_passes": sum(p["writes"] for p in passes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="keep converged fleets here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(args.workdir or scratch), args.services, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
