"""A real ``kubectl drain`` of a node that runs a single-pod Instance and a gang, with
omegitops' passes running, on the real control plane and its eviction API.

instances.txt: "migration off a node" acts on whole Instances; "A migration ... starts
the replacement at a new index and then removes the old Instance"; the replacement
starts "at incarnation 1". docs/behaviour.md "Migration off a node": each component's
PodDisruptionBudget refuses the drain's evictions while a migration can still move the
Instance, so the drain retries until omegitops has moved it and deleted the source
pods itself; with ``lifecycle.migrationPolicy.mode: Never`` it lets the drain evict,
``maxUnavailable`` at a time.

omegitops' pods declare no controller (no ownerReference), so kubectl drain needs
``--force`` to take them at all; it still evicts them through the eviction API, which
the budgets answer.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubescenario import KubeScenario

from omegitops.render import pods as P
from tests.fleet import strategy, write_service

SINGLE, GANG = "single-engine", "gang-engine"
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget"
DRAIN_SECONDS = 240
_namespaces = itertools.count()


def drain_command(cp, node: str, seconds: int = DRAIN_SECONDS) -> list[str]:
    """What a platform team runs (the kubectl built beside the control plane)."""
    return [str(cp.kubectl), "--kubeconfig", str(cp.admin_kubeconfig), "drain", node,
            "--ignore-daemonsets", "--delete-emptydir-data", "--force",
            f"--timeout={seconds}s"]


def write_repo(root: Path, namespace: str, lifecycle: dict | None = None) -> Path:
    """A single-pod service and a gang (leader and one worker), one Instance each, each
    on a runtime of its own."""
    write_service(root, name="gang", namespace=namespace, replicas=1, workers=1,
                  lifecycle=lifecycle)
    runtime = yaml.safe_load((root / "runtimes" / "test.yaml").read_text())
    runtime["metadata"]["name"] = "srt-gang"
    (root / "runtimes" / "gang.yaml").write_text(yaml.safe_dump(runtime))
    service_path = root / "services" / "gang.yaml"
    service = yaml.safe_load(service_path.read_text())
    service["spec"]["runtime"]["name"] = "srt-gang"
    service_path.write_text(yaml.safe_dump(service))
    write_service(root, name="single", namespace=namespace, replicas=1, lifecycle=lifecycle)
    return root


def serving(s: KubeScenario, prefix: str) -> int:
    """Instances the routing Service sends to: a single pod's, a gang's leader, Ready,
    in rotation and not going."""
    return sum(1 for p in s.pods(prefix)
               if P.runner_of(p) != "worker" and P.is_ready(p) and P.gate_set(p)
               and not P.has_ended(p) and not P.is_terminating(p))


def nodes_of(s: KubeScenario, prefix: str) -> set[str]:
    return {p["spec"].get("nodeName") for p in s.pods(prefix)}


def indices(s: KubeScenario, name: str) -> dict[int, dict]:
    return {row["index"]: row for row in s.rows(name)}


def settled(s: KubeScenario) -> bool:
    return all(len(rows := s.rows(name)) == 1 and rows[0]["phase"] == "Ready"
               and not rows[0].get("operation") for name in (SINGLE, GANG))


@pytest.fixture
def drained(control_plane, tmp_path):
    """The services brought up on one node (the others cordoned meanwhile), every node
    then open; returns (scenario, that node). Cordons are undone at the end."""
    cp = control_plane
    made: list[KubeScenario] = []

    def bring_up(lifecycle: dict | None = None) -> tuple[KubeScenario, str]:
        namespace = f"cp-drain-{next(_namespaces)}"
        node = "kwok-node-0"
        cp.cordon_all()
        k8s.CoreV1Api(cp.admin).patch_node(node, {"spec": {"unschedulable": None}})
        s = KubeScenario(cp, write_repo(tmp_path / namespace, namespace, lifecycle),
                         {namespace})
        made.append(s)
        s.until(settled, 180)
        assert nodes_of(s, "single-engine-") == {node}
        assert nodes_of(s, "gang-engine-") == {node}
        cp.cordon_all(False)
        s.until(lambda s: not s.results[-1].busy, 60)
        return s, node

    yield bring_up
    cp.cordon_all(False)
    for s in made:
        s.cleanup()


def run_drain(cp, node: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"drain-{node}-{time.monotonic_ns()}.log"
    process = subprocess.Popen(drain_command(cp, node), stdout=out.open("w"),
                               stderr=subprocess.STDOUT, text=True)
    return process, out


def test_a_drain_waits_for_the_migrations_and_nothing_stops_serving(drained, control_plane,
                                                                    tmp_path):
    s, node = drained()
    lowest = {SINGLE: 1, GANG: 1}

    def never_fewer(s):
        for name, prefix in ((SINGLE, "single-engine-"), (GANG, "gang-engine-")):
            count = serving(s, prefix)
            lowest[name] = min(lowest[name], count)
            assert count >= 1, f"{name}: {count} serving, 1 wanted: {s.states()}"
            assert s.status(name)["servingReplicas"] >= 1, s.rows(name)

    s.watches.append(never_fewer)
    drain, log = run_drain(control_plane, node, tmp_path)
    try:
        s.until(lambda s: drain.poll() is not None and settled(s), DRAIN_SECONDS + 60)
    finally:
        if drain.poll() is None:
            drain.kill()
    output = log.read_text()
    assert drain.wait() == 0, output
    assert REFUSED in output, output
    # Moved, not restarted: each Instance's replacement at a new index, incarnation 1,
    # on other nodes, the source gone.
    for name, prefix in ((SINGLE, "single-engine-"), (GANG, "gang-engine-")):
        rows = indices(s, name)
        assert sorted(rows) == [1], rows
        assert rows[1]["incarnation"] == 1, rows
        assert node not in nodes_of(s, prefix), nodes_of(s, prefix)
        assert not s.pods(f"{prefix}0-")
    assert len({p["spec"]["nodeName"] for p in s.pods("gang-engine-1-")}) >= 1
    assert s.events("InstanceMigrated"), [e["reason"] for e in s.events()]
    assert lowest == {SINGLE: 1, GANG: 1}


def test_with_migrations_off_the_drain_evicts_as_the_budget_allows(drained, control_plane,
                                                                    tmp_path):
    """migrationPolicy Never: the budget lets a drain evict maxUnavailable Instances (one
    here), so the drain takes the pods at once, as it would without omegitops; the
    Instances are then restarted elsewhere (no migration, no new index)."""
    lifecycle = {"migrationPolicy": {"mode": "Never"},
                 **strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=1)}
    s, node = drained(lifecycle)
    budget = control_plane.get("policy/v1", "PodDisruptionBudget", s.namespaces.copy().pop(),
                               SINGLE)
    # One Instance of one, in pods: nothing need stay (minAvailable, as pods without a
    # controller need).
    assert budget is not None and budget["spec"].get("minAvailable") == 0, budget
    drain, log = run_drain(control_plane, node, tmp_path)
    started = time.monotonic()
    try:
        assert drain.wait(timeout=120) == 0, log.read_text()
    finally:
        if drain.poll() is None:
            drain.kill()
    assert time.monotonic() - started < 120
    assert not s.events("InstanceMigrating")
    s.until(settled, 180)
    for name, prefix in ((SINGLE, "single-engine-"), (GANG, "gang-engine-")):
        assert sorted(indices(s, name)) == [0]
        assert node not in nodes_of(s, prefix)


def test_an_untolerated_no_execute_taint_evicts_at_once_and_the_instances_restart(
        drained, control_plane):
    """A NoExecute taint the pods do not tolerate: the controller-manager's taint
    eviction deletes them at once, asking no budget, so there is nothing to migrate.
    What is left is a pod lost from under a Ready Instance: the restart policy's
    restart (a single pod at its index, a gang whole), onto the other nodes."""
    s, node = drained()
    s.strict_gangs = False  # the taint manager takes a gang's pods one by one
    core = k8s.CoreV1Api(control_plane.admin)
    taint = {"key": "omegitops.test/maintenance", "value": "true", "effect": "NoExecute"}
    core.patch_node(node, {"spec": {"taints": [taint]}})
    try:
        control_plane.wait_for(lambda: not [p for p in s.pods()
                                            if p["spec"].get("nodeName") == node
                                            and not P.is_terminating(p)],
                               60, "the tainted node's pods deleted")
        s.until(lambda s: settled(s) and not any(
            p["spec"].get("nodeName") == node for p in s.pods()), 180)
    finally:
        core.patch_node(node, {"spec": {"taints": None}})
    for name, prefix in ((SINGLE, "single-engine-"), (GANG, "gang-engine-")):
        rows = indices(s, name)
        assert sorted(rows) == [0], rows  # restarted in place, not moved
        assert rows[0]["incarnation"] >= 2, rows
        assert node not in nodes_of(s, prefix)
