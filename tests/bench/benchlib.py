"""What the benchmark scripts share: converged fleets, one full pass, timing, JSON output.

A converged fleet is made once per size under a work folder and reused by
every benchmark of a run: the repository (``genfleet``), a simulated cluster
big enough for it, and ``omegitops reconcile --until-idle`` run in-process
until nothing is in flight, checked by one more pass that must write nothing.
"""

from __future__ import annotations

import compileall
import contextlib
import io
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
for extra in (HERE, REPO_ROOT / "tests" / "wire"):  # genfleet; the API double
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import genfleet

import omegitops
from omegitops.app.passes import MANAGED, run_pass
from omegitops.cli import main as cli_main
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.report.status import build_report, render_markdown, report_events, validate_report

MARKER = "converged.json"


def emit(document: dict) -> None:
    """The one JSON document a script prints on stdout."""
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


# Runs a command, then prints, as the last line of its output, the command's exit code,
# wall and CPU seconds and peak resident set. A child's ru_maxrss starts from its
# parent's (the kernel keeps the high-water mark across fork and exec), and a benchmark
# holds its fleet, hundreds of MB: each measured command is started by this small
# interpreter, whose own set is what the command starts from.
_MEASURING = """
import json, os, subprocess, sys, time
started = time.monotonic()
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
sys.stdout.flush()
print(json.dumps({"exit": os.waitstatus_to_exitcode(status),
                  "seconds": time.monotonic() - started,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime,
                  "peak_rss_mb": usage.ru_maxrss / 1024}))
"""


def compiled_as_installed() -> None:
    """Compile omegitops' modules to bytecode beside their source, as pip does when it
    installs the package (the image's ``pip install`` does, whatever
    PYTHONDONTWRITEBYTECODE says). A fresh process from a source checkout whose
    environment sets PYTHONDONTWRITEBYTECODE (this machine's does, as the Dockerfile's
    does) otherwise compiles every module it imports, each time: about 0.2 s of CPU at
    start that no shipped pod pays. Its standard library and dependencies were compiled
    when they were installed. Modules already compiled are left as they are."""
    package = Path(omegitops.__file__).resolve().parent  # the one this process imports
    if not compileall.compile_dir(str(package), quiet=1):
        raise RuntimeError(f"{package}: a module does not compile")


def measured(argv: list[str], env: dict | None = None, cwd: Path | None = None
             ) -> tuple[dict, str]:
    """``argv`` run as a fresh process: its figures (``exit``, ``seconds``,
    ``cpu_seconds``, ``peak_rss_mb``) and its standard output. Raises with its
    standard error when it exits non-zero. Its modules are read as bytecode, as the
    installed package's are (``compiled_as_installed``)."""
    compiled_as_installed()
    done = subprocess.run([sys.executable, "-c", _MEASURING, *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, check=False)
    output, _, last = done.stdout.rstrip("\n").rpartition("\n")
    if done.returncode != 0 or not last.startswith("{"):
        raise RuntimeError(f"the measuring process exited {done.returncode}:\n"
                           f"{done.stderr[-3000:]}")
    figures = json.loads(last)
    if figures["exit"] != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {figures['exit']}:\n"
                           f"{done.stderr[-3000:]}")
    return figures, output


def median_time(func: Callable[[], Any], runs: int = 3) -> tuple[float, Any]:
    """The median wall time of ``runs`` calls, and the last call's result."""
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def reconcile_until_idle(root: Path, cluster_path: Path, max_seconds: float = 100000) -> int:
    """``omegitops reconcile --until-idle`` in-process, its table thrown away; the exit code."""
    with contextlib.redirect_stdout(io.StringIO()):
        return cli_main(["reconcile", "--repo", str(root), "--cluster", f"sim:{cluster_path}",
                         "--until-idle", "--max-seconds", str(max_seconds)])


def reconcile_once(root: Path, cluster_path: Path) -> int:
    """One ``omegitops reconcile`` pass in-process, its table thrown away; the exit code."""
    with contextlib.redirect_stdout(io.StringIO()):
        return cli_main(["reconcile", "--repo", str(root), "--cluster", f"sim:{cluster_path}"])


def converged_fleet(workdir: Path | str, services: int) -> tuple[Path, Path, dict]:
    """(repository, simulated cluster file, counts) of a converged fleet of ``services``.

    Made on first use (generate, size the cluster, reconcile until idle, check that
    one more pass writes nothing) and reused afterwards from ``workdir``.
    """
    base = Path(workdir) / f"fleet-{services}"
    root, cluster_path, marker = base / "repo", base / "cluster.json", base / MARKER
    if marker.exists():
        return root, cluster_path, json.loads(marker.read_text())
    counts = genfleet.write_fleet(root, services)
    size = genfleet.sim_size(services)
    SimCluster.init(cluster_path, **size)
    start = time.perf_counter()
    code = reconcile_until_idle(root, cluster_path)
    if code != 0:
        raise RuntimeError(f"reconcile of the {services}-service fleet exited {code}")
    with SimCluster(cluster_path) as cluster:
        items = resolved_components(load(root))
        # The first pass at rest records each component's converged fingerprint (once:
        # lifecycle/converged.py); the one after it must write nothing.
        settle = run_pass(cluster, items)
        if any(not plan.is_noop for _, plan in settle.plans):
            raise RuntimeError(f"the {services}-service fleet was still moving")
        result = run_pass(cluster, items)
        listed = cluster.list_pods(MANAGED)
        pods = len(listed)
        # At rest is not enough: Instances whose pods never fit a node end at rest too,
        # Failed (a fleet too big for its simulated nodes).
        unbound = sum(1 for pod in listed if not pod["spec"].get("nodeName"))
    if result.applied or result.busy or result.errors or pods != counts["pods"] or unbound:
        raise RuntimeError(f"the {services}-service fleet did not converge: {result.applied} "
                           f"writes, busy={result.busy}, {pods}/{counts['pods']} pods, "
                           f"{unbound} unscheduled, errors={result.errors[:3]}")
    counts = {**counts, "sim": size, "convergeSeconds": round(time.perf_counter() - start, 1)}
    marker.write_text(json.dumps(counts))
    return root, cluster_path, counts


def full_pass(root: Path, cluster, check_report: bool = False, owns=None,
              cache_dir: Path | None = None, memo=None) -> dict:
    """One whole pass on an open cluster, as ``reconcile`` does it: load + validate,
    resolve, observe + plan + apply, then list what the report needs and build it.

    ``check_report`` adds what ``--report-dir`` does besides (the report checked against
    its schema, the Markdown rendered); files are never written. ``owns`` makes it a
    ``--shard``'s pass (give the cluster the same ``namespace_scope``). ``cache_dir`` is
    ``load``'s: where the load memo is kept (None: no memo); ``memo`` is ``load``'s too
    (a carried one, as the shipped pods read from the report branch).
    Returns counts and the seconds of each stage, and (``sim_list_copies``, within
    ``observe_plan_apply``) what the simulated cluster spent copying what it listed.
    """
    stages: dict[str, float] = {}
    with sim_list_copies_timed(stages):
        return _full_pass(root, cluster, stages, check_report, owns, cache_dir, memo)


@contextlib.contextmanager
def sim_list_copies_timed(stages: dict[str, float]):
    """Time the simulated cluster's copies of the objects it lists (``clone_all``) into
    ``stages["sim_list_copies"]``. They are the simulator's own cost, which keeps its
    stored objects safe from its callers: a real cluster has none, and decodes its LIST
    answers instead (``bench_cluster.py`` measures that on the real API server)."""
    from omegitops.cluster.sim import cluster as sim

    original, spent = sim.clone_all, 0.0

    def timed(values: list[dict]) -> list[dict]:
        nonlocal spent
        start = time.perf_counter()
        try:
            return original(values)
        finally:
            spent += time.perf_counter() - start

    sim.clone_all = timed
    try:
        yield
    finally:
        sim.clone_all = original
        stages["sim_list_copies"] = spent


def _full_pass(root: Path, cluster, stages: dict[str, float], check_report: bool, owns,
               cache_dir: Path | None, memo) -> dict:
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stages[name] = now - clock
        clock = now

    loaded = load(root, owns=owns, cache_dir=cache_dir, memo=memo)
    lap("load_validate")
    items = resolved_components(loaded)
    lap("resolve")
    result = run_pass(cluster, items)
    lap("observe_plan_apply")
    # As ``reconcile`` does: the InferenceReplicas as the pass left them, not a second LIST.
    replicas = [result.replicas[key] for key in sorted(result.replicas)] \
        if result.replicas is not None else cluster.list_objects(INFERENCE_REPLICA, MANAGED)
    events = report_events(cluster)
    report = build_report(loaded, replicas, events, cluster.now(), owns=owns)
    lap("report_build")
    if check_report:
        validate_report(report)
        render_markdown(report)
        lap("report_check_render")
    return {"writes": result.applied, "busy": result.busy, "errors": len(result.errors),
            "components": len(result.plans), "services": report["summary"]["services"],
            "stages": stages}
