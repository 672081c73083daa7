"""Property-based rollouts: random fleets, budgets, partitions and template changes.

Every pass checks the scenario invariants (gangs whole and on one revision,
pods within the surge ceiling, no doubled Instance) plus the budgets, and
every run must end converged.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omegitops.model.budgets import scaled_value
from tests.fleet import write_service
from tests.scenario import Scenario

NAME = "svc-engine"
EXAMPLES = int(os.environ.get("OMEGITOPS_PROPERTY_EXAMPLES", "25"))

STRATEGIES = ["SurgeThenDrain", "RecreatePod", "InPlaceIfPossible", "InPlaceOnly"]
BUDGETS = st.sampled_from([None, 1, 2, "25%", "50%"])


@st.composite
def fleets(draw):
    kind = draw(st.sampled_from(STRATEGIES))
    surge = draw(st.sampled_from([None, 0, 1, "50%"])) if kind == "SurgeThenDrain" else None
    unavailable = draw(BUDGETS)
    if kind == "SurgeThenDrain" and surge == 0 and unavailable is None:
        unavailable = 1  # budgets that could never move are refused by validation
    rolling = {k: v for k, v in (("maxSurge", surge), ("maxUnavailable", unavailable),
                                 ("partition", draw(st.sampled_from([0, 0, 1])))) if v}
    changes = draw(st.lists(
        st.tuples(st.sampled_from(["image", "env"]), st.integers(0, 6)), min_size=1,
        max_size=3))
    if kind == "InPlaceOnly":
        changes = [("image", gap) for _, gap in changes]  # others stall by design
    return {
        "replicas": draw(st.integers(1, 4)),
        "workers": draw(st.sampled_from([None, None, 1])),
        "lifecycle": {"updateStrategy": {"type": kind, **(
            {"rollingUpdate": rolling} if rolling else {})}},
        "changes": changes,
    }


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fleets())
def test_random_rollouts_keep_budgets_and_converge(fleet):
    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), fleet)


def _run(tmp: Path, fleet: dict) -> None:
    repo = tmp / "repo"
    base = {"replicas": fleet["replicas"], "workers": fleet["workers"],
            "lifecycle": fleet["lifecycle"], "grace": 5}
    write_service(repo, **base)
    scenario = Scenario(tmp, repo)
    scenario.until_idle()
    desired = fleet["replicas"]
    rolling = fleet["lifecycle"]["updateStrategy"].get("rollingUpdate", {})
    partition = rolling.get("partition", 0)
    budget = scaled_value(rolling.get("maxUnavailable"), desired)
    budget = desired if budget is None else budget
    held = {row["index"]: row["revision"] for row in scenario.rows(NAME)
            if row["index"] < partition}

    def within_budget(s):
        status = s.status(NAME)
        assert desired - status["servingReplicas"] <= budget, s.rows(NAME)

    scenario.watches.append(within_budget)
    version = 1
    for what, gap in fleet["changes"]:
        version += 1
        change = {"image": f"sglang:v{version}"} if what == "image" else {
            "env": {"V": str(version)}}
        write_service(repo, **base, **change)
        for _ in range(gap):
            result = scenario.run_pass()
            if not scenario.settle(result):
                break
    scenario.until_idle(max_passes=600)
    target = scenario.replica(NAME)["spec"]["revision"]
    rows = scenario.rows(NAME)
    assert len(rows) == desired, rows
    for row in rows:
        assert row["phase"] == "Ready" and row["operation"] is None, row
        if row["index"] in held:
            assert row["revision"] == held[row["index"]]
        else:
            assert row["revision"] == target, row
