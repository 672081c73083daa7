"""Who owns a component's count of Instances, and what that count is; pure.

instances.txt: "The autoscaler, minReplicas and maxReplicas count Instances, not
pods." The InferenceReplica's scale subresource sets ``spec.replicas``, a count of
Instances, so ``kubectl scale irep``, an HPA or a KEDA ScaledObject can drive it.
Who owns the count follows what HPA users expect of a Deployment whose replicas they
leave out of Git:

- minReplicas == maxReplicas (or maxReplicas unset): Git owns it. The job writes
  minReplicas and undoes any other value, as it does today.
- minReplicas < maxReplicas: the autoscaler owns it. The job writes minReplicas
  when it creates the InferenceReplica, then leaves ``spec.replicas`` alone, except
  to bring it into [minReplicas, maxReplicas] when Git moves the bounds or an
  autoscaler writes outside them. It never fights a value inside them.

The count an autoscaler sets is part of what the planner observes (the live
InferenceReplica), so the planner stays a function of its inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from omegitops.model.state import Json
from omegitops.render.component import DesiredComponent

GIT, AUTOSCALER = "Git", "Autoscaler"


@dataclass(frozen=True)
class Count:
    """The desired number of Instances, who owns it, and the live value it replaced
    when that was outside the bounds (None: kept as found, or Git's own)."""

    replicas: int
    source: str
    clamped_from: int | None = None


def desired_count(minimum: int, bounds: tuple[int, int] | None, live: int | None) -> Count:
    """The count of a component whose Git count is ``minimum``, whose autoscaling
    ``bounds`` are (minReplicas, maxReplicas) or None, and whose InferenceReplica holds
    ``live`` in spec.replicas (None: not created yet, or unreadable)."""
    if bounds is None:
        return Count(minimum, GIT)
    low, high = bounds
    if live is None:
        return Count(low, AUTOSCALER)
    kept = min(max(live, low), high)
    return Count(kept, AUTOSCALER, None if kept == live else live)


def live_replicas(replica: Json | None) -> int | None:
    """spec.replicas of an InferenceReplica, when it holds a count."""
    value = ((replica or {}).get("spec") or {}).get("replicas")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def count_of(desired: DesiredComponent, replica: Json | None) -> Count:
    """The count of ``desired`` against its live InferenceReplica."""
    lifecycle = desired.lifecycle
    return desired_count(lifecycle.replicas, lifecycle.bounds, live_replicas(replica))


def counted(desired: DesiredComponent, count: Count) -> DesiredComponent:
    """``desired`` asking for ``count`` Instances."""
    if count.replicas == desired.lifecycle.replicas:
        return desired
    lifecycle = dataclasses.replace(desired.lifecycle, replicas=count.replicas)
    return dataclasses.replace(desired, lifecycle=lifecycle)
