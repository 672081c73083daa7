"""Under ``--until-idle`` on a cluster that watches nodes, a node's change (cordoned,
tainted) is planned for the components with pods on it, and for those only."""

from __future__ import annotations

from datetime import UTC, datetime

from omegitops.app import incremental
from omegitops.app.incremental import IncrementalPasses
from omegitops.app.passes import NodeKey, Observation, PassResult
from omegitops.model.ids import ComponentKey

ON_GPU_1 = ComponentKey("a", "llama", "engine")
ELSEWHERE = ComponentKey("b", "qwen", "engine")
CHANGED_POD = ComponentKey("c", "phi", "engine")


class WatchingCluster:
    poll_seconds = 5.0
    lists_nodes = True

    def __init__(self, changed):
        self.changed = changed

    def changed_keys(self):
        return self.changed

    def now(self):
        return datetime(2026, 1, 1, tzinfo=UTC)


def _pod(node: str) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node}}


def test_a_node_change_plans_the_components_on_that_node(monkeypatch):
    cluster = WatchingCluster({NodeKey("gpu-1"), CHANGED_POD})
    passes = IncrementalPasses(cluster, [], clock=lambda: 0.0)
    seen = Observation()
    seen.pods = {ON_GPU_1: [_pod("gpu-1")], ELSEWHERE: [_pod("gpu-2")],
                 CHANGED_POD: [_pod("gpu-3")]}
    passes._seen = seen
    observed, planned = [], []
    monkeypatch.setattr(incremental, "observe_keys",
                        lambda cluster, seen, keys: observed.append(set(keys)))

    def run_pass(cluster, items, prune, seen, keys):
        planned.append(set(keys))
        return PassResult(now=cluster.now())

    monkeypatch.setattr(incremental, "run_pass", run_pass)
    passes.run_pass()
    assert observed == planned == [{ON_GPU_1, CHANGED_POD}]


def _node(name: str, cordoned: bool = False) -> dict:
    return {"metadata": {"name": name}, "spec": {"unschedulable": cordoned or None}}


def _component_nodes(cordoned: set[str], count: int = 40) -> dict:
    """What a component with its pod on gpu-1 observes of ``count`` nodes."""
    from omegitops.app.passes import _take_nodes

    seen = Observation()
    nodes = {f"gpu-{i}": _node(f"gpu-{i}", f"gpu-{i}" in cordoned) for i in range(1, count)}
    _take_nodes(seen, nodes)
    seen.pods = {ON_GPU_1: [_pod("gpu-1")]}
    return seen.component(*ON_GPU_1).nodes


def test_a_component_reads_its_own_nodes_and_only_whether_others_take_pods():
    """A node cordoned, added or removed where the component has no pod leaves what it
    observes (and so its converged fingerprint) as it was; a migration still learns
    whether anywhere else takes pods."""
    from omegitops.lifecycle.migration import _elsewhere

    at_rest = _component_nodes(set())
    assert set(at_rest) == {"gpu-1", ""}
    assert at_rest[""] == {"open": ["gpu-1"], "elsewhere": True}
    assert _component_nodes({"gpu-7"}) == at_rest
    assert _component_nodes(set(), count=60) == at_rest
    # Its own node cordoned: somewhere else takes pods while any other node does.
    leaving = _component_nodes({"gpu-1"})
    assert leaving[""] == {"open": [], "elsewhere": True} and _elsewhere(leaving[""], "gpu-1")
    everything = {f"gpu-{i}" for i in range(1, 40)}
    assert not _elsewhere(_component_nodes(everything)[""], "gpu-1")
    assert _elsewhere(_component_nodes(everything - {"gpu-9"})[""], "gpu-1")
    # Only its own node takes pods: nowhere else to go.
    alone = _component_nodes(everything - {"gpu-1"})
    assert alone[""] == {"open": ["gpu-1"], "elsewhere": False}
    assert not _elsewhere(alone[""], "gpu-1")
