"""A fleet brought up on the real API server with one writer and with five, in one run.

    python tests/bench/bench_bringup.py [--services 300] [--workers 5] [--one-order]

``reconcile --until-idle`` brings the ``genfleet`` fleet of ``--services`` services up
from an empty cluster, as the shipped job's first run does, applying its plans one
InferenceService at a time (``OMEGITOPS_APPLY_WORKERS=1``) and ``--workers`` at a time,
each on a control plane of its own (``tests/controlplane``, as ``bench_cluster.py``
starts it). Both orders are run, five then one and one then five, so that whatever the
first or the second bring-up of a run pays (a cold page cache, a machine warming up)
falls on each once: ``workers_vs_one_ratio`` is the geometric mean of the two orders'
ratios of wall time, each order's own given beside it (``--one-order``: the first
order only, a quick run that keeps the script from rotting). Each bring-up is measured for its
wall and CPU seconds, its peak memory and its requests by verb and resource (the job's,
from the API server's audit log). Prints one JSON document.

On a machine whose few cores the API server, etcd, KWOK and the controllers share with
the job, side-by-side writers load what every side waits on; on a real cluster the API
server has cores of its own and each request waits on the network, which side-by-side
writers overlap. This measures the first, which bounds the gain from below.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import benchlib
import genfleet
from bench_cluster import counted, omegitops
from bench_watch import fleet_control_plane, prepare_fleet_cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "controlplane"))

from conftest import JOB_NAMESPACE

from omegitops.cluster.kube.cluster import APPLY_WORKERS_ENV

ORDERS = ("many-then-one", "one-then-many")


def bring_up(workdir: Path, root: Path, counts: dict, workers: int) -> dict:
    """One bring-up on a control plane of its own, the job applying ``workers`` plans at
    a time."""
    with fleet_control_plane(workdir) as cp:
        kubeconfig = prepare_fleet_cluster(cp, counts["pods"], counts["namespaces"])
        env = {**cp.env(kubeconfig), "OMEGITOPS_NAMESPACE": JOB_NAMESPACE,
               APPLY_WORKERS_ENV: str(workers)}
        figures = counted(cp, lambda: omegitops(env, root, "kube", "--until-idle",
                                                "--max-seconds", "7200"))
    return {"workers": workers, **figures}


def bench(workdir: Path, services: int, workers: int, one_order: bool = False) -> dict:
    root = workdir / "repo"
    counts = genfleet.write_fleet(root, services)
    runs: dict[str, list[dict]] = {}
    for order in ORDERS[:1] if one_order else ORDERS:
        sequence = (workers, 1) if order == ORDERS[0] else (1, workers)
        runs[order] = [bring_up(workdir / f"{order}-{n}", root, counts, w)
                       for n, w in enumerate(sequence)]
    ratios = {}
    for order, done in runs.items():
        by_workers = {run["workers"]: run for run in done}
        ratios[order] = round(by_workers[workers]["seconds"] / by_workers[1]["seconds"], 3)
    return {
        "benchmark": "bring_up_writers",
        "services": services, "components": counts["components"], "pods": counts["pods"],
        "workers": workers,
        "runs": runs,
        "workers_vs_one_ratio_by_order": ratios,
        "workers_vs_one_ratio": round(math.prod(ratios.values()) ** (1 / len(ratios)), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=300)
    parser.add_argument("--workers", type=int, default=5,
                        help="the side-by-side writers measured against one")
    parser.add_argument("--one-order", action="store_true",
                        help="only the first order (many writers, then one): a quick run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(scratch), args.services, args.workers, args.one_order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
