"""Who owns a component's count of Instances (lifecycle/scaling.py), on its own: Git
when minReplicas == maxReplicas, an autoscaler between them, the job only clamping."""

from __future__ import annotations

import pytest

from omegitops.lifecycle.scaling import (
    AUTOSCALER,
    GIT,
    Count,
    desired_count,
    live_replicas,
)
from omegitops.manifests.load import load, resolved_components
from tests.fleet import write_service


@pytest.mark.parametrize("live", [None, 0, 2, 7])
def test_git_owns_the_count_when_the_bounds_meet(live):
    """As today: minReplicas, whatever a kubectl scale wrote."""
    assert desired_count(2, None, live) == Count(2, GIT)


def test_the_autoscaler_starts_at_min_replicas():
    """A new InferenceReplica (nothing live yet) starts at minReplicas."""
    assert desired_count(1, (1, 4), None) == Count(1, AUTOSCALER)


@pytest.mark.parametrize("live", [1, 2, 3, 4])
def test_a_count_inside_the_bounds_is_never_fought(live):
    assert desired_count(1, (1, 4), live) == Count(live, AUTOSCALER)


@pytest.mark.parametrize(("bounds", "live", "kept"), [
    ((1, 4), 9, 4),   # an autoscaler (or a person) wrote above maxReplicas
    ((1, 4), 0, 1),   # ... or below minReplicas
    ((3, 5), 2, 3),   # Git raised minReplicas past the live count
    ((1, 2), 4, 2),   # Git lowered maxReplicas under it
])
def test_a_count_outside_the_bounds_is_brought_into_them(bounds, live, kept):
    assert desired_count(bounds[0], bounds, live) == Count(kept, AUTOSCALER, live)


@pytest.mark.parametrize(("spec", "live"), [
    ({"replicas": 3}, 3), ({"replicas": 0}, 0), ({"replicas": -1}, None),
    ({"replicas": True}, None), ({"replicas": "3"}, None), ({}, None)])
def test_the_live_count_is_a_whole_number_or_nothing(spec, live):
    assert live_replicas({"spec": spec}) == live
    assert live_replicas(None) is None


@pytest.mark.parametrize(("low", "high", "bounds"), [
    (2, 2, None), (1, 4, (1, 4)), (0, 3, (0, 3))])
def test_the_bounds_come_from_min_and_max_replicas(tmp_path, low, high, bounds):
    repo = write_service(tmp_path / "repo", replicas=low, max_replicas=high)
    (item,) = [i for i in resolved_components(load(repo)) if i.lifecycle.managed]
    assert (item.lifecycle.replicas, item.lifecycle.bounds) == (low, bounds)
