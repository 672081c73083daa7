"""``omegitops instance list|status``: the Instance rows of one component, as
``kubectl ome instance`` shows them (instances.txt "Instance status").

The rows come from the component's InferenceReplica, whichever encoding
stored them (``views.instance_rows`` decodes ColumnarV2 and plain lists); each
Instance's pods are the cluster's own, listed as the command runs.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.commands.common import print_json, print_yaml, table
from omegitops.commands.events import events_table
from omegitops.model.replica import replica_name
from omegitops.render.pods import ordinal_of, pod_row, runner_of
from omegitops.render.templates import (
    LABEL_COMPONENT,
    LABEL_INDEX,
    LABEL_ISVC,
    MANAGED_BY,
    MANAGER,
)
from omegitops.report.views import (
    WARNING,
    about_instance,
    about_service,
    instance_rows,
    managed_events,
)
from omegitops.util.errors import OmegitopsError

COMPONENTS = ("engine", "decoder", "router")
# The pod that serves for its Instance: a gang serves only through its leader.
ENTRY_RUNNERS = ("leader", "default")


class NotFoundError(OmegitopsError):
    """An InferenceReplica or Instance that is not there."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("instance", help="list or show the Instances of a component")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="one line per Instance")
    _common_args(listing)
    listing.set_defaults(func=run_list)
    status = verbs.add_parser("status", help="one Instance: operation, failure, pods, events")
    _common_args(status)
    status.add_argument("index", type=int, metavar="INDEX")
    status.set_defaults(func=run_status)


def _common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("isvc", metavar="ISVC", help="the InferenceService")
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("--component", choices=COMPONENTS, default="engine")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")


# -- reading ------------------------------------------------------------------


def read_replica(cluster: Any, namespace: str, isvc: str, component: str) -> dict:
    name = replica_name(isvc, component)
    replica = cluster.get_object(INFERENCE_REPLICA, namespace, name)
    if replica is None:
        raise NotFoundError(
            f"InferenceReplica {namespace}/{name} not found: {isvc} has no OMENative "
            f"{component} in namespace {namespace}, or reconcile has not run yet")
    return replica


def find_row(rows: list[dict], replica: dict, index: int) -> dict:
    for row in rows:
        if row["index"] == index:
            return row
    meta = replica["metadata"]
    known = ", ".join(str(r["index"]) for r in rows) or "none"
    raise NotFoundError(f"InferenceReplica {meta.get('namespace')}/{meta['name']} has no "
                        f"Instance {index} (Instances: {known})")


# -- counts -------------------------------------------------------------------


def ready_pods(row: dict) -> int:
    return sum(1 for pod in row["pods"] if pod.get("ready"))


def serving_pod_count(row: dict) -> int:
    """Serving pods, or 0 when the entry pod (leader, or the single pod) does not serve."""
    entry = [pod for pod in row["pods"] if pod.get("runner") in ENTRY_RUNNERS]
    if not entry or not any(pod.get("serving") for pod in entry):
        return 0
    return sum(1 for pod in row["pods"] if pod.get("serving"))


def operation_text(operation: dict | None) -> str:
    if not operation:
        return "-"
    text = f"{operation.get('type')}/{operation.get('step')}"
    if operation.get("leavingNode"):
        # A migration names the node it moves the Instance off, and why.
        text += f" off {operation['leavingNode']} ({operation.get('leavingWhy') or '-'})"
    if operation.get("waiting"):
        text += f" (waiting: {operation['waiting']})"
    return text


# -- list ---------------------------------------------------------------------


LIST_HEADERS = ("IDX/INC", "PHASE", "REVISION", "PODS", "SERVING", "OPERATION")


def list_cells(row: dict) -> tuple:
    """One Instance's line of the list."""
    return (f"{row['index']}/{row['incarnation']}", row["phase"], row["revision"] or "-",
            f"{ready_pods(row)}/{len(row['pods'])}", serving_pod_count(row),
            operation_text(row["operation"]))


def list_table(rows: list[dict]) -> str:
    if not rows:
        return "No Instances found."
    return table(LIST_HEADERS, [list_cells(r) for r in rows])


def live_rows(cluster: Any, replica: dict, namespace: str, isvc: str,
              component: str, listed: list[dict] | None = None) -> list[dict]:
    """The InferenceReplica's rows with each Instance's pods as the cluster has them
    now: the rows are written ahead of the pods a pass creates (a new surge pod is not
    in them until the next pass), and a pod that cannot go shows as terminating.
    ``listed``: the managed pods already listed (several components shown at once make
    one LIST, not one each); else the component's are listed."""
    rows = instance_rows(replica)
    pods: dict[int, list[dict]] = {}
    selector = {LABEL_ISVC: isvc, LABEL_COMPONENT: component, MANAGED_BY: MANAGER}
    for pod in cluster.list_pods(selector) if listed is None else listed:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        index = labels.get(LABEL_INDEX, "")
        if meta.get("namespace") == namespace and index.isdigit() and all(
                labels.get(key) == value for key, value in selector.items()):
            pods.setdefault(int(index), []).append(pod)
    return [row if row["index"] not in pods else {**row, "pods": _live_pods(pods[row["index"]])}
            for row in rows]


def _live_pods(live: list[dict]) -> list[dict]:
    """The pod entries of a row as the cluster has the pods now."""
    return [{**pod_row(pod),
             "terminating": bool((pod.get("metadata") or {}).get("deletionTimestamp"))}
            for pod in sorted(live, key=lambda p: (runner_of(p), ordinal_of(p),
                                                  p["metadata"]["name"]))]


def run_list(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        show_list(cluster, args.namespace, args.isvc, args.component, args.output)
    return 0


def show_list(cluster: Any, namespace: str, isvc: str, component: str, output: str) -> None:
    """Print one component's Instances, a line each (``table``) or as ``json``/``yaml``."""
    replica = read_replica(cluster, namespace, isvc, component)
    rows = live_rows(cluster, replica, namespace, isvc, component)
    if output == "json":
        print_json(rows)
    elif output == "yaml":
        print_yaml(rows)
    else:
        print(list_table(rows))


# -- status -------------------------------------------------------------------


def instance_events(events: list[dict], namespace: str, isvc: str, component: str,
                    index: int) -> list[dict]:
    """The Warning events about one Instance, oldest first."""
    return [e for e in events if e["type"] == WARNING and about_service(e, namespace, isvc)
            and about_instance(e, component, index)]


def _failure_text(failure: dict | None) -> str:
    if not failure:
        return "<none>"
    where = "/".join(str(failure[k]) for k in ("pod", "container") if failure.get(k))
    parts = [where, failure.get("reason")]
    if failure.get("exitCode") is not None:
        parts.append(f"exit code {failure['exitCode']}")
    if failure.get("time"):
        parts.append(f"at {failure['time']}")
    text = ", ".join(str(p) for p in parts if p)
    if failure.get("message"):
        text += f": {failure['message']}"
    return text


def _operation_lines(operation: dict | None) -> list[str]:
    if not operation:
        return ["Operation:     <none>"]
    lines = [f"Operation:     {operation_text(operation)}"]
    for key in ("strategy", "startedAt", "deadline"):
        lines.append(f"  {key + ':':<12} {operation.get(key) or '-'}")
    if operation.get("leavingNode"):
        lines.append(f"  {'leaving:':<12} node {operation['leavingNode']} "
                     f"({operation.get('leavingWhy') or '-'})")
    if operation.get("replacement") is not None:
        lines.append(f"  {'replacement:':<12} Instance {operation['replacement']}")
    return lines


def _pods_text(row: dict) -> str:
    return f"{ready_pods(row)}/{len(row['pods'])} ready, {serving_pod_count(row)} serving"


def status_text(replica: dict, row: dict, events: list[dict], now: datetime) -> str:
    meta = replica["metadata"]
    lines = [
        f"Instance:      {row['index']}",
        f"Replica:       {meta.get('namespace')}/{meta['name']}",
        f"Incarnation:   {row['incarnation']}",
        f"Phase:         {row['phase']}",
        f"Revision:      {row['revision'] or '-'}",
        f"Pods:          {_pods_text(row)}",
        *_operation_lines(row["operation"]),
        f"Last failure:  {_failure_text(row['lastFailure'])}",
        "",
    ]
    pods = [(p.get("name"), p.get("runner"), p.get("ordinal"), p.get("ready"), p.get("serving"),
             p.get("restarts", 0), p.get("node") or "<none>",
             "Terminating" if p.get("terminating") else "-") for p in row["pods"]]
    headers = ("NAME", "RUNNER", "ORDINAL", "READY", "SERVING", "RESTARTS", "NODE", "DELETION")
    lines.append(table(headers, pods) if pods else "No pods.")
    lines.append("")
    lines.append("Warning events:")
    lines.append(events_table(events, now) if events else "<none>")
    return "\n".join(lines)


def run_status(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        show_status(cluster, args.namespace, args.isvc, args.component, args.index,
                    args.output)
    return 0


def show_status(cluster: Any, namespace: str, isvc: str, component: str, index: int,
                output: str) -> None:
    """Print one Instance: its operation, last failure, pods and warning events."""
    replica = read_replica(cluster, namespace, isvc, component)
    rows = live_rows(cluster, replica, namespace, isvc, component)
    events = managed_events(cluster)
    now = cluster.now()
    row = find_row(rows, replica, index)
    events = instance_events(events, namespace, isvc, component, index)
    if output == "json":
        print_json({**row, "events": events})
    elif output == "yaml":
        print_yaml({**row, "events": events})
    else:
        print(status_text(replica, row, events, now))
