"""A run's first steps: the components a merge changed move before the fleet is listed.

``incremental.first_steps`` plans the components whose manifests render another
revision than their InferenceReplica records from LISTs of their own objects (in
their namespace, by their labels), and applies those plans; the whole pass that
follows plans everything. Here on the simulated cluster, whose lists the step
counts; the control-plane test (tests/controlplane/test_watches.py) checks the
order of the requests on the real API server.
"""

from __future__ import annotations

import yaml

from omegitops.cluster.sim import SimCluster
from omegitops.incremental import FIRST_STEPS_MAX, changed_components, first_steps
from omegitops.manifests.load import load, resolved_components
from omegitops.reconcile import IDLE, component_key, run_pass, run_until_idle
from tests.fleet import write_service


class CountingSim(SimCluster):
    def __init__(self, path) -> None:
        super().__init__(path)
        self.lists: list[tuple[str, str | None]] = []

    def list_objects(self, kind, labels=None, *, namespace=None):
        self.lists.append((kind, namespace))
        return super().list_objects(kind, labels, namespace=namespace)


def _fleet(tmp_path, services: int):
    repo = tmp_path / "repo"
    for number in range(services):
        write_service(repo, replicas=2, name=f"svc-{number}", namespace=f"team-{number}")
    SimCluster.init(tmp_path / "cluster.json")
    cluster = CountingSim(tmp_path / "cluster.json")
    cluster.__enter__()
    assert run_until_idle(cluster, resolved_components(load(repo)), 3600) == IDLE
    return repo, cluster


def _change(repo, number: int) -> None:
    path = repo / "services" / f"svc-{number}.yaml"
    data = yaml.safe_load(path.read_text())
    data["spec"]["engine"]["runner"] = {"name": "ome-container",
                                        "env": [{"name": "MODEL_REVISION", "value": "2"}]}
    path.write_text(yaml.safe_dump(data))


def test_only_the_changed_component_moves_from_its_own_lists(tmp_path):
    repo, cluster = _fleet(tmp_path, 3)
    items = resolved_components(load(repo))
    assert first_steps(cluster, items) is None  # nothing changed: straight to the pass
    _change(repo, 1)
    items = resolved_components(load(repo))
    cluster.lists.clear()
    result = first_steps(cluster, items)
    assert [component_key(item) for item, _ in result.plans] == [("team-1", "svc-1",
                                                                  "engine")]
    assert result.applied > 0 and not result.errors
    # The InferenceReplicas across the fleet, then the changed one's own objects only.
    assert cluster.lists[0] == ("InferenceReplica", None)
    assert set(cluster.lists[1:]) == {("Pod", "team-1"), ("ControllerRevision", "team-1"),
                                      ("Service", "team-1")}
    # What it did is what a whole pass would have done: the next whole pass carries on
    # from it, and the other services stay converged.
    after = run_pass(cluster, items)
    assert {component_key(item) for item, plan in after.plans if not plan.is_noop} <= \
        {("team-1", "svc-1", "engine")}
    assert not changed_components(items, {
        (r["metadata"]["namespace"], r["metadata"]["name"]): r
        for r in cluster.list_objects("InferenceReplica")})


def test_a_change_to_many_components_waits_for_the_whole_pass(tmp_path):
    repo, cluster = _fleet(tmp_path, FIRST_STEPS_MAX + 1)
    for number in range(FIRST_STEPS_MAX + 1):
        _change(repo, number)
    cluster.lists.clear()
    assert first_steps(cluster, resolved_components(load(repo))) is None
    assert cluster.lists == [("InferenceReplica", None)]
