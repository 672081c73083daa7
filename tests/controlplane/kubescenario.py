"""Drive omegitops on the real control plane pass by pass, on the wall clock.

Each pass runs as the scheduled job does: ``run_pass`` through a ``KubeCluster``
that holds the ``omegitops`` ServiceAccount's token, so every request meets the
real API server's authentication, RBAC, admission and validation. After every
pass the invariants of ``tests/scenario.py`` are checked on what the API server
holds (read with the admin credentials, limited to the test's namespaces), and
each Instance's (phase, operation type, step) is recorded, so a test can
compare the sequence with the same scenario on ``sim:``.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from kubernetes import config as k8s_config

from omegitops.app.passes import MANAGED, PassResult, run_pass
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.kube import KubeCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.model.replica import decode_rows
from tests.scenario import KillAfter, check_invariants, most_wanted


class NamespaceView:
    """A cluster seen through a few namespaces only (the tests share one cluster)."""

    def __init__(self, cluster, namespaces: set[str]):
        self._cluster = cluster
        self.namespaces = namespaces

    def _mine(self, objects: list[dict]) -> list[dict]:
        return [o for o in objects if o["metadata"].get("namespace") in self.namespaces]

    def list_pods(self, labels=None):
        return self._mine(self._cluster.list_pods(labels))

    def list_objects(self, kind, labels=None, fields=None, transform=None):
        return self._mine(self._cluster.list_objects(kind, labels, fields, transform))

    def __getattr__(self, name):
        return getattr(self._cluster, name)


def instance_states(replicas: list[dict]) -> dict[tuple[str, int], tuple]:
    """``{(replica name, index): (phase, operation type, step)}`` of every row."""
    states = {}
    for replica in replicas:
        for row in decode_rows((replica.get("status") or {}).get("instances")):
            operation = row.get("operation") or {}
            states[(replica["metadata"]["name"], row["index"])] = (
                row.get("phase"), operation.get("type"), operation.get("step"))
    return states


class History:
    """Each Instance's states in the order they were seen, repeats collapsed."""

    def __init__(self) -> None:
        self.by_instance: dict[tuple[str, int], list[tuple]] = {}

    def record(self, replicas: list[dict]) -> None:
        for key, state in instance_states(replicas).items():
            seen = self.by_instance.setdefault(key, [])
            if not seen or seen[-1] != state:
                seen.append(state)


class KubeScenario:
    def __init__(self, cp, repo: Path, namespaces: set[str]):
        self.cp = cp
        self.repo = repo
        self.namespaces = namespaces
        self.max_rows: Counter = Counter()
        self.history = History()
        self.passes = 0
        self.strict_gangs = True
        self.results: list[PassResult] = []
        # Checks a test adds, run after every pass like the invariants.
        self.watches: list = []
        # Ready rows short of pods after the last pass: kwok acts between a pass and
        # the check, so a row is wrong only once the next pass leaves it so.
        self.short_rows: dict = {}
        self.removed_nodes: list[str] = []
        for namespace in namespaces:
            cp.create_namespace(namespace, wait=True)
        self.job = KubeCluster(api_client=k8s_config.new_client_from_config(
            str(cp.job_kubeconfig)), lease=False)
        self.admin = NamespaceView(KubeCluster(api_client=cp.admin, lease=False), namespaces)

    def close(self) -> None:
        self.job.api_client.close()

    def items(self):
        loaded = load(self.repo)
        assert loaded.result.ok, loaded.result.errors
        return resolved_components(loaded)

    def run_pass(self, kill_after: int | None = None) -> PassResult:
        """One pass as the job; ``kill_after`` kills it after that many writes, as
        ``Scenario.run_pass`` does on sim:."""
        items = self.items()
        for item in items:
            key = (item.service.id.name, item.lifecycle.component)
            self.max_rows[key] = max(self.max_rows[key], most_wanted(item.lifecycle))
        target = self.job if kill_after is None else KillAfter(self.job, kill_after)
        result = run_pass(target, items)
        self.passes += 1
        self.results.append(result)
        assert kill_after is not None or not result.errors, result.errors
        check_invariants(self.admin, self.max_rows, items, short=self.short_rows,
                         whole=self.strict_gangs and kill_after is None)
        self.history.record(self.admin.list_objects(INFERENCE_REPLICA, MANAGED))
        for watch in self.watches:
            watch(self)
        return result

    def until(self, predicate, seconds: float = 120, gap: float = 0.5) -> PassResult:
        """Passes until ``predicate(self)`` holds after one; a pass that wrote is followed
        at once by the next, one that did not after ``gap`` seconds."""
        deadline = time.monotonic() + seconds
        while True:
            result = self.run_pass()
            if predicate(self):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached in {seconds} s "
                                     f"({self.passes} passes): {self.states()}")
            if not result.applied:
                time.sleep(gap)

    def until_idle(self, seconds: float = 120) -> PassResult:
        return self.until(lambda s: not s.results[-1].busy, seconds)

    def fault(self, kind: str, pod: str | None = None, clear: bool = False) -> None:
        """The faults of ``Scenario.fault``: a pod's (``kwok-stages.yaml``), every node
        cordoned (``unschedulable``), or the pod's node no longer reporting (``node-down``)."""
        self.strict_gangs = False
        if kind == "unschedulable":
            self.cp.cordon_all(not clear)
            return
        [found] = [p for p in self.admin.list_pods() if p["metadata"]["name"] == pod]
        if kind == "node-down":
            self.cp.stop_node(found["spec"]["nodeName"])
            return
        if kind == "node-removed":
            # As a cloud provider's node controller does once the machine is gone; the
            # test bed gets a fresh node of that name back when the test ends.
            node = found["spec"]["nodeName"]
            self.cp.delete("v1", "Node", None, node)
            self.removed_nodes.append(node)
            return
        self.cp.set_fault(found["metadata"]["namespace"], pod, None if clear else kind)

    def status(self, name: str) -> dict:
        return self.replica(name)["status"]

    # -- reading ------------------------------------------------------------------------

    def replica(self, name: str) -> dict:
        for replica in self.admin.list_objects(INFERENCE_REPLICA):
            if replica["metadata"]["name"] == name:
                return replica
        raise KeyError(name)

    def rows(self, name: str) -> list[dict]:
        return decode_rows(self.replica(name)["status"].get("instances"))

    def states(self) -> dict:
        return instance_states(self.admin.list_objects(INFERENCE_REPLICA, MANAGED))

    def pods(self, prefix: str = "") -> list[dict]:
        return sorted((p for p in self.admin.list_pods()
                       if p["metadata"]["name"].startswith(prefix)),
                      key=lambda p: p["metadata"]["name"])

    def events(self, reason: str | None = None) -> list[dict]:
        events = [e for ns in self.namespaces
                  for e in self.cp.list("v1", "Event", ns)]
        return [e for e in events if reason is None or e.get("reason") == reason]

    def cleanup(self) -> None:
        self.close()
        for node in self.removed_nodes:
            self.cp.add_node(node)
        for namespace in self.namespaces:
            self.cp.delete("v1", "Namespace", None, namespace)
