"""The Budget hold says what holds the surge slots (update-strategies.txt: "While no
Instance of a component can move, the component's rollout hold names the gate that
stops it")."""

from __future__ import annotations

from tests.fleet import strategy
from tests.scenario import converged

NAME = "svc-engine"
SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


def test_the_pods_of_an_instance_being_scaled_away_are_named_as_such(tmp_path):
    """Scaled from three to two with a new image: the third Instance's pod holds the
    surge slot while it goes; it is no failed attempt's leftover waiting for a start."""
    scenario, change = converged(tmp_path, replicas=3, grace=30, lifecycle=SURGE)
    change(image="sglang:v2", replicas=2, grace=30, lifecycle=SURGE)
    scenario.run_pass()
    hold = scenario.status(NAME)["rolloutHold"]
    assert hold["gate"] == "Budget"
    assert hold["reason"] == (
        "per-Component surge budget 1 exhausted (would become 2); pod svc-engine-2-default-0 "
        "of Instance 2, which is being removed, holds a surge slot until it is gone")
