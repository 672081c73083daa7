"""``omegitops plan``: what the next reconcile would do, without writing anything anywhere.

The plan is made against a copy: ``sim:PATH`` is copied into a temporary
directory and the copy is opened (never the file itself, nor its lock); no
``--cluster`` means an empty simulated cluster made there; ``kube`` is only
observed (no Lease, no writes). On a simulated cluster the rollout is then
run on the same copy to forecast it; a live cluster has no simulator state
to run it on, so it gets no forecast.

Exit codes: 1 when a manifest is invalid (the plan of the valid objects is
still printed); with ``--detailed-exitcode``, 2 when any component has work
pending and 0 when every plan is a no-op, as Terraform's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from omegitops.cluster import open_cluster, sim_path
from omegitops.cluster.base import Cluster
from omegitops.cluster.sim import SimCluster
from omegitops.cluster.times import format_time
from omegitops.commands.common import add_repo_args, print_errors, print_json
from omegitops.forecast import DEFAULT_BUDGET_SECONDS, forecast
from omegitops.manifests.load import ServiceComponent, load, resolved_components
from omegitops.planview import PlannedComponent, plan_document, render_markdown
from omegitops.reconcile import observe, plan_item, planning_error

NO_CLUSTER = "none"
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
    parser.add_argument("-o", "--output", choices=["markdown", "json"], default="markdown")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="exit 0 when nothing would change, 2 when changes are pending, "
                             "1 on error")
    parser.add_argument("--forecast-seconds", type=float, default=DEFAULT_BUDGET_SECONDS,
                        metavar="S", help="simulated time budget of the forecast "
                                          f"(default: {DEFAULT_BUDGET_SECONDS:.0f})")
    parser.add_argument("--no-forecast", action="store_true", help="skip the forecast")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    loaded = load(args.repo, args.operator_values)
    print_errors(loaded.result.errors)
    for warning in loaded.result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    items = resolved_components(loaded)
    budget = None if args.no_forecast else args.forecast_seconds
    with tempfile.TemporaryDirectory(prefix="omegitops-plan-") as scratch:
        cluster, planned, outlook, skipped = _plan(args.cluster, items, Path(scratch), budget)
    document = plan_document(loaded, planned, cluster, outlook, skipped)
    print_errors(document["planningErrors"])
    if args.output == "json":
        print_json(document)
    else:
        sys.stdout.write(render_markdown(document))
    if not loaded.result.ok or document["planningErrors"]:
        return 1
    if args.detailed_exitcode and document["changes"]:
        return CHANGES_PENDING
    return 0


def _plan(spec: str | None, items: list[ServiceComponent], scratch: Path,
          budget: float | None) -> tuple[dict, list[PlannedComponent], dict | None, str | None]:
    """(cluster description, planned components, forecast, why no forecast)."""
    if spec and spec.startswith("kube"):
        with open_cluster(spec, exclusive=False) as live:
            planned = plan_components(live, items)
            about = {"spec": spec, "kind": "kube", "time": format_time(live.now().timestamp()),
                     "description": f"live cluster {spec}, observed only"}
        return about, planned, None, LIVE_FORECAST
    copy = scratch / "cluster.json"
    if spec in (None, "", NO_CLUSTER):
        SimCluster.init(copy)
        about = {"spec": None, "kind": "empty",
                 "description": "an empty simulated cluster (no --cluster)"}
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
        return about, planned, forecast(sim, items, budget), None


def plan_components(cluster: Cluster, items: list[ServiceComponent]) -> list[PlannedComponent]:
    """Observe once and plan every component, keeping what the plan was made from
    (the desired templates and observed revisions the revision diff needs); no writes.
    A component whose plan raises carries the error instead, and the others go on."""
    now = cluster.now()
    seen = observe(cluster)
    planned: list[PlannedComponent] = []
    for item in items:
        if not item.lifecycle.managed:
            planned.append(PlannedComponent(item))
            continue
        try:
            planned.append(PlannedComponent(item, *plan_item(seen, item, now)))
        except Exception as err:  # noqa: BLE001 - one component's failure stays its own
            planned.append(PlannedComponent(item, error=planning_error(item, err)))
    return planned
