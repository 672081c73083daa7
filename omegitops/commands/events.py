"""``omegitops events``: the core/v1 Events omegitops recorded, as kubectl lists them.

The event helpers here (``event_view``, ``sort_events``, ``about_instance``) are
also used by ``instance status`` and the status report, so every place shows
the same events in the same order.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.base import EVENT
from omegitops.commands.common import print_json, table
from omegitops.reconcile import MANAGED
from omegitops.views import age

WARNING = "Warning"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("events", help="list the Events omegitops recorded")
    parser.add_argument("-n", "--namespace", default=None)
    parser.add_argument("--reason", default=None, help="only Events with this reason")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.set_defaults(func=run)


def event_view(event: dict) -> dict[str, Any]:
    """One Event as ``events -o json`` prints it."""
    involved = event.get("involvedObject") or {}
    return {
        "namespace": (event.get("metadata") or {}).get("namespace"),
        "type": event.get("type"),
        "reason": event.get("reason"),
        "object": {"kind": involved.get("kind"), "name": involved.get("name")},
        "count": event.get("count", 1),
        "firstTimestamp": event.get("firstTimestamp"),
        "lastTimestamp": event.get("lastTimestamp"),
        "message": event.get("message", ""),
    }


def _sort_key(view: dict) -> tuple:
    # Timestamps are RFC3339 in UTC with a Z, so they sort as text; the other
    # fields only break ties, so that the order never depends on list order.
    return (view["lastTimestamp"] or "", view["firstTimestamp"] or "", view["namespace"] or "",
            view["object"]["name"] or "", view["reason"] or "", view["message"])


def sort_events(views: list[dict]) -> list[dict]:
    return sorted(views, key=_sort_key)


def managed_events(cluster: Any) -> list[dict]:
    """Every Event omegitops recorded, as views, oldest first."""
    return sort_events([event_view(e) for e in cluster.list_objects(EVENT, MANAGED)])


def about_service(view: dict, namespace: str, name: str) -> bool:
    return (view["namespace"] == namespace and view["object"]["kind"] == "InferenceService"
            and view["object"]["name"] == name)


def about_component(view: dict, component: str) -> bool:
    """Whether the message names the component (``OMENative component=engine ...``)."""
    return f"component={component}" in view["message"].split()


def about_instance(view: dict, component: str, index: int) -> bool:
    # The trailing space keeps instance=1 from matching instance=10; the added
    # space lets a message that ends with the index match too.
    return f"component={component} instance={index} " in view["message"] + " "


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
    if args.output == "json":
        print_json(views)
    else:
        print(events_table(views, now))
    return 0
