"""``omegitops rollout pause|resume|promote|status``: stop a component's rollout on the
cluster, let it go on (update-strategies.txt "Pause and resume a rollout";
min-ready-seconds.txt: "hold a rollout in progress with the alpha kubectl ome rollout
pause action, and continue it with resume"), end a canary step's pause, and follow
the rollout to its end as ``kubectl rollout status`` follows a Deployment's.

``promote`` records the canary step it ends (the target revision and the step number the
InferenceReplica's ``status.canary`` shows) in the ``ome.io/rollout-promote``
annotation, which the next pass honours (lifecycle/canary.py): a promotion names its
step, so it never ends a later one, and nothing has to remove it.

An emergency action that needs no commit: ``pause`` records who and since when in the
InferenceReplica's ``ome.io/rollout-paused`` annotation, which the next pass honours
(lifecycle/pause.py); ``resume`` removes it. A pause declared in Git
(``lifecycle.paused: true``, ``spec.rollout.paused: true``) is the repository's, and only a commit lifts it: resume
says so when one is still in force.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.errors import Conflict
from omegitops.commands.common import print_json, print_yaml
from omegitops.commands.instance import COMPONENTS, read_replica
from omegitops.lifecycle.canary import PROMOTE_ANNOTATION, promotion, promotion_value
from omegitops.lifecycle.pause import PAUSE_ANNOTATION, annotation_value, cluster_pause
from omegitops.model.durations import DurationError, parse_duration
from omegitops.util.errors import OmegitopsError
from omegitops.util.times import format_time

# A pass may write the InferenceReplica between our read and our write: read again.
ATTEMPTS = 5


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rollout",
                                   help="pause, resume or promote a component's rollout")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    pause = verbs.add_parser("pause", help="start no new update until resumed")
    _common_args(pause)
    add_by_arg(pause, "who pauses it, as the hold shows")
    pause.set_defaults(func=run_change)
    resume = verbs.add_parser("resume", help="lift a pause made with rollout pause")
    _common_args(resume)
    resume.set_defaults(func=run_change)
    promote = verbs.add_parser("promote", help="end the current canary step's pause")
    _common_args(promote)
    add_by_arg(promote, "who promotes it, as the status shows")
    promote.set_defaults(func=run_change)
    status = verbs.add_parser("status", help="the rollout's progress; waits for its end")
    _common_args(status)
    add_status_args(status)
    status.add_argument("-o", "--output", choices=["json", "yaml"], default=None,
                        help="the last look as a document (default: lines of progress)")
    status.set_defaults(func=run_status)


def add_by_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--by", default=None, help=f"{what} (default: the login name)")


def who(args: argparse.Namespace) -> str:
    """``--by``, else the login name."""
    return str(args.by or getpass.getuser())


def add_status_args(parser: argparse.ArgumentParser) -> None:
    """``rollout status``'s own options, as ``kubectl rollout status`` has them."""
    parser.add_argument("-w", "--watch", type=flag, nargs="?", const=True, default=True,
                        metavar="BOOL",
                        help="wait for the rollout to end (default true); --watch=false "
                             "prints the progress once and exits 0")
    parser.add_argument("--timeout", type=timeout, default=0.0, metavar="DURATION",
                        help="how long to wait (90s, 5m; default 0: for ever); past it, "
                             "exit 1")


def flag(text: str) -> bool:
    """An argparse type: kubectl's booleans (``--watch=false``)."""
    value = text.strip().lower()
    if value in ("true", "t", "1", "yes"):
        return True
    if value in ("false", "f", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def timeout(text: str) -> float:
    """An argparse type: a Go duration (``5m``), or a bare number of seconds."""
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text)
    except DurationError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a timeout is not negative")
    return seconds


def _common_args(parser: argparse.ArgumentParser) -> None:
    """The component's options; ``omegitops`` needs the namespace, ``kubectl ome``
    takes its context's."""
    parser.add_argument("isvc", metavar="NAME", help="the InferenceService")
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("-c", "--component", choices=COMPONENTS, default="engine")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)


def pause(cluster: Any, namespace: str, isvc: str, component: str, by: str) -> str:
    """Record the pause on the InferenceReplica; what to print. A pause already there
    is kept as it is (its since stays the first one's)."""
    def change(annotations: dict[str, str], _status: dict[str, Any]) -> str | None:
        found = cluster_pause(annotations)
        if found is not None:
            return f"already paused by {found.by} since {found.since or '-'}"
        annotations[PAUSE_ANNOTATION] = annotation_value(by, format_time(cluster.now().timestamp()))
        return None

    kept = _annotate(cluster, namespace, isvc, component, change)
    name = f"{isvc} ({component}) in {namespace}"
    return f"rollout of {name} {kept}" if kept else (
        f"rollout of {name} paused by {by}: no update starts from the next pass")


def resume(cluster: Any, namespace: str, isvc: str, component: str) -> str:
    """Remove the pause the cluster records; what to print."""
    def change(annotations: dict[str, str], _status: dict[str, Any]) -> str | None:
        if PAUSE_ANNOTATION not in annotations:
            return "was not paused on the cluster"
        del annotations[PAUSE_ANNOTATION]
        return None

    kept = _annotate(cluster, namespace, isvc, component, change)
    replica = read_replica(cluster, namespace, isvc, component)
    name = f"{isvc} ({component}) in {namespace}"
    text = f"rollout of {name} {kept}" if kept else f"rollout of {name} resumed"
    hold = (replica.get("status") or {}).get("rolloutHold") or {}
    if "Git:" in str(hold.get("by") or ""):
        text += (f"; still paused in Git ({hold['by']}): a commit that removes it "
                 "resumes the rollout")
    return text


def promote(cluster: Any, namespace: str, isvc: str, component: str, by: str) -> str:
    """Record the promotion of the canary's current step; what to print. A member of a
    rollout group promotes the group: every member its InferenceReplica's
    ``status.group`` names, each at its own step (they take the steps together)."""
    status = read_replica(cluster, namespace, isvc, component).get("status") or {}
    group = status.get("group")
    if not isinstance(group, dict):
        return _promote_one(cluster, namespace, isvc, component, by)
    members = [str(m) for m in group.get("members") or []]
    if component not in members:
        members.insert(0, component)
    said = []
    for member in members:
        try:
            said.append(_promote_one(cluster, namespace, isvc, member, by))
        except OmegitopsError:
            # A member with nothing left to move has no step: the others go on.
            said.append(f"{isvc} ({member}) in {namespace}: no canary step waits")
    return "\n".join([f"rollout group {group.get('name')}: every member takes the step",
                      *said])


def _promote_one(cluster: Any, namespace: str, isvc: str, component: str, by: str) -> str:
    name = f"{isvc} ({component}) in {namespace}"
    step: dict[str, Any] = {}

    def change(annotations: dict[str, str], status: dict[str, Any]) -> str | None:
        canary = status.get("canary")
        if not isinstance(canary, dict) or canary.get("done"):
            raise OmegitopsError(f"no canary step of {name} to promote")
        step.update(canary)
        found = promotion(annotations)
        if found and (found.get("target"), found.get("step")) == (
                canary.get("target"), canary.get("step")):
            return f"already promoted by {found.get('by')}"
        annotations[PROMOTE_ANNOTATION] = promotion_value(
            by, format_time(cluster.now().timestamp()), str(canary["target"]),
            int(canary["step"]))
        return None

    kept = _annotate(cluster, namespace, isvc, component, change)
    where = f"canary step {step.get('step')}/{step.get('steps')} of {name}"
    return f"{where} {kept}" if kept else (
        f"{where} promoted by {by}: the next pass goes on to the next step")


def _annotate(cluster: Any, namespace: str, isvc: str, component: str,
              change: Any) -> str | None:
    """Apply ``change`` to the InferenceReplica's annotations (given its status too) and
    write it, read again on a conflict; ``change`` returns why nothing is to be written,
    or None."""
    for _ in range(ATTEMPTS):
        replica = read_replica(cluster, namespace, isvc, component)
        metadata = replica.setdefault("metadata", {})
        annotations = dict(metadata.get("annotations") or {})
        kept = change(annotations, replica.get("status") or {})
        if kept is not None:
            return kept
        metadata["annotations"] = annotations
        try:
            cluster.replace_object(replica)
        except Conflict:
            continue
        return None
    raise OmegitopsError(f"InferenceReplica {namespace}/{isvc}-{component} kept changing; "
                         "try again")


def change(cluster: Any, namespace: str, args: argparse.Namespace) -> str:
    """What ``rollout pause``, ``resume`` or ``promote`` (``args.verb``) writes on the
    InferenceReplica; what to print. ``kubectl ome rollout`` runs the same."""
    if args.verb == "pause":
        return pause(cluster, namespace, args.isvc, args.component, who(args))
    if args.verb == "resume":
        return resume(cluster, namespace, args.isvc, args.component)
    return promote(cluster, namespace, args.isvc, args.component, who(args))


def run_change(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        print(change(cluster, args.namespace, args))
    return 0


def run_status(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        # Nothing moves on sim: between two passes: one look is all there is.
        watch = args.watch and cluster.poll_seconds is not None
        return follow(cluster, args.namespace, args.isvc, args.component, watch=watch,
                      timeout=args.timeout, output=getattr(args, "output", None))


# -- status -------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """A rollout's counts as the InferenceReplica's status has them, and what holds it."""

    name: str  # "svc (engine) in demo"
    observed: bool  # the status is about the spec as it is now
    desired: int
    current: int
    updated: int
    ready: int
    available: int
    hold: dict[str, Any] | None

    @property
    def done(self) -> bool:
        return (self.observed and self.updated >= self.desired
                and self.current <= self.updated and self.available >= self.desired)

    def line(self) -> str:
        """One line, as ``kubectl rollout status`` words a Deployment's."""
        waiting = f"Waiting for rollout of {self.name} to finish: "
        if not self.observed:
            return f"Waiting for the rollout of {self.name} to be observed by the next pass..."
        if self.updated < self.desired:
            return (f"{waiting}{self.updated} out of {self.desired} new Instances have "
                    "been updated...")
        if self.current > self.updated:
            return (f"{waiting}{self.current - self.updated} old Instances are pending "
                    "termination...")
        if self.available < self.desired:
            return (f"{waiting}{self.available} of {self.updated} updated Instances are "
                    "available...")
        return f"rollout of {self.name} successfully rolled out"

    def hold_line(self) -> str | None:
        """What holds the rollout, and what ends it (``status.rolloutHold``)."""
        if not self.hold:
            return None
        by = f" by {self.hold['by']}" if self.hold.get("by") else ""
        since = f" since {self.hold['since']}" if self.hold.get("since") else ""
        return f"  held ({self.hold.get('gate')}{by}{since}): {self.hold.get('reason')}"

    def document(self) -> dict[str, Any]:
        """``-o json|yaml``."""
        return {"name": self.name, "observed": self.observed, "desired": self.desired,
                "current": self.current, "updated": self.updated, "ready": self.ready,
                "available": self.available, "rolloutHold": self.hold, "done": self.done}


def progress(replica: dict, name: str) -> Progress:
    """The rollout of one InferenceReplica, from its spec and its status."""
    meta = replica.get("metadata") or {}
    spec = replica.get("spec") or {}
    status = replica.get("status") or {}
    generation = meta.get("generation")
    observed = status.get("observedGeneration")
    revision = spec.get("revision")
    seen = (generation is None or observed is None or observed >= generation) and (
        not revision or not status.get("updateRevision")
        or status["updateRevision"] == revision)
    hold = status.get("rolloutHold")
    return Progress(name=name, observed=bool(status) and seen,
                    desired=int(spec.get("replicas") or 0),
                    current=int(status.get("replicas") or 0),
                    updated=int(status.get("updatedReplicas") or 0),
                    ready=int(status.get("readyReplicas") or 0),
                    available=int(status.get("availableReplicas") or 0),
                    hold=hold if isinstance(hold, dict) else None)


def follow(cluster: Any, namespace: str, isvc: str, component: str, *, watch: bool,
           timeout: float, output: str | None = None, interval: float = 1.0,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> int:
    """Print the rollout's progress, each new line once, until it is done (exit 0), or
    once without ``watch`` (exit 0 too, as kubectl's --watch=false), or until
    ``timeout`` seconds (0: none) have passed (exit 1)."""
    deadline = clock() + timeout if timeout else None
    name = f"{isvc} ({component}) in {namespace}"
    said: list[str] = []
    while True:
        found = progress(read_replica(cluster, namespace, isvc, component), name)
        if output is None:
            for line in (found.line(), found.hold_line()):
                if line and line not in said[-2:]:
                    print(line, flush=True)
                    said.append(line)
        if found.done or not watch:
            break
        if deadline is not None and clock() >= deadline:
            _print_document(found, output)
            print("error: timed out waiting for the rollout of "
                  f"{name} to finish", file=sys.stderr)
            return 1
        sleep(interval if deadline is None else max(0.0, min(interval, deadline - clock())))
    _print_document(found, output)
    return 0


def _print_document(found: Progress, output: str | None) -> None:
    if output == "json":
        print_json(found.document())
    elif output == "yaml":
        print_yaml(found.document())
