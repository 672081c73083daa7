"""``omegitops resolve``: each component's effective lifecycle and its sources."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from omegitops.commands.common import (
    add_repo_args,
    cache_dir,
    print_json,
    print_yaml,
    table,
)
from omegitops.manifests.load import ServiceComponent, load, resolved_components
from omegitops.render.resolve import DEFAULT
from omegitops.util.errors import print_errors


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "resolve", help="show each component's effective lifecycle and where it came from"
    )
    add_repo_args(parser)
    parser.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    parser.set_defaults(func=run)


def component_view(item: ServiceComponent) -> dict[str, Any]:
    """The JSON shape of one resolved component."""
    lifecycle = item.lifecycle
    runtime = item.runtime
    return {
        "inferenceService": item.service.id.ref,
        "namespace": item.service.id.namespace,
        "name": item.service.id.name,
        "component": lifecycle.component,
        "runtime": {"kind": runtime.id.kind, "name": runtime.id.name} if runtime else None,
        "pinned": item.pinned,
        "deploymentMode": lifecycle.mode.to_dict(),
        "managed": lifecycle.managed,
        "shape": lifecycle.shape,
        "workers": lifecycle.worker_size,
        "replicas": lifecycle.replicas,
        "lifecycle": {name: r.to_dict() for name, r in lifecycle.fields.items()}
        if lifecycle.managed else None,
    }


def run(args: argparse.Namespace) -> int:
    loaded = load(args.repo, args.operator_values, cache_dir=cache_dir(args))
    items = resolved_components(loaded)
    views = [component_view(item) for item in items]
    if args.output == "json":
        print_json(views)
    elif args.output == "yaml":
        print_yaml(views)
    else:
        print(render_table(views))
    print_errors(loaded.result.errors)
    for warning in loaded.result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0 if loaded.result.ok else 1


def _show(value: Any) -> str:
    if value is None:
        return "<unset>"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def render_table(views: list[dict[str, Any]]) -> str:
    rows = []
    for view in views:
        service, component = view["inferenceService"], view["component"]
        mode = view["deploymentMode"]
        pinned = " (runtime pinned)" if view["pinned"] else ""
        rows.append((service, component, "deploymentMode", mode["value"] + pinned,
                     mode["source"]))
        if not view["managed"]:
            rows.append((service, component, "lifecycle", "not managed (not OMENative)", ""))
            continue
        rows.append((service, component, "shape",
                     view["shape"] + (f" (1 leader + {view['workers']} workers)"
                                      if view["shape"] == "gang" else ""), ""))
        for name, resolved in view["lifecycle"].items():
            source = resolved["source"] if resolved["source"] != DEFAULT else "default"
            if resolved.get("field"):
                source += f" ({resolved['field']})"
            rows.append((service, component, name, _show(resolved["value"]), source))
    return table(("SERVICE", "COMPONENT", "FIELD", "VALUE", "SOURCE"), rows)
