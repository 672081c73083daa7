"""``omegitops plan``: what the next reconcile would do, without writing anything anywhere.

The plan is made against a copy: ``sim:PATH`` is copied into a temporary
directory and the copy is opened (never the file itself, nor its lock); no
``--cluster`` means an empty simulated cluster made there, sized to fit the
repository; ``--base REF`` rebuilds there what the cluster last ran (the
commit the status report at REF names, else REF itself: ``preview/base.py``)
and plans the change against it; ``kube`` is only observed (no Lease, no
writes). On a simulated cluster the rollout is then
run on the same copy to forecast it; a live cluster has no simulator state
to run it on, so it gets no forecast.

Exit codes: 1 when a manifest is invalid (the plan of the valid objects is
still printed); with ``--detailed-exitcode``, 2 when any component has work
pending and 0 when every plan is a no-op, as Terraform's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, cast

from omegitops.app.untilidle import IDLE, run_until_idle
from omegitops.cluster import open_cluster, sim_path
from omegitops.cluster.sim import SimCluster
from omegitops.commands.common import (
    STRUCTURED,
    add_repo_args,
    branch_name,
    cache_dir,
    output_file,
    print_structured,
    report_folder,
    seconds,
)
from omegitops.commands.reconcile import DEFAULT_REPORT_DIR
from omegitops.manifests.load import ServiceComponent, load, resolved_components
from omegitops.preview.base import Base, RevisionHistory, base_manifests, starting_notes
from omegitops.preview.basestate import seed
from omegitops.preview.cadence import SHIPPED_JOB_SECONDS, SHIPPED_SCHEDULE, Cadence, cadence
from omegitops.preview.fleetsize import sized_pools
from omegitops.preview.forecast import DEFAULT_BUDGET_SECONDS, assumptions, forecast
from omegitops.preview.planning import Planned, plan_components
from omegitops.preview.planview import plan_document, render_markdown
from omegitops.util.errors import UsageError, print_errors
from omegitops.util.files import temporary_folder
from omegitops.util.times import format_time

NO_CLUSTER = "none"
MIN_CHARS = 4000
# GitHub refuses a comment over 65,536 characters; the workflow adds a header.
COMMENT_CHARS = 65000
# Simulated time the base's state may take to settle before the head is planned on it.
BASE_SECONDS = 86400.0
CHANGES_PENDING = 2
LIVE_FORECAST = ("no forecast for a live cluster: there is no simulator state to run the "
                 "rollout on, and a guess at one would not be the cluster's")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="dry run: what the next pass would do, with warnings and a forecast")
    add_repo_args(parser)
    parser.add_argument("--cluster", default=NO_CLUSTER,
                        help="sim:PATH (read, never written), kube or kube:CONTEXT (observed "
                             "only); default: none, an empty simulated cluster")
    parser.add_argument("--base", metavar="REF", default=None,
                        help="plan against what runs: the state of the commit the status "
                             "report at REF names (else REF itself), rebuilt on a simulated "
                             "cluster sized to fit; no cluster credentials needed")
    parser.add_argument("--report-dir", default=DEFAULT_REPORT_DIR, metavar="D",
                        type=report_folder,
                        help="with --base, where the job commits its report, relative to the "
                             f"repository root (default: {DEFAULT_REPORT_DIR})")
    parser.add_argument("--report-branch", default=None, metavar="B", type=branch_name,
                        help="with --base, the branch the job commits its report onto "
                             "(reconcile --report-branch): the report is read from origin/B "
                             "(else B) rather than from REF")
    parser.add_argument("-o", "--output", choices=["markdown", *STRUCTURED], default="markdown")
    parser.add_argument("--max-chars", type=int, default=None, metavar="N",
                        help="Markdown of at most N characters, changed components left out "
                             "whole (and named) past it: 65000 fits a GitHub comment, "
                             "1000000 a step summary")
    parser.add_argument("--comment-out", metavar="FILE", default=None, type=output_file,
                        help="also write the Markdown cut to fit one GitHub comment "
                             f"({COMMENT_CHARS} characters) to FILE")
    parser.add_argument("--json-out", metavar="FILE", default=None, type=output_file,
                        help="also write the plan's JSON document to FILE")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="exit 0 when nothing would change, 2 when changes are pending, "
                             "1 on error")
    parser.add_argument("--forecast-seconds", type=seconds, default=DEFAULT_BUDGET_SECONDS,
                        metavar="S", help="simulated time budget of the forecast "
                                          f"(default: {DEFAULT_BUDGET_SECONDS:.0f})")
    parser.add_argument("--schedule", default=SHIPPED_SCHEDULE, metavar="CRON",
                        help="the forecast's job cadence: the scheduled job's schedule, any a "
                             "CronJob accepts (the longest wait between two runs paces the "
                             f"forecast; default: the shipped pipelines', '{SHIPPED_SCHEDULE}')")
    parser.add_argument("--job-seconds", type=seconds, default=SHIPPED_JOB_SECONDS,
                        metavar="S", help="the forecast's job cadence: each run's "
                                          "--max-seconds (default: the shipped pipelines', "
                                          f"{SHIPPED_JOB_SECONDS:.0f})")
    parser.add_argument("--no-forecast", action="store_true", help="skip the forecast")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_chars is not None and args.max_chars < MIN_CHARS:
        raise UsageError(f"--max-chars {args.max_chars}: at least {MIN_CHARS} (the summary, "
                         "the warnings and the forecast come first and are kept)")
    if args.base is not None and args.cluster not in (None, "", NO_CLUSTER):
        raise UsageError("--base and --cluster are two answers to one question (what the "
                         "plan starts from): give one")
    args.cadence = cadence(args.schedule, args.job_seconds)
    loaded = load(args.repo, args.operator_values, cache_dir=cache_dir(args))
    print_errors(loaded.result.errors)
    for warning in loaded.result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    items = resolved_components(loaded)
    budget = None if args.no_forecast else args.forecast_seconds
    with temporary_folder("omegitops-plan-") as scratch:
        if args.base is not None:
            cluster, (planned, removed), outlook, skipped = _plan_from_base(
                args, items, Path(scratch), budget, args.cadence)
        else:
            cluster, (planned, removed), outlook, skipped = _plan(
                args.cluster, items, Path(scratch), budget, args.cadence)
    document = plan_document(loaded, planned, cluster, outlook, skipped, removed)
    print_errors(document["planningErrors"])
    if args.output in STRUCTURED:
        print_structured(document, args.output)
    else:
        sys.stdout.write(render_markdown(document, args.max_chars))
    # One plan, several readers (the comment, the summary, an artifact), as Atlantis
    # keeps the full plan beside the comment it cuts.
    if args.comment_out:
        Path(args.comment_out).write_text(render_markdown(document, COMMENT_CHARS))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(document, indent=2, default=str) + "\n")
    if not loaded.result.ok or document["planningErrors"]:
        return 1
    if args.detailed_exitcode and document["changes"]:
        return CHANGES_PENDING
    return 0


def _plan(spec: str | None, items: list[ServiceComponent], scratch: Path,
          budget: float | None, cadence_of: Cadence
          ) -> tuple[dict, Planned, dict | None, str | None]:
    """(cluster description, (planned components, removals), forecast, why none)."""
    if spec and spec.startswith("kube"):
        with open_cluster(spec, exclusive=False) as live:
            planned = plan_components(live, items)
            about: dict[str, Any] = {
                "spec": spec, "kind": "kube", "time": format_time(live.now().timestamp()),
                     "description": f"live cluster {spec}, observed only"}
        return about, planned, None, LIVE_FORECAST
    copy = scratch / "cluster.json"
    if spec in (None, "", NO_CLUSTER):
        SimCluster.init(copy, pools=sized_pools(items))
        about = {"spec": None, "kind": "empty",
                 "description": "an empty simulated cluster sized to fit the repository "
                                "(no --cluster)"}
    else:
        original = Path(sim_path(spec))
        if original.exists():
            shutil.copyfile(original, copy)
            about = {"spec": spec, "kind": "sim", "description": f"a copy of {spec}"}
        else:
            SimCluster.init(copy)
            about = {"spec": spec, "kind": "sim",
                     "description": f"{spec}, which does not exist yet: an empty cluster"}
    with SimCluster(copy) as sim:
        about["time"] = format_time(sim.now().timestamp())
        planned = plan_components(sim, items)
        if budget is None:
            return about, planned, None, "skipped (--no-forecast)"
        return about, planned, _forecast(sim, items, budget, cadence_of), None


def _plan_from_base(args: argparse.Namespace, items: list[ServiceComponent], scratch: Path,
                    budget: float | None, cadence_of: Cadence
                    ) -> tuple[dict, Planned, dict | None, str | None]:
    """Rebuild the base's state on a sized simulated cluster, then plan the head on it."""
    base = base_manifests(Path(args.repo), args.base, args.report_dir, scratch,
                          args.report_branch)
    base_items: list[ServiceComponent] = []
    if base.present:
        before = load(base.manifests, args.operator_values, cache_dir=cache_dir(args))
        base_items = resolved_components(before)
        if before.result.errors:
            print(f"warning: the base has {len(before.result.errors)} invalid object(s); "
                  "its valid objects make the starting state", file=sys.stderr)
    copy = scratch / "cluster.json"
    SimCluster.init(copy, pools=sized_pools(base_items, items))
    with SimCluster(copy) as sim:
        started = sim.now()
        stop = run_until_idle(sim, base_items, BASE_SECONDS) if base_items else IDLE
        settled = (sim.now() - started).total_seconds()
        notes = starting_notes(base, args.report_dir)
        if stop != IDLE:
            print(f"warning: the base did not settle in {BASE_SECONDS:.0f} s of simulated "
                  f"time ({stop}); the plan starts from where it stood", file=sys.stderr)
        elif base.report is not None and base.from_report:
            notes += _seed_from_report(args, base, base_items, sim, scratch)
        about = {"spec": None, "kind": "base", "description": base.description,
                 "base": {**base.to_dict(), "settled": stop == IDLE,
                          "settleSeconds": round(settled, 1), "notes": notes},
                 "time": format_time(sim.now().timestamp())}
        planned = plan_components(sim, items)
        if budget is None:
            return about, planned, None, "skipped (--no-forecast)"
        return about, planned, _forecast(sim, items, budget, cadence_of), None


def _seed_from_report(args: argparse.Namespace, base: Base,
                      base_items: list[ServiceComponent], sim: SimCluster,
                      scratch: Path) -> list[str]:
    """The report's Instances put back on the replayed base (``omegitops/preview/basestate.py``);
    the notes that say what was put back and what could not be."""
    history = RevisionHistory(Path(args.repo), base.state_commit, scratch, args.operator_values,
                              cache_dir=cache_dir(args))
    try:
        seeded = seed(sim, base_items, cast(dict[str, Any], base.report), history.find)
    finally:
        history.close()
    if not seeded.components:
        return []
    return [f"Started from the job's report: {seeded.summary()}.", *seeded.notes]


def _forecast(sim: SimCluster, items: list[ServiceComponent], budget: float,
              cadence_of: Cadence) -> dict:
    """The rollout run on ``sim`` at the job's cadence, with what it assumes."""
    outlook = forecast(sim, items, budget, cadence_of)
    outlook["assumptions"] = assumptions(outlook, sim.pull_seconds)
    return outlook
