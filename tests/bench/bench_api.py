"""API requests per pass against the HTTP double of the Kubernetes API, by fleet size.

    python tests/bench/bench_api.py [--sizes 10,100,1000] [--workdir DIR]

For each size, the converged fleet (reconciled until idle on the simulated
cluster) is copied into ``tests/wire/apiserver.py``'s double: every managed pod
(status included), InferenceReplica, ControllerRevision, Service and
PodDisruptionBudget, and the nodes. Then the
``kube`` backend (``KubeCluster`` on the double's URL, no Lease) runs:

1. one pass on the converged fleet: its LISTs, GETs, discovery requests and
   writes (POST, PUT, PATCH, DELETE) are counted from the double's request log;
   a second identical pass shows what discovery costs once per run;
2. one pass after every runtime's image changes (a rollout starts everywhere):
   its writes are compared with what the plans asked for. Each planned action
   (create/delete pod, set the serving gate, patch images, apply/delete an
   object) is one write, an event is one write (after a GET for its
   aggregate), an InferenceReplica written is two (its status subresource,
   then the object), and clearing its event outbox once the events are sent
   is one more. The SelfSubjectAccessReviews a run makes before its first
   write are questions, counted apart.

The whole thing is repeated with the PodGroup CRD installed, which adds its
LIST. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import benchlib
from apiserver import ApiServerDouble

from omegitops.app.passes import MANAGED, run_pass
from omegitops.cluster.base import (
    CONTROLLER_REVISION,
    INFERENCE_REPLICA,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    SERVICE,
)
from omegitops.cluster.kube import KubeCluster, plain_client
from omegitops.cluster.kube.access import REVIEW_PATH
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components

WRITE_VERBS = ("create", "update", "patch", "delete")
COPIED_KINDS = (POD, INFERENCE_REPLICA, CONTROLLER_REVISION, SERVICE, POD_DISRUPTION_BUDGET)
LIST_TARGET = 3


def _seed(api: ApiServerDouble, cluster_path: Path, keep_versions: bool = False) -> int:
    """Copy the converged simulated cluster's managed objects into the double; with
    ``keep_versions``, under their own resourceVersions, so that the converged
    fingerprints (lifecycle/converged.py) still match and no pass need settle first."""
    copied = 0
    with SimCluster(cluster_path) as cluster:
        # The nodes too: a pass reads them (migrations), and the pods name them.
        for node in cluster.list_objects(NODE):
            api.add(node, keep_version=keep_versions)
        for kind in COPIED_KINDS:
            for obj in cluster.list_objects(kind, MANAGED):
                if not keep_versions:
                    obj["metadata"].pop("resourceVersion", None)
                api.add(obj, keep_version=keep_versions)
                copied += 1
    return copied


def _count(api: ApiServerDouble) -> dict:
    requests = list(api.requests)
    # A SelfSubjectAccessReview is a question, not a write: the run's permission check.
    reviews = [r for r in requests if r.path == REVIEW_PATH]
    by_verb: dict[str, int] = {}
    for request in requests:
        if request.path != REVIEW_PATH:
            by_verb[request.verb] = by_verb.get(request.verb, 0) + 1
    pages = [r for r in requests if r.verb == "list"]
    return {
        "requests": len(requests),
        "access_reviews": len(reviews),
        # A LIST read in pages is one LIST: its later pages carry the continue token.
        "lists": sum(1 for r in pages if not r.query.get("continue")),
        "list_pages": len(pages),
        "gets": by_verb.get("get", 0),
        "discovery": by_verb.get("discovery", 0),
        "writes": sum(by_verb.get(verb, 0) for verb in WRITE_VERBS),
        "list_paths": sorted({r.path for r in pages}),
    }


def _expected_writes(result) -> int:
    """Two per InferenceReplica written (status, object), one per action and event, and
    one to clear an outbox once its events are sent."""
    return sum(len(plan.actions) + len(plan.events) + (2 if plan.replica_changed else 0)
               + plan.clear_outbox for _, plan in result.plans)


def _rollout_repo(root: Path, into: Path) -> Path:
    """A copy of the fleet's repository with every runtime's image moved to v2."""
    shutil.copytree(root, into)
    for path in (into / "runtimes").rglob("*.yaml"):
        path.write_text(path.read_text().replace("sglang:v1", "sglang:v2"))
    return into


def settle(kube: KubeCluster, items) -> None:
    """The copied objects have the double's resourceVersions, not those the converged
    fingerprints recorded (lifecycle/converged.py): the first pass records them again,
    and changes nothing else."""
    result = run_pass(kube, items)
    if result.errors or not all(plan.is_noop for _, plan in result.plans):
        raise RuntimeError("the copied fleet was not at rest on the double")


def measure(workdir: Path, services: int, podgroups: bool) -> dict:
    root, cluster_path, counts = benchlib.converged_fleet(workdir, services)
    with ApiServerDouble(podgroups=podgroups, log_size=10_000_000) as api:
        _seed(api, cluster_path)
        client = plain_client(api.url)
        try:
            kube = KubeCluster(api_client=client, lease=False)
            items = resolved_components(load(root))
            settle(kube, items)
            api.clear_log()
            first = run_pass(kube, items)
            converged = _count(api)
            api.clear_log()
            run_pass(kube, items)
            again = _count(api)
            with tempfile.TemporaryDirectory() as scratch:
                changed = resolved_components(load(_rollout_repo(root, Path(scratch) / "r")))
            api.clear_log()
            rollout = run_pass(kube, changed)
            moving = _count(api)
        finally:
            client.close()
    expected = _expected_writes(rollout)
    return {
        "services": counts["services"], "pods": counts["pods"],
        "converged_pass": {k: converged[k] for k in ("requests", "lists", "list_pages", "gets",
                                                      "discovery", "writes")},
        "converged_pass_planned_writes": first.applied,
        "list_paths": converged["list_paths"],
        "next_pass_requests": again["requests"],
        "rollout_pass": {"requests": moving["requests"], "lists": moving["lists"],
                         "gets": moving["gets"], "writes": moving["writes"],
                         "planned_writes": rollout.applied,
                         "expected_writes": expected,
                         "errors": len(rollout.errors)},
        "writes_equal_actions": moving["writes"] == expected == rollout.applied,
    }


def bench(workdir: Path, sizes: list[int]) -> dict:
    runs = {size: measure(workdir, size, podgroups=False) for size in sizes}
    with_groups = {size: measure(workdir, size, podgroups=True) for size in sizes}
    return {
        "benchmark": "api_requests_per_pass",
        "lists_per_pass": {str(s): r["converged_pass"]["lists"] for s, r in runs.items()},
        "list_pages_per_pass": {str(s): r["converged_pass"]["list_pages"]
                                for s, r in runs.items()},
        "lists_per_pass_with_podgroup_crd": {
            str(s): r["converged_pass"]["lists"] for s, r in with_groups.items()},
        "list_target": LIST_TARGET,
        "writes_when_converged": {str(s): r["converged_pass"]["writes"] for s, r in runs.items()},
        "writes_equal_actions": all(r["writes_equal_actions"]
                                    for r in [*runs.values(), *with_groups.values()]),
        "by_size": {str(s): r for s, r in runs.items()},
        "by_size_with_podgroup_crd": {str(s): r for s, r in with_groups.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--workdir", default=None, help="keep converged fleets here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        benchlib.emit(bench(Path(args.workdir or scratch), sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
