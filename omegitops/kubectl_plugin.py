"""``kubectl ome``: the kubectl plugin the OME documents use (an executable named
``kubectl-ome`` on PATH, which kubectl runs for ``kubectl ome ...``).

``kubectl ome instance list|status`` and ``kubectl ome rollout
pause|resume|promote|status`` are ``omegitops instance`` and ``omegitops rollout``
with kubectl's defaults: the cluster of the kubeconfig's current context
(``--context``, ``--kubeconfig``), that context's namespace, else ``default`` (``-n``),
and kubectl's global flags ``-A``, ``-l`` and ``-o``, before or after the verb.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omegitops.cli import _log_to_stderr, _run, _tolerant_output
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.commands import instance, rollout
from omegitops.commands.common import print_json, print_yaml, table
from omegitops.render.templates import MANAGED
from omegitops.util.errors import UsageError
from omegitops.util.extras import require

PROG = "kubectl ome"
OUTPUTS = ("json", "yaml")

EXAMPLES = {
    "top": """examples:
  # The Instances of an InferenceService's engine, in the current context's namespace
  kubectl ome instance list qwen3-0-6b

  # One Instance: its operation, last failure, pods and warning events
  kubectl ome instance status qwen3-0-6b 0 -n qwen3-native

  # Hold a rollout, let it go on, and follow it to its end
  kubectl ome rollout pause qwen3-0-6b
  kubectl ome rollout resume qwen3-0-6b
  kubectl ome rollout status qwen3-0-6b --timeout 10m
""",
    "instance list": """examples:
  # The engine's Instances of one InferenceService
  kubectl ome instance list qwen3-0-6b -n qwen3-native

  # The decoder's, as JSON
  kubectl ome instance list qwen3-0-6b -c decoder -o json

  # Every component's Instances in every namespace
  kubectl ome instance list -A

  # The components whose InferenceReplica carries a label
  kubectl ome instance list -l team=search
""",
    "instance status": """examples:
  # Instance 0 of the engine
  kubectl ome instance status qwen3-0-6b 0

  # Instance 2 of the decoder in another context, as YAML
  kubectl ome instance status qwen3-0-6b 2 -c decoder --context prod -o yaml
""",
    "rollout pause": """examples:
  # Start no new update of the engine until resumed
  kubectl ome rollout pause qwen3-0-6b -n qwen3-native
""",
    "rollout resume": """examples:
  # Lift a pause made with rollout pause
  kubectl ome rollout resume qwen3-0-6b -n qwen3-native
""",
    "rollout promote": """examples:
  # End the current canary step's pause of the engine
  kubectl ome rollout promote qwen3-0-6b
""",
    "rollout status": """examples:
  # Wait for the engine's rollout to end (exit 0), for at most ten minutes (else exit 1)
  kubectl ome rollout status qwen3-0-6b --timeout 10m

  # One look at the decoder's rollout, as JSON
  kubectl ome rollout status qwen3-0-6b -c decoder --watch=false -o json
""",
}


def build_parser() -> argparse.ArgumentParser:
    parser = _parser(argparse.ArgumentParser, PROG, "top",
                     description="The Instances and rollouts of OME OMENative "
                                 "InferenceServices, on the cluster of the current "
                                 "kubeconfig context.")
    _global_flags(parser, top=True)
    nouns = parser.add_subparsers(dest="noun", metavar="COMMAND", required=True)
    instances = nouns.add_parser("instance", help="list or show the Instances of a component",
                                 epilog=EXAMPLES["instance list"],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = instances.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = _verb(verbs, "instance list", "one line per Instance")
    listing.add_argument("isvc", metavar="NAME", nargs="?",
                         help="the InferenceService (default: every one; with -A, in "
                              "every namespace)")
    _component(listing, default=None)
    listing.set_defaults(func=run_list)
    status = _verb(verbs, "instance status",
                   "one Instance: operation, last failure, pods and warning events")
    status.add_argument("isvc", metavar="NAME", help="the InferenceService")
    status.add_argument("index", type=int, metavar="INDEX", help="the Instance's index")
    _component(status)
    status.set_defaults(func=run_status)
    rollouts = nouns.add_parser("rollout", help="pause, resume, promote or follow a rollout",
                                epilog=EXAMPLES["rollout status"],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = rollouts.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, text, func in (("pause", "start no new update until resumed", run_change),
                             ("resume", "lift a pause made with rollout pause", run_change),
                             ("promote", "end the current canary step's pause", run_change),
                             ("status", "the rollout's progress; waits for its end",
                              run_rollout_status)):
        sub = _verb(verbs, f"rollout {verb}", text)
        sub.add_argument("isvc", metavar="NAME", help="the InferenceService")
        _component(sub)
        if verb in ("pause", "promote"):
            rollout.add_by_arg(sub, "who does it, as the status shows")
        if verb == "status":
            rollout.add_status_args(sub)
        sub.set_defaults(func=func)
    _no_abbreviations(parser)
    return parser


def _parser(make: Any, prog: str, examples: str, **kwargs: Any) -> argparse.ArgumentParser:
    return make(prog, epilog=EXAMPLES[examples],
                formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def _verb(verbs: argparse._SubParsersAction, name: str, text: str) -> argparse.ArgumentParser:
    parser = verbs.add_parser(name.split()[-1], help=text, description=text,
                              epilog=EXAMPLES[name],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_flags(parser, top=False)
    return parser


def _component(parser: argparse.ArgumentParser, default: str | None = "engine") -> None:
    parser.add_argument("-c", "--component", choices=instance.COMPONENTS, default=default,
                        help=f"the component (default: {default or 'every one'})")


def _global_flags(parser: argparse.ArgumentParser, top: bool) -> None:
    """kubectl's global flags, taken before or after the verb: the verb's copies default
    to SUPPRESS, so that a flag given before the verb is not reset by its parser."""
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument("--kubeconfig", default=default(None), metavar="FILE",
                        help="the kubeconfig file (default: $KUBECONFIG, else "
                             "~/.kube/config)")
    parser.add_argument("--context", default=default(None),
                        help="the kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", default=default(None),
                        help="the namespace (default: the context's, else default)")
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        default=default(False), help="list across every namespace")
    parser.add_argument("-l", "--selector", default=default(None), metavar="SELECTOR",
                        help="InferenceReplicas with these labels (key=value,...)")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=default(None),
                        help="json or yaml (default: the table, or lines of progress)")
    parser.add_argument("-v", "--verbose", action="store_true", default=default(False),
                        help="debug logging on stderr")


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """kubectl takes no abbreviated flags (``--name`` is not ``--namespace``)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _no_abbreviations(child)


def _bare_booleans(argv: list[str]) -> list[str]:
    """kubectl's booleans take a value only after ``=``: a bare ``-w`` is true, and the
    word after it (``-w svc``) is not its value."""
    return ["--watch=true" if arg in ("-w", "--watch") else arg for arg in argv]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(_bare_booleans(sys.argv[1:] if argv is None else argv))
    except SystemExit as exit_:  # a usage error (2), or --help (0)
        return exit_.code if isinstance(exit_.code, int) else 2
    _tolerant_output()
    _log_to_stderr(logging.DEBUG if args.verbose else logging.WARNING)
    return _run(args)


# -- where ------------------------------------------------------------------------------


def selector_labels(text: str | None) -> dict[str, str] | None:
    """``-l key=value,key2=value2`` (equality only, what the lists take)."""
    if not text:
        return None
    labels: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        value = value.removeprefix("=")  # key==value
        if not sep or not key.strip() or key.endswith("!") or any(
                c in part for c in "()!") or " in " in part:
            raise UsageError(f"-l {text!r}: only key=value selectors are taken here")
        labels[key.strip()] = value.strip()
    return labels


def namespace_of(args: argparse.Namespace) -> str:
    """``-n``, else the kubeconfig context's namespace, else ``default`` (as kubectl)."""
    if args.namespace:
        return str(args.namespace)
    require("kubernetes", PROG)
    from omegitops.cluster.kube.config import context_namespace

    return context_namespace(args.context, args.kubeconfig)


@contextmanager
def opened(args: argparse.Namespace, namespace: str | None) -> Iterator[Any]:
    """The cluster of the kubeconfig context, without the run's Lease (a job may be
    running); its lists read ``namespace`` alone (None: every one), so that a Role
    there is all a person needs."""
    require("kubernetes", PROG)
    from omegitops.cluster.kube import KubeCluster

    with KubeCluster(args.context, lease=False, kubeconfig=args.kubeconfig) as cluster:
        cluster.list_namespace = namespace
        yield cluster


def _one_object(args: argparse.Namespace, verb: str) -> str:
    """The namespace of a command about one named object, which -A and -l do not fit."""
    if args.all_namespaces:
        raise UsageError(f"{verb}: a rollout or an Instance is named in one namespace; "
                         "-A is for instance list (give -n instead)")
    if args.selector:
        raise UsageError(f"{verb}: -l is for instance list; name the InferenceService")
    return namespace_of(args)


def _no_output(args: argparse.Namespace, verb: str) -> None:
    if args.output:
        raise UsageError(f"{verb} prints a line; -o is for list, status and rollout status")


# -- instance ---------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    labels = selector_labels(args.selector)
    namespace = None if args.all_namespaces else namespace_of(args)
    with opened(args, namespace) as cluster:
        if args.isvc and namespace and labels is None:
            instance.show_list(cluster, namespace, args.isvc, args.component or "engine",
                               args.output or "table")
            return 0
        replicas = [r for r in cluster.list_objects(INFERENCE_REPLICA, labels)
                    if _wanted(r, namespace, args.isvc, args.component)]
        # One LIST of the managed pods for all the components shown.
        pods = cluster.list_pods(MANAGED) if replicas else []
        found = [(r, instance.live_rows(cluster, r, *_where(r), listed=pods))
                 for r in replicas]
    _print_many(found, args.output, across=namespace is None)
    return 0


def _where(replica: dict) -> tuple[str, str, str]:
    spec = replica.get("spec") or {}
    return (replica["metadata"].get("namespace", ""), str(spec.get("inferenceService")),
            str(spec.get("component")))


def _wanted(replica: dict, namespace: str | None, isvc: str | None,
            component: str | None) -> bool:
    where = _where(replica)
    return ((namespace is None or where[0] == namespace) and (not isvc or where[1] == isvc)
            and (not component or where[2] == component))


def _print_many(found: list[tuple[dict, list[dict]]], output: str | None,
                across: bool) -> None:
    """Several components' Instances: one table with the service and component in front
    (and the namespace, across namespaces, as kubectl's -A puts it first)."""
    found = sorted(found, key=lambda f: _where(f[0]))
    if output in OUTPUTS:
        documents = [{"namespace": _where(r)[0], "inferenceService": _where(r)[1],
                      "component": _where(r)[2], **row} for r, rows in found for row in rows]
        (print_json if output == "json" else print_yaml)(documents)
        return
    lines = [(*(_where(r) if across else _where(r)[1:]), *instance.list_cells(row))
             for r, rows in found for row in rows]
    if not lines:
        print("No Instances found." if across else "No Instances found in this namespace.")
        return
    front = ("NAMESPACE", "SERVICE", "COMPONENT") if across else ("SERVICE", "COMPONENT")
    print(table((*front, *instance.LIST_HEADERS), lines))


def run_status(args: argparse.Namespace) -> int:
    namespace = _one_object(args, "instance status")
    with opened(args, namespace) as cluster:
        instance.show_status(cluster, namespace, args.isvc, args.component, args.index,
                             args.output or "table")
    return 0


# -- rollout ----------------------------------------------------------------------------


def run_change(args: argparse.Namespace) -> int:
    """``rollout pause``, ``resume`` or ``promote``, in the context's namespace."""
    what = f"rollout {args.verb}"
    namespace = _one_object(args, what)
    _no_output(args, what)
    with opened(args, namespace) as cluster:
        print(rollout.change(cluster, namespace, args))
    return 0


def run_rollout_status(args: argparse.Namespace) -> int:
    namespace = _one_object(args, "rollout status")
    with opened(args, namespace) as cluster:
        return rollout.follow(cluster, namespace, args.isvc, args.component,
                              watch=args.watch, timeout=args.timeout, output=args.output)


if __name__ == "__main__":  # python -m omegitops.kubectl_plugin: krew's launcher
    sys.exit(main())
