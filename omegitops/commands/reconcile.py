"""``omegitops reconcile``: one bounded pass, or passes until nothing is in flight."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import cast

from omegitops.app.run import RunOutcome, pruning, run_passes
from omegitops.app.shards import Shard
from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.errors import LockHeld
from omegitops.commands.common import (
    add_repo_args,
    branch_name,
    cache_dir,
    output_file,
    report_folder,
    seconds,
)
from omegitops.commands.get import replica_table
from omegitops.gitops import DEFAULT_AUTHOR, Author, checkout
from omegitops.gitops.branch import (
    Beside,
    check_report_branch,
    publish_report,
    read_report_file,
)
from omegitops.gitops.credentials import redact
from omegitops.gitops.gitcmd import GitError
from omegitops.gitops.push import PushError
from omegitops.gitops.repo import Checkout, report_path
from omegitops.manifests import carried
from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.memo import LoadMemo
from omegitops.report.views import replica_view
from omegitops.util.errors import InputError, UsageError, os_error_text, print_errors
from omegitops.util.files import temporary_folder

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
                        help="time budget of --until-idle in seconds (simulated seconds on sim:; "
                             "default: 3600)")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="reconcile only the namespaces whose stable hash falls in shard "
                             "I of N (0 <= I < N), under that shard's own Lease; "
                             "`omegitops merge-reports` puts the shards' reports together")
    parser.add_argument("--report-dir", default=None, metavar="D", type=report_folder,
                        help="write the status report (Markdown and JSON) into D; with "
                             f"--commit, relative to the repository root (default: "
                             f"{DEFAULT_REPORT_DIR})")
    _add_git_args(parser)
    _add_operating_args(parser)
    parser.set_defaults(func=run)


# The exit code of a run that did all it could while something waits for a person
# (--fail-on-degraded): a CronJob's failed-Job alert then fires.
NEEDS_PERSON = 3


def _add_operating_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fail-on-degraded", action="store_true",
                        help=f"exit {NEEDS_PERSON} when the run succeeded but a component is "
                             "Degraded or waits for a person (a held revision, an InPlaceOnly "
                             "refusal), so that the Job's failure alerts")
    parser.add_argument("--metrics-file", default=None, metavar="PATH", type=output_file,
                        help="write the run's metrics in Prometheus's text format into PATH "
                             "at its end (node-exporter's textfile collector)")
    parser.add_argument("--metrics-push", default=None, metavar="URL",
                        help="push the run's metrics to the Pushgateway at URL at its end "
                             "(job omegitops, grouped by shard)")


def _add_git_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--branch", default=None,
                        help="branch to clone when --repo is a URL (default: the remote's)")
    parser.add_argument("--path", default=None, metavar="P",
                        help="folder of the repository holding the manifests (default: its root)")
    parser.add_argument("--commit", action="store_true",
                        help="commit the report folder when the report's content changed")
    parser.add_argument("--push", action="store_true",
                        help="push the report commit (needs --commit); never forced")
    parser.add_argument("--report-branch", default=None, metavar="B", type=branch_name,
                        help="with --commit, commit the report folder onto branch B (made "
                             "when missing, holding the report only) instead of the "
                             "manifests' branch, which is then only read: for a protected "
                             "main")
    parser.add_argument("--prune", action="store_true",
                        help="tear down components the repository no longer has")
    parser.add_argument("--carried-memo", action=argparse.BooleanOptionalAction, default=None,
                        help="with --report-branch, read the load memo the last run left "
                             "beside the report, and leave this run's there, signed with "
                             f"${carried.ENV_KEY} (default: on when that key is set, "
                             f"unless ${ENV_CARRIED}=off)")
    parser.add_argument("--author", default=DEFAULT_AUTHOR, metavar='"NAME <EMAIL>"',
                        help=f"author of report commits (default: {DEFAULT_AUTHOR})")


# Turns the carried load memo off (``off``, ``false``, ``0``, ``no``) without a flag.
ENV_CARRIED = "OMEGITOPS_CARRIED_MEMO"


def _carry_key(args: argparse.Namespace) -> bytes | None:
    """The key that signs the carried load memo, when this run carries one: it commits
    onto a report branch, the memo is not turned off, and a key is set."""
    wanted = args.carried_memo
    if wanted is None:
        wanted = os.environ.get(ENV_CARRIED, "").strip().lower() not in (
            "off", "false", "0", "no")
    if not wanted or args.report_branch is None:
        return None
    return carried.key_from_env()


def _carried_in(args: argparse.Namespace, repo: Checkout, folder: PurePosixPath,
                key: bytes) -> LoadMemo:
    """The run's load memo with what the report branch carries (``carried.py``)."""
    path = (folder / carried.FILE_NAME).as_posix()
    where = f"{path} on branch {args.report_branch}"
    try:
        data = read_report_file(repo, args.report_branch, folder, carried.FILE_NAME,
                                args.push, carried.MAX_BYTES)
    except (PushError, GitError, OSError, ValueError) as err:
        log.info("carried load memo not read from %s: %s", where, err)
        data = None
    return carried.carried_memo(data, key, cache_dir(args), where)


def _carried_out(memo: LoadMemo | None, key: bytes | None) -> Beside | None:
    """What makes the carried load memo to commit beside the report, if the run carries
    one: encoded and signed only when the report changed and is committed (a steady
    fleet's runs commit nothing, and encoding the memo of 1,000 services took 0.17 s)."""
    if memo is None or key is None:
        return None

    def made() -> dict[str, bytes]:
        data = carried.encode(memo, key)
        return {carried.FILE_NAME: data} if data is not None else {}
    return made


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
        key = _carry_key(args) if folder is not None else None
        memo = _carried_in(args, repo, folder, key) \
            if folder is not None and key is not None else None
        loaded = load(repo.manifests, args.operator_values, shard.owns if shard else None,
                      cache_dir=cache_dir(args), memo=memo)
        print_errors(loaded.result.errors)
        items = resolved_components(loaded)
        if shard is not None:
            log.info("shard %s: %d components", shard, len(items))
        # On a report branch the manifests' tree is only read: the report is written
        # aside, and committed from there.
        aside = Path(stack.enter_context(temporary_folder("omegitops-"))) \
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
            publish_report(repo, folder, report_dir, author, args.push, args.report_branch,
                           _carried_out(memo, key))
    return code


def _check_report_dir(report_dir, root: Path | None) -> None:
    """Refuse a report folder that cannot be written before anything is reconciled.
    Under --commit, paths are named as the repository names them (``root``: its top),
    never by the clone's temporary path."""
    if not report_dir:
        return
    from omegitops.report.status import report_dir_problem

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
    from omegitops.preview.fleetsize import sized_pools

    path = Path(sim_path(spec))
    if path.exists():
        return
    pools = sized_pools(fleet())
    SimCluster.init(path, pools=pools)
    log.info("%s: a new simulated cluster sized to fit the repository: %s", spec,
             ", ".join(f"{pool.nodes} node{'s' if pool.nodes != 1 else ''} of {pool.gpus} GPUs"
                       for pool in pools) or "no nodes")


def _reconcile(args: argparse.Namespace, loaded, items, report_dir, repository: str,
               revision: str | None = None, shard: Shard | None = None) -> int:
    """The run's passes, report and table."""
    prune, refused = pruning(args.prune, loaded)
    from omegitops.report.status import ReportNotWritten, run_report, write_built_report

    started = time.monotonic()
    unwritten: ReportNotWritten | None = None
    with open_cluster(args.cluster, shard=shard) as cluster:
        outcome = run_passes(cluster, items, loaded, until_idle=args.until_idle,
                             max_seconds=args.max_seconds, prune=prune, refused=refused)
        report = run_report(loaded, cluster, repository=repository, revision=revision,
                            replicas=outcome.replicas)
        if report_dir:
            try:
                write_built_report(report_dir, report)
            except ReportNotWritten as err:
                # Said once the cluster is closed: what the passes applied is kept (a
                # simulated cluster saves it), as on a real cluster.
                unwritten = err
    if unwritten is not None:
        raise ReportNotWritten(f"{unwritten}; what the run applied is kept, and the next "
                               "run writes the report") from unwritten
    replicas = [replica_view(r) for r in outcome.replicas]
    print(replica_table(replicas, cast(datetime, outcome.now), namespaces=True))
    waiting = _warn_what_needs_a_person(report)
    code = _exit_code(outcome, loaded, bool(report_dir))
    if code == 0 and args.fail_on_degraded and waiting:
        print(f"omegitops: {waiting} component{'s' if waiting != 1 else ''} Degraded or "
              f"waiting for a person (--fail-on-degraded): exit {NEEDS_PERSON}",
              file=sys.stderr)
        code = NEEDS_PERSON
    _send_metrics(args, report, outcome, code, time.monotonic() - started, shard)
    return code


def _warn_what_needs_a_person(report: dict) -> int:
    """One WARNING line per component that is Degraded or waits for a person, with what
    to do; how many there are. A staged canary is a person's choice, said at INFO."""
    from omegitops.report.status import DEGRADED, STAGED

    count = 0
    for service in report["services"]:
        for component in service["components"]:
            if not component["managed"]:
                continue
            where = {"namespace": service["namespace"], "service": service["name"],
                     "component": component["component"]}
            needs = component.get("needsPerson") or []
            urgent = [n for n in needs if n["reason"] != STAGED]
            for need in needs:
                level = logging.WARNING if need in urgent else logging.INFO
                log.log(level, "%s/%s %s: %s: %s; to move it: %s", service["namespace"],
                        service["name"], component["component"], need["reason"],
                        need["text"], need["action"],
                        extra={**where, "reason": need["reason"], "action": need["action"]})
            if component["health"] == DEGRADED and not urgent:
                log.warning("%s/%s %s: Degraded: %s", service["namespace"], service["name"],
                            component["component"], component.get("healthReason") or "",
                            extra={**where, "reason": "Degraded"})
            count += bool(urgent) or component["health"] == DEGRADED
    return count


def _send_metrics(args: argparse.Namespace, report: dict, outcome: RunOutcome, code: int,
                  seconds: float, shard: Shard | None) -> None:
    """The metrics file and the push, when asked for. Neither fails the run: the
    cluster's work is done; what could not be sent is said as a WARNING."""
    if not (args.metrics_file or args.metrics_push):
        return
    from omegitops.report import metrics

    figures = metrics.RunFigures(seconds=seconds, passes=outcome.passes,
                                 writes=outcome.writes, errors=outcome.errors,
                                 exit_code=code, finished_at=time.time())
    found = metrics.registry(report, figures)
    if args.metrics_file:
        try:
            metrics.write(found, args.metrics_file)
        except OSError as err:
            log.warning("the metrics were not written to %s: %s", args.metrics_file,
                        os_error_text(err))
    if args.metrics_push:
        grouping = {"shard": str(shard) if shard else "all"}
        try:
            metrics.push(found, args.metrics_push, grouping)
        except OSError as err:  # URLError and HTTPError are OSErrors
            log.warning("the metrics were not pushed to %s: %s", redact(args.metrics_push),
                        err)


def _exit_code(outcome: RunOutcome, loaded, reported: bool) -> int:
    """Say how the run ended; 128 + the signal that stopped it, 1 for any error."""
    if outcome.interrupted is not None:
        name = signal.Signals(outcome.interrupted).name
        print(f"omegitops: interrupted by {name} after {outcome.passes_text}; what they "
              "applied is kept" + (" and the report written" if reported else ""),
              file=sys.stderr)
        return 128 + outcome.interrupted
    failed = outcome.failed
    if outcome.lost is not None:
        print(f"omegitops: error: {outcome.lost}; stopped after {outcome.passes_text}",
              file=sys.stderr)
        failed = True
    if outcome.outage:
        print("omegitops: error: the last pass met the cluster's faults (above); the next run "
              "carries on from where it stood", file=sys.stderr)
        failed = True
    return 1 if failed or not loaded.result.ok else 0
