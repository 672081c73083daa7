"""A pass over a rollout group's members (app/passes.py): the pre-pass gives each member
its view of the group, and a pass asked for one member (an incremental pass after a
watch event) plans every member of its group, since what one does changes what the
others may do."""

from __future__ import annotations

from omegitops.app.passes import component_key, plan_all
from omegitops.cluster.sim import SimCluster
from tests.fleet import strategy
from tests.scenario import converged

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)
SERVICE = {"replicas": 2, "decoder": 2, "grace": 2, "lifecycle": SURGE,
           "decoder_lifecycle": SURGE}
PD = {"name": "pd", "components": ["engine", "decoder"]}


def test_a_pass_for_one_member_plans_its_whole_group(tmp_path):
    scenario, change = converged(tmp_path, **SERVICE)
    change(**SERVICE, image="sglang:v2", rollout={"groups": [PD]})
    items = scenario.items()
    engine = next(component_key(i) for i in items if i.lifecycle.component == "engine")
    with SimCluster(scenario.path) as cluster:
        result = plan_all(cluster, items, only={engine})
    planned = sorted(plan.component for _, plan in result.plans)
    assert planned == ["decoder", "engine"], planned
    views = {plan.component: plan.decision.group for _, plan in result.plans
             if plan.decision is not None}
    assert {name: (view.name, view.allowed) for name, view in views.items()} == {
        "engine": ("pd", 1), "decoder": ("pd", 1)}, views


def test_a_service_without_groups_plans_alone(tmp_path):
    scenario, change = converged(tmp_path, **SERVICE)
    change(**SERVICE, image="sglang:v2")
    items = scenario.items()
    engine = next(component_key(i) for i in items if i.lifecycle.component == "engine")
    with SimCluster(scenario.path) as cluster:
        result = plan_all(cluster, items, only={engine})
    assert [plan.component for _, plan in result.plans] == ["engine"]
    assert result.plans[0][1].decision.group is None
