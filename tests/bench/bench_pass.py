"""A full pass on a converged fleet, divided by only parsing its manifests with PyYAML's C loader.

    python tests/bench/bench_pass.py [--services 1000] [--runs 3] [--workdir DIR]

The fleet (``genfleet``: 1,000 services are 8,000 pods) is reconciled until idle
on a simulated cluster first. Then, alternately and ``--runs`` times each:

- the baseline: read every manifest file and ``yaml.load_all`` it with
  ``yaml.CSafeLoader`` (parse and construct, nothing else);
- the full pass, as ``omegitops reconcile`` makes it: load (with line
  tracking) and validate, resolve, observe, plan, apply (nothing to write on a
  converged fleet, which is checked), list and build the status report; with the
  load memo an earlier run left in the cache folder (``pass``, warm), with none
  (``cold_pass``), and with the memo an earlier run carried on the report branch
  (``carried_pass``: a fresh process's memo, the signed JSON checked and decoded
  inside the timing, as the shipped pods read it with ``OMEGITOPS_MEMO_KEY``).

Both medians are taken in the same run, so the ratio holds on a shared, noisy
machine. The simulated cluster is opened (its JSON state read) once, outside the
timing: that is the simulator's storage, where a real cluster would answer LISTs.
The report's schema check and Markdown rendering (``--report-dir``) are timed
separately. The simulated cluster's copies of what a pass lists (its own cost, where a
real cluster decodes its answers) are timed within each pass, and each ratio is given
again without them (``*_less_sim_copies_vs_parse_ratio``).

Last, what the shipped pods pay (``shipped``): ``omegitops reconcile --report-dir``
run as the CronJob runs it, a fresh process with no load memo that opens the
simulated cluster, passes, saves it and writes the checked report (its modules read as
bytecode, as pip compiled the image's), in CPU seconds
(user and system, the child's own) beside the parse floor's CPU seconds in this
process, ``--runs`` times alternately; and the same command as the CronJob runs it
from its second run on (``configured_*``): the manifests cloned from a bare repository
(served by ``git daemon``, whose side of each clone and push is the Git host's), the
memo the run before left on the report branch read, the report and this run's memo
committed and pushed there when the report changed, git's processes counted; and the
same without the memo's key (``configured_without_memo_*``). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import benchlib
import yaml

import omegitops
from omegitops.cluster.sim import SimCluster
from omegitops.manifests import carried, memo
from omegitops.manifests.memo import FILE_NAME, LoadMemo
from omegitops.manifests.repository import manifest_files
from omegitops.util.gcpause import gc_paused

TARGET = 3.0  # a converged pass at most 3x the parse floor, at 1,000 services
CARRIED_KEY = b"the job's memo key, from its Secret"
SHIPPED_TARGET = 3.5  # the shipped command, report written, at most 3.5x the floor (CPU)


def parse_only(root: Path) -> int:
    """The parse floor: every manifest file read and loaded with the C loader, with the
    collector paused as the pass's own phases are. Run with it on, in a process that
    holds the simulated cluster, the floor paid for full collections of that cluster
    (two to three times its own cost, varying from run to run): a cost of the
    simulator, not of parsing, which made the ratio move by whole units."""
    documents = 0
    with gc_paused():
        for path in manifest_files(root):
            documents += sum(1 for _ in yaml.load_all(path.read_bytes(),
                                                      Loader=yaml.CSafeLoader))
    return documents


def shipped_command(repo: str, cluster_path: Path, scratch: Path, *extra: str,
                    env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, standard error) of one ``omegitops reconcile
    --report-dir`` as the shipped pods run it: a fresh process, no load memo (unless
    ``extra`` and ``env`` carry one), on a copy of the cluster, its modules read as
    bytecode as the image's are (``benchlib.compiled_as_installed``)."""
    benchlib.compiled_as_installed()
    copy, report = scratch / "cluster.json", scratch / "report"
    shutil.copyfile(cluster_path, copy)
    shutil.rmtree(report, ignore_errors=True)
    source = Path(omegitops.__file__).resolve().parents[1]
    env = {**os.environ, "OMEGITOPS_CACHE_DIR": "", **GIT_IDENTITY, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(source),
                                                       os.environ.get("PYTHONPATH")]))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "omegitops", "reconcile", "--repo", repo,
                           "--cluster", f"sim:{copy}", "--report-dir",
                           *(extra or (str(report),))],
                          env=env, check=True, capture_output=True, text=True, cwd=scratch)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu, wall, done.stderr


# Who commits the fleet's manifests, and the reports (the command's committer).
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
                "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
REPORT_BRANCH = "omegitops-status"


def fleet_remote(root: Path) -> Path:
    """The fleet's manifests as a bare repository beside the fleet (made once): the
    remote the CronJob clones and pushes its report to."""
    bare = root.parent / "remote.git"
    if not (bare / "HEAD").exists():
        env = {**os.environ, **GIT_IDENTITY}
        with tempfile.TemporaryDirectory(dir=root.parent) as scratch:
            tree = Path(scratch) / "tree"
            shutil.copytree(root, tree)
            for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                         ["commit", "-q", "-m", "The fleet"]):
                subprocess.run(["git", "-C", str(tree), *argv], env=env, check=True,
                               capture_output=True)
            subprocess.run(["git", "clone", "-q", "--bare", str(tree), str(bare)], env=env,
                           check=True, capture_output=True)
    return bare


@contextlib.contextmanager
def served(bare: Path) -> Iterator[str]:
    """``bare`` served by ``git daemon`` on a free local port, pushes allowed: its URL.
    Over ``file://`` the remote's side of each clone, fetch and push (packing the
    objects) runs as the command's own child, and its CPU was counted as the job's; a
    Git host pays it, not the pod."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = subprocess.Popen(
        ["git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr",
         f"--base-path={bare.parent}", "--listen=127.0.0.1", f"--port={port}",
         str(bare.parent)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as attempt:
                if attempt.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"git daemon did not listen on port {port}")
            time.sleep(0.05)
        yield f"git://127.0.0.1:{port}/{bare.name}"
    finally:
        daemon.terminate()
        daemon.wait()


def shipped_as_configured(remote: str, cluster_path: Path, scratch: Path,
                          carry: bool = True) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of the command as the shipped CronJob runs it from its
    second run on: the manifests cloned, the load memo the run before left on the report
    branch read (signed with the Secret's key; none with ``carry`` off, as a job without
    the Secret runs), the report committed and pushed there when it changed, with this
    run's memo; git's processes counted, the remote's side of them not (``served``)."""
    cpu, wall, err = shipped_command(
        remote, cluster_path, scratch, "status", "--report-branch", REPORT_BRANCH,
        "--commit", "--push", env={carried.ENV_KEY: CARRIED_KEY.decode() if carry else ""})
    if carry != ("carried load memo read from" in err):
        raise RuntimeError(f"the carried memo was {'not ' if carry else ''}read:\n"
                           f"{err[-2000:]}")
    return cpu, wall


def sim_storage(cluster_path: Path, scratch: Path) -> float:
    """CPU seconds of opening the simulated cluster and saving it, as the command does
    (its JSON state read, checked and indexed; then written whole, since a pass moves
    its clock), on a copy: the simulator's storage, which a real cluster does not have."""
    copy = scratch / "storage.json"
    shutil.copyfile(cluster_path, copy)
    start = time.process_time()
    with SimCluster(copy) as cluster:
        cluster.save()
    return time.process_time() - start


def shipped(root: Path, cluster_path: Path, workdir: Path, runs: int) -> dict:
    """The shipped command beside the parse floor, both in CPU seconds, alternately: with
    no memo (``command``: a first run, or a job without the memo's key) and as the
    CronJob runs it with its carried memo, clone, commit and push (``configured``); and
    each less the simulated cluster's storage (``sim_storage``), measured between them,
    which is what the job costs on a real cluster (whose LISTs it still pays)."""
    floors, cpus, walls, storages, configured, configured_walls = [], [], [], [], [], []
    uncarried = []
    with served(fleet_remote(root)) as remote, \
            tempfile.TemporaryDirectory(dir=workdir) as scratch:
        # The run before: it leaves its memo on the report branch.
        shipped_command(remote, cluster_path, Path(scratch), "status", "--report-branch",
                        REPORT_BRANCH, "--commit", "--push",
                        env={carried.ENV_KEY: CARRIED_KEY.decode()})
        for _ in range(runs):
            start = time.process_time()
            parse_only(root)
            floors.append(time.process_time() - start)
            cpu, wall, _ = shipped_command(str(root), cluster_path, Path(scratch))
            cpus.append(cpu)
            walls.append(wall)
            storages.append(sim_storage(cluster_path, Path(scratch)))
            cpu, wall = shipped_as_configured(remote, cluster_path, Path(scratch))
            configured.append(cpu)
            configured_walls.append(wall)
            uncarried.append(shipped_as_configured(remote, cluster_path, Path(scratch),
                                                   carry=False)[0])
    floor, cpu = statistics.median(floors), statistics.median(cpus)
    storage, carried_cpu = statistics.median(storages), statistics.median(configured)
    return {"parse_cpu_seconds": round(floor, 4), "command_cpu_seconds": round(cpu, 4),
            "command_wall_seconds": round(statistics.median(walls), 4),
            "command_vs_parse_cpu_ratio": round(cpu / floor, 2), "target": SHIPPED_TARGET,
            "sim_storage_cpu_seconds": round(storage, 4),
            "command_less_sim_storage_vs_parse_cpu_ratio": round((cpu - storage) / floor, 2),
            "configured_cpu_seconds": round(carried_cpu, 4),
            "configured_wall_seconds": round(statistics.median(configured_walls), 4),
            "configured_vs_parse_cpu_ratio": round(carried_cpu / floor, 2),
            "configured_less_sim_storage_vs_parse_cpu_ratio":
                round((carried_cpu - storage) / floor, 2),
            "configured_without_memo_cpu_seconds": round(statistics.median(uncarried), 4),
            "configured_without_memo_vs_parse_cpu_ratio":
                round(statistics.median(uncarried) / floor, 2)}


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
        # The memo a run before this one left on the report branch, and what writing it
        # costs that run at its end.
        leaving = LoadMemo(None)
        benchlib.full_pass(root, cluster, memo=leaving)
        start = time.perf_counter()
        carried_data = carried.encode(leaving, CARRIED_KEY)
        carried_write = time.perf_counter() - start
        del leaving
        parse_times, pass_times, cold_times, passes, colds = [], [], [], [], []
        carried_times, carrieds = [], []
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
            start = time.perf_counter()  # a new pod with the report branch's memo
            fresh = carried.carried_memo(carried_data, CARRIED_KEY, None, "the report branch")
            carrieds.append(benchlib.full_pass(root, cluster, memo=fresh))
            carried_times.append(time.perf_counter() - start)
            if not (fresh.hits and fresh.service_hits):
                raise RuntimeError("the carried memo was not read")
            del fresh
        checked = benchlib.full_pass(root, cluster, check_report=True, cache_dir=cache)
    finally:
        cluster.__exit__(None, None, None)
    for last in (passes[-1], colds[-1], carrieds[-1]):
        if last["writes"] or last["busy"] or last["errors"]:
            raise RuntimeError(f"the fleet is not converged: {last}")
    parse_s, pass_s = statistics.median(parse_times), statistics.median(pass_times)
    cold_s = statistics.median(cold_times)
    carried_s = statistics.median(carried_times)

    def stages_of(measured: list[dict]) -> dict:
        return {name: round(statistics.median(p["stages"][name] for p in measured), 4)
                for name in measured[-1]["stages"]}

    def less_copies(seconds: float, measured: list[dict]) -> float:
        """A pass's ratio to the floor without the simulated cluster's list copies."""
        copies = statistics.median(p["stages"]["sim_list_copies"] for p in measured)
        return round((seconds - copies) / parse_s, 2)
    return {
        "benchmark": "pass_vs_parse",
        "services": counts["services"], "components": counts["components"],
        "instances": counts["instances"], "pods": counts["pods"],
        "manifest_files": len(manifest_files(root)),
        "runs": runs,
        "parse_seconds": round(parse_s, 4),
        "pass_seconds": round(pass_s, 4),
        "pass_vs_parse_ratio": round(pass_s / parse_s, 2),
        "pass_less_sim_copies_vs_parse_ratio": less_copies(pass_s, passes),
        "target": TARGET,
        "stages_seconds": stages_of(passes),
        "memo_bytes": (cache / FILE_NAME).stat().st_size,
        "cold_pass_seconds": round(cold_s, 4),
        "cold_pass_vs_parse_ratio": round(cold_s / parse_s, 2),
        "cold_pass_less_sim_copies_vs_parse_ratio": less_copies(cold_s, colds),
        "cold_stages_seconds": stages_of(colds),
        "carried_pass_seconds": round(carried_s, 4),
        "carried_pass_vs_parse_ratio": round(carried_s / parse_s, 2),
        "carried_pass_less_sim_copies_vs_parse_ratio": less_copies(carried_s, carrieds),
        "carried_stages_seconds": stages_of(carrieds),
        "carried_memo_bytes": len(carried_data or b""),
        "carried_memo_write_seconds": round(carried_write, 4),
        "report_check_render_seconds": round(checked["stages"]["report_check_render"], 4),
        "sim_open_seconds": round(sim_open, 4),
        "writes_in_timed_passes": sum(p["writes"] for p in passes),
        "shipped": shipped(root, cluster_path, workdir, runs),
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
