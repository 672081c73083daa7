"""``omegitops get irep``: the InferenceReplicas, as kubectl would list them."""

from __future__ import annotations

import argparse
from datetime import datetime

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.commands.common import print_json, table
from omegitops.reconcile import MANAGED
from omegitops.views import age, replica_view


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("get", help="list InferenceReplicas (irep)")
    parser.add_argument("resource", choices=["irep", "inferencereplica", "inferencereplicas"])
    parser.add_argument("-n", "--namespace", default=None)
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.set_defaults(func=run)


def replica_table(views: list[dict], now: datetime) -> str:
    rows = [
        (v["name"], v["component"], v["desired"], v["current"], v["ready"], v["available"],
         age(v["createdAt"], now))
        for v in sorted(views, key=lambda v: (v["namespace"] or "", v["name"]))
    ]
    headers = ("NAME", "COMPONENT", "DESIRED", "CURRENT", "READY", "AVAILABLE", "AGE")
    if not rows:
        return "No InferenceReplicas found."
    return table(headers, rows)


def run(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        replicas = cluster.list_objects(INFERENCE_REPLICA, MANAGED)
        now = cluster.now()
    views = [replica_view(r) for r in replicas
             if args.namespace in (None, r["metadata"].get("namespace"))]
    views.sort(key=lambda v: (v["namespace"] or "", v["name"]))
    if args.output == "json":
        print_json(views)
    else:
        print(replica_table(views, now))
    return 0
