"""``omegitops reconcile``: one bounded pass, or passes until nothing is in flight."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import tempfile
import threading
from pathlib import Path

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.errors import LeaseLost, LockHeld
from omegitops.commands.common import add_repo_args, cache_dir, print_errors, seconds
from omegitops.commands.get import replica_table
from omegitops.errors import InputError, UsageError
from omegitops.gitops import DEFAULT_AUTHOR, Author, checkout
from omegitops.gitops.branch import check_report_branch, publish_report
from omegitops.gitops.repo import report_path
from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.repository import INFERENCE_SERVICE
from omegitops.reconcile import MANAGED, Pruning, component_key, run_pass
from omegitops.shards import Shard
from omegitops.untilidle import IDLE, PASS_LIMIT, run_until_idle
from omegitops.views import replica_view

log = logging.getLogger("omegitops")
# Where --commit puts the report when --report-dir is not given (relative to the repository).
DEFAULT_REPORT_DIR = "status"


def add_cluster_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER,
                        help=f"sim:PATH, kube or kube:CONTEXT (default: {DEFAULT_CLUSTER})")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reconcile", help="reconcile the cluster toward the repository")
    add_repo_args(parser)
    add_cluster_arg(parser)
    parser.add_argument("--until-idle", action="store_true",
                        help="repeat passes while operations are in flight")
    parser.add_argument("--max-seconds", type=seconds, default=3600.0,
                        help="time budget of --until-idle (simulated seconds on sim:)")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="reconcile only the namespaces whose stable hash falls in shard "
                             "I of N (0 <= I < N), under that shard's own Lease; "
                             "`omegitops merge-reports` puts the shards' reports together")
    parser.add_argument("--report-dir", default=None, metavar="D",
                        help="write the status report (Markdown and JSON) into D; with "
                             f"--commit, relative to the repository root (default: "
                             f"{DEFAULT_REPORT_DIR})")
    _add_git_args(parser)
    parser.set_defaults(func=run)


def _add_git_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--branch", default=None,
                        help="branch to clone when --repo is a URL (default: the remote's)")
    parser.add_argument("--path", default=None, metavar="P",
                        help="folder of the repository holding the manifests (default: its root)")
    parser.add_argument("--commit", action="store_true",
                        help="commit the report folder when the report's content changed")
    parser.add_argument("--push", action="store_true",
                        help="push the report commit (needs --commit); never forced")
    parser.add_argument("--report-branch", default=None, metavar="B",
                        help="with --commit, commit the report folder onto branch B (made "
                             "when missing, holding the report only) instead of the "
                             "manifests' branch, which is then only read: for a protected "
                             "main")
    parser.add_argument("--prune", action="store_true",
                        help="tear down components the repository no longer has")
    parser.add_argument("--author", default=DEFAULT_AUTHOR, metavar='"NAME <EMAIL>"',
                        help=f"author of report commits (default: {DEFAULT_AUTHOR})")


def run(args: argparse.Namespace) -> int:
    # Usage errors first, before anything is cloned or touched.
    if args.push and not args.commit:
        raise UsageError("--push needs --commit")
    if args.report_branch is not None and not args.commit:
        raise UsageError("--report-branch needs --commit")
    author = Author.parse(args.author)
    shard = Shard.parse(args.shard) if args.shard else None
    folder = report_path(args.report_dir or DEFAULT_REPORT_DIR) if args.commit else None
    with contextlib.ExitStack() as stack:
        repo = stack.enter_context(checkout(args.repo, args.branch, args.path,
                                            writable=args.commit))
        if not Path(repo.manifests).is_dir():
            # Nothing to reconcile toward: no pass, no cluster touched.
            raise InputError(f"{args.repo}: the repository folder does not exist; nothing "
                             "was reconciled")
        if args.report_branch is not None:
            check_report_branch(repo, args.report_branch)
        loaded = load(repo.manifests, args.operator_values, shard.owns if shard else None,
                      cache_dir=cache_dir(args))
        print_errors(loaded.result.errors)
        items = resolved_components(loaded)
        if shard is not None:
            log.info("shard %s: %d components", shard, len(items))
        # On a report branch the manifests' tree is only read: the report is written
        # aside, and committed from there.
        aside = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="omegitops-"))) \
            if folder and args.report_branch else None
        top = aside or repo.root
        report_dir = top / folder if folder else args.report_dir
        _check_report_dir(report_dir, top if folder else None)
        try:
            # A shard shares the simulated cluster with the others: size it for them all.
            _size_a_new_simulated_cluster(args.cluster, lambda: items if shard is None else
                                          resolved_components(load(repo.manifests,
                                                                   args.operator_values,
                                                                   cache_dir=cache_dir(args))))
            code = _reconcile(args, loaded, items, report_dir, repo.shown, repo.revision,
                              shard)
        except LockHeld as err:
            # One run at a time: another one is doing this work already.
            print(f"omegitops: not running: {err}", file=sys.stderr)
            return 0
        if folder is not None:
            publish_report(repo, folder, report_dir, author, args.push, args.report_branch)
    return code


def _check_report_dir(report_dir, root: Path | None) -> None:
    """Refuse a report folder that cannot be written before anything is reconciled.
    Under --commit, paths are named as the repository names them (``root``: its top),
    never by the clone's temporary path."""
    if not report_dir:
        return
    from omegitops.report import report_dir_problem

    problem = report_dir_problem(report_dir, root)
    if problem is None:
        return
    where = " in the repository" if root is not None else ""
    raise InputError(f"the report cannot be written: {problem}{where}; nothing was "
                     "reconciled (remove it, or choose another --report-dir)")


def _size_a_new_simulated_cluster(spec: str, fleet) -> None:
    """A ``sim:`` cluster that does not exist yet is made with nodes enough for the
    repository at its peak, as ``plan`` sizes the cluster it forecasts on: the run then
    shows what the manifests do, not what eight default nodes can hold."""
    if not spec.startswith("sim:"):
        return
    from omegitops.cluster import sim_path
    from omegitops.cluster.sim import SimCluster
    from omegitops.fleetsize import sized_pools

    path = Path(sim_path(spec))
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    pools = sized_pools(fleet())
    SimCluster.init(path, pools=pools)
    log.info("%s: a new simulated cluster sized to fit the repository: %s", spec,
             ", ".join(f"{pool.nodes} node{'s' if pool.nodes != 1 else ''} of {pool.gpus} GPUs"
                       for pool in pools) or "no nodes")


def _reconcile(args: argparse.Namespace, loaded, items, report_dir, repository: str,
               revision: str | None = None, shard: Shard | None = None) -> int:
    """The run's passes, report and table; the signal handlers as they were, after."""
    main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main \
        else {}
    try:
        return _run_passes(args, loaded, items, report_dir, repository, revision, shard)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _run_passes(args: argparse.Namespace, loaded, items, report_dir, repository: str,
                revision: str | None = None, shard: Shard | None = None) -> int:
    prune, refused = _pruning(args, loaded)
    failed = refused
    with open_cluster(args.cluster, shard=shard) as cluster:
        passes = 0
        outage = False  # the last pass met only transient faults

        warned: set[str] = set()
        invalid = _present_but_invalid(loaded)
        # Components the repository has in another mode (RawDeployment, say).
        other_modes = {component_key(item): item.lifecycle.mode.value for item in items
                       if not item.lifecycle.managed}

        last = None

        def progress(result) -> None:
            nonlocal failed, passes, outage, last
            passes += 1
            last = result
            if result.passing_faults_only:
                # The cluster's passing fault (an API server restarting, a timeout): the
                # next pass carries on, and the run fails only if it ends in one.
                for error in result.errors:
                    log.warning("%s; the next pass tries again", error)
            else:
                print_errors(result.errors)
                failed |= bool(result.errors)
            outage = bool(result.errors) and result.passing_faults_only
            if result.carried and not result.plans:
                return  # a pass on watches with nothing to plan: not worth a line
            busy = [plan.component for _, plan in result.all_plans if plan.busy]
            planned = f", {len(result.plans)} planned" if result.carried else ""
            log.info("pass %d at %s: %d writes, %d of %d components busy%s", passes,
                     result.now.strftime("%Y-%m-%dT%H:%M:%SZ"), result.applied, len(busy),
                     len(result.all_plans), planned)
            for orphan, owner in result.orphans:
                if orphan in warned:
                    continue  # once per run, not once per pass
                warned.add(orphan)
                if owner[:2] in invalid:
                    log.warning("InferenceReplica %s: the manifest of InferenceService %s/%s "
                                "is invalid, kept (an invalid manifest never tears anything "
                                "down)", orphan, *owner[:2])
                elif owner in other_modes:
                    log.warning("InferenceReplica %s: InferenceService %s/%s %s is %s in the "
                                "repository now, which omegitops does not manage; its "
                                "OMENative Instances keep serving until --prune tears them "
                                "down", orphan, *owner, other_modes[owner])
                else:
                    log.warning("InferenceReplica %s: its component is no longer in the "
                                "repository; --prune tears it down", orphan)

        lost = interrupted = None
        try:
            with _terminate_as_interrupt():
                if args.until_idle:
                    try:
                        stop = run_until_idle(cluster, items, args.max_seconds, progress,
                                              prune)
                    except LeaseLost as err:
                        # Another run holds the cluster now: write nothing more, but
                        # report what the passes done so far left (reads need no Lease).
                        lost, stop = err, IDLE
                    if stop == PASS_LIMIT:
                        # Something moved on every pass without the work ever ending:
                        # never a success, whatever the passes' own errors said.
                        print(f"error: --until-idle stopped: {stop}; the components that "
                              "stayed busy are in the table below", file=sys.stderr)
                        failed = True
                    elif stop != IDLE:
                        log.warning("stopping: %s", stop)
                else:
                    progress(run_pass(cluster, items, prune))
        except (KeyboardInterrupt, Interrupted) as stop_signal:
            # What the passes applied stays applied (and, on sim:, saved: the cluster is
            # left normally); a pass cut here is one the next run carries on from.
            interrupted = getattr(stop_signal, "signum", signal.SIGINT)
            # Stopping is under way: a second Ctrl-C (or SIGTERM) must not cut the save
            # and the report short, or the two would disagree.
            _ignore_further_signals()
        # What the passes applied is kept whatever fails after them (the report, say): a
        # simulated cluster saves it now, as a real one holds it already.
        save = getattr(cluster, "save", None)
        if save is not None:
            save()
        # The InferenceReplicas as the last pass left them serve the table and the
        # report; one LIST when that pass did not know them all (it watched, or a write
        # failed, or the run was cut in the middle of one).
        if last is not None and last.replicas is not None and interrupted is None \
                and lost is None:
            listed = [last.replicas[key] for key in sorted(last.replicas)]
        else:
            listed = cluster.list_objects(INFERENCE_REPLICA, MANAGED)
        replicas = [replica_view(r) for r in listed]
        now = cluster.now()
        if report_dir:
            from omegitops.report import write_report

            write_report(report_dir, loaded, cluster, repository=repository,
                         revision=revision, replicas=listed)
    print(replica_table(replicas, now, namespaces=True))
    if interrupted is not None:
        name = signal.Signals(interrupted).name
        print(f"omegitops: interrupted by {name} after {_passes(passes)}; what they applied is "
              "kept" + (" and the report written" if report_dir else ""), file=sys.stderr)
        return 128 + interrupted
    if lost is not None:
        print(f"omegitops: error: {lost}; stopped after {_passes(passes)}", file=sys.stderr)
        failed = True
    if outage:
        print("omegitops: error: the last pass met the cluster's faults (above); the next run "
              "carries on from where it stood", file=sys.stderr)
        failed = True
    return 1 if failed or not loaded.result.ok else 0


def _passes(count: int) -> str:
    return f"{count} pass" if count == 1 else f"{count} passes"


def _present_but_invalid(loaded) -> set[tuple[str, str]]:
    """Services whose manifest is in the repository but invalid this run."""
    valid = {m.id for m in loaded.result.catalog.services}
    return {(m.id.namespace, m.id.name) for m in loaded.repo.manifests
            if m.id.kind == INFERENCE_SERVICE and m.id not in valid}


def _ignore_further_signals() -> None:
    """Ignore SIGINT and SIGTERM from now on (for the rest of the run, which is stopping)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


class Interrupted(BaseException):
    """SIGTERM (a pod's termination, a CI job's cancellation), handled like Ctrl-C: a
    BaseException as KeyboardInterrupt is, so that no error boundary of one component
    (``except Exception``) takes it for that component's failure and goes on."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _terminate_as_interrupt():
    """While the passes run, SIGTERM raises ``Interrupted`` as SIGINT raises
    KeyboardInterrupt, so both stop the run the same way: keep what was applied,
    write the report, exit 128 + the signal's number."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _pruning(args: argparse.Namespace, loaded) -> tuple[Pruning | None, bool]:
    """(what --prune may tear down, whether pruning was refused).

    As Argo CD refuses to prune to an empty application, a repository that
    yields no services, or that has a file that failed to load (whatever it
    defined is unknown), prunes nothing: a broken checkout must not tear the
    fleet down. Services whose manifest is present but invalid are kept.
    """
    if not args.prune:
        return None, False
    if not loaded.result.catalog.services:
        log.error("refusing to prune: the repository yields no services")
        return None, True
    unreadable = sorted({e.path for e in loaded.repo.errors})
    if unreadable:
        log.error("refusing to prune: %s could not be read", ", ".join(unreadable))
        return None, True
    valid = {m.id for m in loaded.result.catalog.services}
    keep = frozenset((m.id.namespace, m.id.name) for m in loaded.repo.manifests
                     if m.id.kind == INFERENCE_SERVICE and m.id not in valid)
    return Pruning(keep=keep), False


