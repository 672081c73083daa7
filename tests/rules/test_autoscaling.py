"""instances.txt: "The autoscaler, minReplicas and maxReplicas count Instances, not
pods." An autoscaler (here ``Driver.scale``, which writes spec.replicas as
``kubectl scale irep`` and the HPA do, through the scale subresource on the control
plane) owns the count between minReplicas and maxReplicas; Git owns it when they
meet (docs/behaviour.md "Who owns the count of Instances"). The job follows the count
with the documents' rules and budgets, and only clamps it into the bounds. Tests
taking ``backend`` run on both backends (tests/backends.py)."""

from __future__ import annotations

import pytest

from omegitops.render import pods as P
from tests.backends import NAME, messages, rows, settled
from tests.fleet import strategy

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


def _spec(s) -> dict:
    return s.replica(NAME)["spec"]


def _within(low: int, high: int):
    """A watch: the count the job keeps stays in [low, high] after every pass."""
    def check(s) -> None:
        replicas = _spec(s)["replicas"]
        assert low <= replicas <= high, replicas
        filling = [r for r in rows(s).values()
                   if r["phase"] != "Deleting" and r.get("surgeOf") is None]
        assert len(filling) <= high, rows(s)
    return check


def test_the_autoscaler_starts_at_min_replicas_and_the_status_names_it(backend):
    """The InferenceReplica is created at minReplicas; the status says an autoscaler
    owns the count and names the pods that serve, for the scale subresource."""
    scenario, _ = backend.converged(replicas=1, max_replicas=4)
    spec, status = _spec(scenario), scenario.status(NAME)
    assert (spec["replicas"], spec["minReplicas"], spec["maxReplicas"]) == (1, 1, 4)
    assert (status["replicas"], status["replicasFrom"]) == (1, "Autoscaler")
    assert status["selector"] == ("ome.io/inferenceservice=svc,ome.io/component=engine,"
                                  "ome.io/entry=true")


def test_a_scaled_count_inside_the_bounds_is_followed_and_never_fought(backend):
    scenario, _ = backend.converged(replicas=1, max_replicas=4, lifecycle=SURGE)
    scenario.watches.append(_within(1, 4))
    scenario.scale(3)
    scenario.until(settled, seconds=180)
    assert sorted(rows(scenario)) == [0, 1, 2]
    assert _spec(scenario)["replicas"] == 3
    # Scaled down: Ready Instances kept, lowest indices first.
    scenario.scale(2)
    scenario.until(settled, seconds=180)
    assert sorted(rows(scenario)) == [0, 1]
    assert _spec(scenario)["replicas"] == 2
    assert not scenario.events("ReplicasClamped")


@pytest.mark.parametrize(("written", "kept"), [(9, 4), (0, 1)])
def test_a_count_written_outside_the_bounds_is_clamped(backend, written, kept):
    scenario, _ = backend.converged(replicas=1, max_replicas=4)
    scenario.scale(written)
    scenario.until(lambda s: _spec(s)["replicas"] == kept and settled(s), seconds=180)
    assert len(rows(scenario)) == kept
    side = "above maxReplicas 4" if written > kept else "below minReplicas 1"
    assert any(f"spec.replicas {written} is {side}: set to {kept}" in m
               for m in messages(scenario, "ReplicasClamped"))


def test_git_moving_the_bounds_clamps_the_live_count(backend):
    """Git lowers maxReplicas under the live count: the count comes down to it, the
    lowest indices kept; Git raises minReplicas over it: the count goes up to it."""
    scenario, change = backend.converged(replicas=1, max_replicas=4)
    scenario.scale(4)
    scenario.until(settled, seconds=180)
    change(max_replicas=2)
    scenario.until(lambda s: _spec(s)["replicas"] == 2 and settled(s), seconds=180)
    assert sorted(rows(scenario)) == [0, 1]
    change(replicas=3, max_replicas=5)
    scenario.until(lambda s: _spec(s)["replicas"] == 3 and settled(s), seconds=180)
    assert sorted(rows(scenario)) == [0, 1, 2]
    assert _spec(scenario)["minReplicas"] == 3


def test_git_owns_the_count_when_the_bounds_meet(backend):
    """minReplicas == maxReplicas: a kubectl scale is undone, as before."""
    scenario, _ = backend.converged(replicas=2)
    assert scenario.status(NAME)["replicasFrom"] == "Git"
    assert "minReplicas" not in _spec(scenario)
    scenario.scale(4)
    scenario.until(lambda s: _spec(s)["replicas"] == 2 and settled(s), seconds=180)
    assert sorted(rows(scenario)) == [0, 1]


def test_a_gang_scales_whole_and_the_selector_finds_its_leaders(backend):
    """A count of Instances: each one a leader and its workers, created and removed
    whole; the selector an HPA averages over matches the leaders only."""
    scenario, _ = backend.converged(replicas=1, max_replicas=3, workers=2, grace=2)
    scenario.watches.append(_within(1, 3))
    scenario.scale(3)
    scenario.until(settled, seconds=240)
    live = [p for p in scenario.pods(f"{NAME}-")
            if not P.has_ended(p) and not P.is_terminating(p)]
    assert len(live) == 3 * 3
    wanted = dict(pair.split("=") for pair in scenario.status(NAME)["selector"].split(","))
    chosen = [p for p in live if wanted.items() <= p["metadata"]["labels"].items()]
    assert sorted(P.runner_of(p) for p in chosen) == ["leader"] * 3
    scenario.scale(1)
    scenario.until(settled, seconds=240)
    assert sorted(rows(scenario)) == [0]


def test_a_scale_during_a_rollout_keeps_the_budgets(backend):
    """Scaled up mid-rollout: the new Instances are built at the target revision, and
    the rollout's maxSurge 1 / maxUnavailable 0 still hold for the others."""
    scenario, change = backend.converged(replicas=2, max_replicas=4, grace=2,
                                         lifecycle=SURGE)
    surging: list[int] = []

    def budget(s) -> None:
        moving = [r for r in rows(s).values()
                  if (r.get("operation") or {}).get("type") == "Update"]
        surging.append(len(moving))
        assert len(moving) <= 1, rows(s)

    scenario.watches.append(budget)
    change(image="sglang:v2")
    scenario.run_pass()
    scenario.scale(3)
    scenario.until(settled, seconds=240)
    target = _spec(scenario)["revision"]
    assert sorted(rows(scenario)) == [0, 1, 2]
    assert {r["revision"] for r in rows(scenario).values()} == {target}
    assert max(surging) == 1
