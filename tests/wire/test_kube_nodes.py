"""Nodes on the kube backend: listed (and watched) so that Instances migrate off the
nodes being drained, with a PodDisruptionBudget per component that holds the drain
back; an account that may not list nodes runs on without either, warned once.

(The real ``kubectl drain`` against the real API server: tests/controlplane/test_drain.py.)
"""

from __future__ import annotations

import logging

from wire_helpers import NS, make_pod, make_replica

from omegitops.app.incremental import watch_nodes
from omegitops.app.passes import MANAGED, NodeKey, components_on, node_key, observe

LABELS = {**MANAGED, "ome.io/inferenceservice": "llama", "ome.io/component": "engine"}
NODES = r"^/api/v1/nodes$"
BUDGETS = "/apis/policy/v1/poddisruptionbudgets"


def _node(name: str, unschedulable: bool = False) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable} if unschedulable else {}}


def _refused_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "cannot list nodes" in r.getMessage()]


def test_a_pass_reads_the_nodes_and_the_components_budgets(kube, api):
    api.add(_node("gpu-1", unschedulable=True))
    api.add(_node("gpu-2"))
    api.add(make_replica("llama-engine", labels=LABELS))
    api.add(make_pod("llama-engine-0-default-0", labels=LABELS, nodeName="gpu-1"))
    api.add({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "llama-engine", "namespace": NS, "labels": LABELS},
             "spec": {"maxUnavailable": 0}})
    seen = observe(kube)
    assert sorted(seen.nodes or {}) == ["gpu-1", "gpu-2"]
    assert seen.open_nodes == {"gpu-2"}
    component = seen.component(NS, "llama", "engine")
    assert list(component.budgets or {}) == ["llama-engine"]
    assert set(component.nodes or {}) == {"gpu-1", ""}
    assert components_on(seen, {"gpu-1"}) == {("demo", "llama", "engine")}
    assert components_on(seen, {"gpu-2"}) == set()
    assert node_key(_node("gpu-1")) == NodeKey("gpu-1")
    assert any("create policy/poddisruptionbudgets" in p.describe()
               for p in _needed(kube))


def _needed(kube):
    from omegitops.cluster.kube.access import run_permissions
    return run_permissions(prune=False, podgroups=False, inference_services=False,
                           budgets=kube.lists_nodes)


def test_an_account_that_may_not_list_nodes_runs_without_migrations_warned_once(
        kube, api, caplog):
    caplog.set_level(logging.WARNING)
    api.deny("list", "nodes")
    api.fail("GET", NODES, status=403, times=10)
    api.add(make_replica("llama-engine", labels=LABELS))
    seen = observe(kube)
    assert seen.nodes is None and seen.budgets is None
    assert seen.component(NS, "llama", "engine").budgets is None
    # No budget is read (or later kept): one that waits for a migration that never
    # comes would hold a drain back for ever.
    assert not api.calls("list", BUDGETS)
    observe(kube)
    assert len(api.calls("list", NODES)) == 1
    assert not api.calls("list", BUDGETS)
    assert len(_refused_warnings(caplog)) == 1
    assert not any("poddisruptionbudgets" in p.describe() for p in _needed(kube))


def test_a_run_that_may_not_list_nodes_watches_the_rest(kube, api, caplog):
    caplog.set_level(logging.WARNING)
    api.deny("list", "nodes")
    api.fail("GET", NODES, status=403, times=10)
    assert watch_nodes(kube) is True
    assert kube.lists_nodes is False
    assert len(_refused_warnings(caplog)) == 1
    observe(kube)
    assert len(api.calls("list", NODES)) == 1
    assert len(_refused_warnings(caplog)) == 1
