"""``omegitops events``: the core/v1 Events omegitops recorded, as kubectl lists them.

The event helpers here (``event_view``, ``sort_events``, ``about_instance``) are
also used by ``instance status`` and the status report, so every place shows
the same events in the same order.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.commands.common import STRUCTURED, print_structured, table
from omegitops.report.views import age, managed_events


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("events", help="list the Events omegitops recorded")
    parser.add_argument("-n", "--namespace", default=None)
    parser.add_argument("--reason", default=None, help="only Events with this reason")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("-o", "--output", choices=["table", *STRUCTURED], default="table")
    parser.set_defaults(func=run)


def object_ref(view: dict) -> str:
    """``inferenceservice/qwen3-0-6b``, as kubectl names an object."""
    return f"{(view['object']['kind'] or '').lower()}/{view['object']['name']}"


def events_table(views: list[dict], now: datetime) -> str:
    if not views:
        return "No events found."
    headers = ("LAST SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE")
    rows = [(age(v["lastTimestamp"], now), v["type"], v["reason"], object_ref(v), v["count"],
             v["message"]) for v in views]
    return table(headers, rows)


def run(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        views = managed_events(cluster)
        now = cluster.now()
    views = [v for v in views
             if args.namespace in (None, v["namespace"]) and args.reason in (None, v["reason"])]
    if args.output in STRUCTURED:
        print_structured(views, args.output)
    else:
        print(events_table(views, now))
    return 0
