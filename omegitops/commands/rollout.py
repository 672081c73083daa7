"""``omegitops rollout pause|resume|promote``: stop a component's rollout on the
cluster, let it go on (update-strategies.txt "Pause and resume a rollout";
min-ready-seconds.txt: "hold a rollout in progress with the alpha kubectl ome rollout
pause action, and continue it with resume"), and end a canary step's pause.

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
from typing import Any

from omegitops.cluster import DEFAULT_CLUSTER, open_cluster
from omegitops.cluster.errors import Conflict
from omegitops.commands.instance import COMPONENTS, read_replica
from omegitops.lifecycle.canary import PROMOTE_ANNOTATION, promotion, promotion_value
from omegitops.lifecycle.pause import PAUSE_ANNOTATION, annotation_value, cluster_pause
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
    pause.add_argument("--by", default=None,
                       help="who pauses it, as the hold shows (default: the login name)")
    pause.set_defaults(func=run_pause)
    resume = verbs.add_parser("resume", help="lift a pause made with rollout pause")
    _common_args(resume)
    resume.set_defaults(func=run_resume)
    promote = verbs.add_parser("promote", help="end the current canary step's pause")
    _common_args(promote)
    promote.add_argument("--by", default=None,
                         help="who promotes it, as the status shows (default: the login name)")
    promote.set_defaults(func=run_promote)


def _common_args(parser: argparse.ArgumentParser) -> None:
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
    group = status.get("group") if isinstance(status.get("group"), dict) else None
    members = [str(m) for m in (group or {}).get("members") or []] or [component]
    if component not in members:
        members.insert(0, component)
    if group is None:
        return _promote_one(cluster, namespace, isvc, component, by)
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


def run_pause(args: argparse.Namespace) -> int:
    by = args.by or getpass.getuser()
    with open_cluster(args.cluster, exclusive=False) as cluster:
        print(pause(cluster, args.namespace, args.isvc, args.component, by))
    return 0


def run_promote(args: argparse.Namespace) -> int:
    by = args.by or getpass.getuser()
    with open_cluster(args.cluster, exclusive=False) as cluster:
        print(promote(cluster, args.namespace, args.isvc, args.component, by))
    return 0


def run_resume(args: argparse.Namespace) -> int:
    with open_cluster(args.cluster, exclusive=False) as cluster:
        print(resume(cluster, args.namespace, args.isvc, args.component))
    return 0
