"""``omegitops sim``: create, advance, break and show the simulated cluster (``sim:PATH``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from omegitops.cluster import DEFAULT_CLUSTER, sim_path
from omegitops.cluster.sim import FaultKind, SimCluster
from omegitops.commands.common import STRUCTURED, print_structured, seconds, table
from omegitops.util.errors import ClusterError, UsageError
from omegitops.util.times import format_time, parse_time


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sim", help="drive the simulated cluster (sim:PATH)")
    verbs = parser.add_subparsers(dest="sim_command", metavar="VERB", required=True)

    init = verbs.add_parser("init", help="create a fresh simulated cluster")
    _cluster_arg(init)
    init.add_argument("--nodes", type=int, default=8, help="number of nodes (default: 8)")
    init.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default: 8)")
    init.add_argument("--cpu-nodes", type=int, default=2,
                      help="untainted nodes without GPUs, added after the GPU nodes (default: 2)")
    init.add_argument("--podgroup-crd", action="store_true",
                      help="serve the scheduler-plugins PodGroup kind")
    init.add_argument("--force", action="store_true", help="replace an existing cluster file")
    init.set_defaults(func=run_init)

    advance = verbs.add_parser("advance", help="move the simulated clock forward")
    _cluster_arg(advance)
    how = advance.add_mutually_exclusive_group(required=True)
    how.add_argument("--seconds", type=seconds, help="seconds to let pass")
    how.add_argument("--next", action="store_true", help="jump to the next transition")
    advance.set_defaults(func=run_advance)

    fault = verbs.add_parser("fault", help="inject (or --clear) a fault")
    _cluster_arg(fault)
    fault.add_argument("--kind", required=True, choices=[k.value for k in FaultKind],
                       help="node-down: the node stops reporting; its pods, deleted by the "
                            "taint manager after 340 s, stay Terminating until it reports "
                            "again (--clear) or is removed. node-removed: the node's Node "
                            "object is deleted; PodGC removes its pods 40 s later. cordon: "
                            "the node is cordoned; taint: it gets a NoExecute maintenance "
                            "taint (omegitops migrates the Instances off it). drain: kubectl "
                            "drain, evicting through the disruption budgets")
    fault.add_argument("--pod", help="pod name")
    fault.add_argument("-n", "--namespace", help="the pod's namespace (default: any, if unique)")
    fault.add_argument("--image", help="imagepull: make this image unpullable everywhere")
    fault.add_argument("--node", help="node-down, node-removed, cordon, taint, drain: the node "
                                      "(default: the --pod's node)")
    fault.add_argument("--clear", action="store_true", help="remove a persistent fault")
    fault.set_defaults(func=run_fault)

    show = verbs.add_parser("show", help="list the simulated cluster's pods")
    _cluster_arg(show)
    show.add_argument("-o", "--output", choices=["table", *STRUCTURED], default="table")
    show.set_defaults(func=run_show)


def _cluster_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER,
                        help=f"simulated cluster, sim:PATH (default: {DEFAULT_CLUSTER})")


def run_init(args: argparse.Namespace) -> int:
    path = Path(sim_path(args.cluster))
    if path.exists() and not args.force:
        raise ClusterError(f"{path} exists already; use --force to replace it")
    if args.nodes < 1 or args.gpus_per_node < 0:
        raise UsageError("--nodes must be at least 1 and --gpus-per-node at least 0")
    SimCluster.init(path, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                    cpu_nodes=args.cpu_nodes,
                    podgroups=args.podgroup_crd)
    print(f"{path}: {args.nodes} nodes with {args.gpus_per_node} GPUs each")
    return 0


def run_advance(args: argparse.Namespace) -> int:
    with SimCluster(sim_path(args.cluster)) as cluster:
        if args.next:
            when = cluster.next_transition_at()
            seconds = 0.0 if when is None else (when - cluster.now()).total_seconds()
        else:
            if args.seconds < 0:
                raise UsageError("--seconds must not be negative")
            seconds = args.seconds
        now = cluster.advance(seconds)
    print(format_time(now.timestamp()))
    return 0


def run_fault(args: argparse.Namespace) -> int:
    with SimCluster(sim_path(args.cluster)) as cluster:
        print(cluster.inject_fault(args.kind, pod=args.pod, namespace=args.namespace,
                                   image=args.image, node=args.node, clear=args.clear))
    return 0


def run_show(args: argparse.Namespace) -> int:
    with SimCluster(sim_path(args.cluster)) as cluster:
        now = cluster.now()
        pods = sorted(cluster.list_pods(), key=lambda p: (p["metadata"]["namespace"],
                                                           p["metadata"]["name"]))
    if args.output in STRUCTURED:
        print_structured({"now": format_time(now.timestamp()), "pods": pods}, args.output)
        return 0
    print(table(["namespace", "name", "node", "phase", "status", "ready", "restarts", "age"],
                [_row(pod, now.timestamp()) for pod in pods]))
    return 0


def _row(pod: dict, now: float) -> list:
    status = pod.get("status", {})
    containers = status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready"))
    gate = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "")
    return [
        pod["metadata"]["namespace"],
        pod["metadata"]["name"],
        pod["spec"].get("nodeName", "<none>"),
        status.get("phase", ""),
        _display_status(pod),
        f"{ready}/{len(pod['spec']['containers'])}" + (" (Ready)" if gate == "True" else ""),
        sum(c.get("restartCount", 0) for c in containers),
        _age(now - parse_time(pod["metadata"]["creationTimestamp"])),
    ]


def _display_status(pod: dict) -> str:
    """kubectl's STATUS column: Terminating, a waiting reason, or the phase."""
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status", {})
    if status.get("reason"):
        return status["reason"]
    for container in status.get("containerStatuses") or []:
        waiting = container.get("state", {}).get("waiting")
        if waiting and waiting.get("reason"):
            return waiting["reason"]
    return status.get("phase", "")


def _age(seconds: float) -> str:
    """kubectl's short ages: 45s, 3m20s, 2h5m, 3d."""
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60}s" if seconds < 600 else f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 86400}d"
