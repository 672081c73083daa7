"""``omegitops reconcile``: one bounded pass, or passes until nothing is in flight."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import timedelta

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.errors import LockHeld
from omegitops.commands.common import add_repo_args, print_errors
from omegitops.commands.get import replica_table
from omegitops.errors import UsageError
from omegitops.gitops import DEFAULT_AUTHOR, Author, checkout, commit_report, push_report
from omegitops.gitops.repo import report_path
from omegitops.manifests.load import load, resolved_components
from omegitops.reconcile import MANAGED, run_pass
from omegitops.views import replica_view

log = logging.getLogger("omegitops")
# A pass that acted is followed at once by another; this bounds a run whose
# plans keep acting without the clock moving (which would be a bug).
MAX_PASSES = 5000
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
    parser.add_argument("--max-seconds", type=float, default=3600.0,
                        help="time budget of --until-idle (simulated seconds on sim:)")
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
    parser.add_argument("--author", default=DEFAULT_AUTHOR, metavar='"NAME <EMAIL>"',
                        help=f"author of report commits (default: {DEFAULT_AUTHOR})")


def run(args: argparse.Namespace) -> int:
    # Usage errors first, before anything is cloned or touched.
    if args.push and not args.commit:
        raise UsageError("--push needs --commit")
    author = Author.parse(args.author)
    folder = report_path(args.report_dir or DEFAULT_REPORT_DIR) if args.commit else None
    with checkout(args.repo, args.branch, args.path, writable=args.commit) as repo:
        loaded = load(repo.manifests, args.operator_values)
        print_errors(loaded.result.errors)
        items = resolved_components(loaded)
        report_dir = repo.root / folder if folder else args.report_dir
        try:
            code = _reconcile(args, loaded, items, report_dir, repo.shown)
        except LockHeld as err:
            # One run at a time: another one is doing this work already.
            print(f"omegitops: not running: {err}", file=sys.stderr)
            return 0
        if folder is not None:
            commit = commit_report(repo.git, folder, author)
            if commit is not None and args.push:
                push_report(repo, commit)
    return code


def _reconcile(args: argparse.Namespace, loaded, items, report_dir, repository: str) -> int:
    failed = False
    with open_cluster(args.cluster) as cluster:
        start = cluster.now()
        stop_at = start + timedelta(seconds=args.max_seconds)
        for number in range(1, MAX_PASSES + 1):
            result = run_pass(cluster, items)
            print_errors(result.errors)
            failed |= bool(result.errors)
            busy = [plan.component for _, plan in result.plans if plan.busy]
            log.info("pass %d at %s: %d writes, %d of %d components busy", number,
                     result.now.strftime("%Y-%m-%dT%H:%M:%SZ"), result.applied, len(busy),
                     len(result.plans))
            if not args.until_idle or not result.busy:
                break
            if result.applied:
                # Let the cluster react to what was just written before planning again.
                cluster.advance(_gap(cluster, result.now, None))
                continue
            wake = _next_wake(cluster, result.wake_at)
            if wake is None and cluster.poll_seconds:
                wake = cluster.now() + timedelta(seconds=cluster.poll_seconds)
            if wake is None:
                log.warning("still busy, but nothing will change by itself; stopping")
                break
            if wake > stop_at:
                log.warning("time budget of %ss spent with work in flight", args.max_seconds)
                break
            cluster.advance((wake - cluster.now()).total_seconds())
        replicas = [replica_view(r) for r in cluster.list_objects(INFERENCE_REPLICA, MANAGED)]
        now = cluster.now()
        if report_dir:
            from omegitops.report import write_report

            write_report(report_dir, loaded, cluster, repository=repository)
    print(replica_table(replicas, now))
    return 1 if failed or not loaded.result.ok else 0


def _next_wake(cluster, planned):
    candidates = [t for t in (planned, cluster.next_transition_at()) if t is not None]
    return min(candidates) if candidates else None


def _gap(cluster, now, planned) -> float:
    """Seconds to the next thing the cluster does by itself, at least none."""
    wake = _next_wake(cluster, planned)
    if wake is None:
        return 0.0
    return max(0.0, min((wake - now).total_seconds(), 1.0))

