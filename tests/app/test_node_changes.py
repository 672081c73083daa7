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
