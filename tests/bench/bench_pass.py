"""A full pass on a converged fleet, divided by only parsing its manifests with PyYAML's C loader.

    python tests/bench/bench_pass.py [--services 1000] [--runs 3] [--workdir DIR]

The fleet (``genfleet``: 1,000 services are 8,000 pods) is reconciled until idle
on a simulated cluster first. Then, alternately and ``--runs`` times each:

- the baseline: read every manifest file and ``yaml.load_all`` it with
  ``yaml.CSafeLoader`` (parse and construct, nothing else);
- the full pass, as ``omegitops reconcile`` makes it: load (with line
  tracking) and validate, resolve, observe, plan, apply (nothing to write on a
  converged fleet, which is checked), list and build the status report; with the
  load memo an earlier run left in the cache folder (``pass``), and with none, as
  the shipped pods start (``cold_pass``).

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
from omegitops.manifests import memo
from omegitops.manifests.memo import FILE_NAME
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
    cache = workdir / f"memo-{services}"
    try:
        # The memo of a run before this one, as a job whose cache folder persists has it.
        benchlib.full_pass(root, cluster, cache_dir=cache)
        parse_times, pass_times, cold_times, passes, colds = [], [], [], [], []
        for _ in range(runs):
            start = time.perf_counter()
            parse_only(root)
            parse_times.append(time.perf_counter() - start)
            memo.forget(cache)  # a new run's process: the memo read from its folder
            start = time.perf_counter()
            passes.append(benchlib.full_pass(root, cluster, cache_dir=cache))
            pass_times.append(time.perf_counter() - start)
            start = time.perf_counter()  # as the shipped pods run: no memo
            colds.append(benchlib.full_pass(root, cluster, cache_dir=None))
            cold_times.append(time.perf_counter() - start)
        checked = benchlib.full_pass(root, cluster, check_report=True, cache_dir=cache)
    finally:
        cluster.__exit__(None, None, None)
    for last in (passes[-1], colds[-1]):
        if last["writes"] or last["busy"] or last["errors"]:
            raise RuntimeError(f"the fleet is not converged: {last}")
    parse_s, pass_s = statistics.median(parse_times), statistics.median(pass_times)
    cold_s = statistics.median(cold_times)

    def stages_of(measured: list[dict]) -> dict:
        return {name: round(statistics.median(p["stages"][name] for p in measured), 4)
                for name in measured[-1]["stages"]}
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
        "stages_seconds": stages_of(passes),
        "memo_bytes": (cache / FILE_NAME).stat().st_size,
        "cold_pass_seconds": round(cold_s, 4),
        "cold_pass_vs_parse_ratio": round(cold_s / parse_s, 2),
        "cold_stages_seconds": stages_of(colds),
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
