"""``omegitops get irep [NAME]``: the InferenceReplicas, as kubectl lists them.

kubectl's habits: a NAMESPACE column when the list spans namespaces (no ``-n``,
or ``-A``), ``-o wide`` adds columns, ``-o name`` prints ``kind.group/name``,
``-o json|yaml`` prints the objects themselves, a list as a ``List`` with
``items`` and one named object on its own, and a name that is not there is an
error (exit 1).
"""

from __future__ import annotations

import argparse
from datetime import datetime

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.commands.common import print_json, print_yaml, table
from omegitops.commands.instance import NotFoundError
from omegitops.render.templates import MANAGED
from omegitops.report.views import age, replica_view

RESOURCE = "inferencereplica.ome.io"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("get", help="list InferenceReplicas (irep)")
    parser.add_argument("resource", choices=["irep", "inferencereplica", "inferencereplicas"])
    parser.add_argument("name", nargs="?", metavar="NAME", help="one InferenceReplica")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", default=None)
    where.add_argument("-A", "--all-namespaces", action="store_true",
                       help="every namespace (also the default when -n is not given)")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml", "name"],
                        default="table")
    parser.set_defaults(func=run)


def replica_table(views: list[dict], now: datetime, namespaces: bool = False,
                  wide: bool = False) -> str:
    """The kubectl table; ``namespaces`` adds the NAMESPACE column, ``wide`` the revision,
    serving count, rollout hold and canary step (``2/3`` and what it waits for)."""
    if not views:
        return "No InferenceReplicas found."
    headers = ["NAME", "COMPONENT", "DESIRED", "CURRENT", "READY", "AVAILABLE", "COUNT-FROM",
               "AGE"]
    if wide:
        headers += ["SERVING", "REVISION", "HOLD", "CANARY"]
    if namespaces:
        headers.insert(0, "NAMESPACE")
    rows = []
    for v in sorted(views, key=lambda v: (v["namespace"] or "", v["name"])):
        row = [v["name"], v["component"], v["desired"], v["current"], v["ready"],
               v["available"], v["countFrom"], age(v["createdAt"], now)]
        if wide:
            hold = v["rolloutHold"] or {}
            row += [v["serving"], v["revision"], hold.get("gate", "<none>"),
                    _canary(v.get("canary"))]
        if namespaces:
            row.insert(0, v["namespace"])
        rows.append(row)
    return table(headers, rows)


def _canary(canary: dict | None) -> str:
    """The canary's current step, and what it waits for once reached."""
    if not canary or canary.get("done"):
        return "<none>"
    text = f"{canary.get('step')}/{canary.get('steps')}"
    if not canary.get("reachedAt"):
        return f"{text} moving"
    return f"{text} {canary.get('pause') or 'next'}"


def run(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        replicas = cluster.list_objects(INFERENCE_REPLICA, MANAGED)
        now = cluster.now()
    wanted = [r for r in replicas
              if args.namespace in (None, r["metadata"].get("namespace"))
              and args.name in (None, r["metadata"]["name"])]
    wanted.sort(key=lambda r: (r["metadata"].get("namespace") or "", r["metadata"]["name"]))
    if args.name and not wanted:
        where = f" in namespace {args.namespace}" if args.namespace else ""
        raise NotFoundError(f'inferencereplicas "{args.name}" not found{where}')
    if args.output in ("json", "yaml"):
        document = wanted[0] if args.name and len(wanted) == 1 else {
            "apiVersion": "v1", "kind": "List", "items": wanted, "metadata": {}}
        (print_json if args.output == "json" else print_yaml)(document)
        return 0
    if args.output == "name":
        for replica in wanted:
            print(f"{RESOURCE}/{replica['metadata']['name']}")
        return 0
    views = [replica_view(r) for r in wanted]
    print(replica_table(views, now, namespaces=args.namespace is None,
                        wide=args.output == "wide"))
    return 0
