"""PodDisruptionBudgets and the eviction API, as the simulator keeps them.

An eviction (``POST pods/{name}/eviction``, what ``kubectl drain`` sends) is refused,
``Cannot evict pod as it would violate the pod's disruption budget.``, when a budget
that selects the pod allows no disruption now: of the pods it selects that are not
terminating, fewer would stay Ready than ``expected - maxUnavailable`` (or than
``minAvailable``). As the disruption controller, a ``maxUnavailable`` above 0 over pods
that declare no controller (no ownerReference) allows nothing: it cannot tell how
many pods are expected. An unready pod may always go: its eviction disrupts nothing
(the API server's rule for an unhealthy pod, as ``unhealthyPodEvictionPolicy:
AlwaysAllow`` has it).

The ``drain`` fault does what ``kubectl drain`` does: it cordons the node and evicts
its pods, trying a refused one again every five seconds, until none is left.
"""

from __future__ import annotations

from omegitops.cluster.errors import ClusterError

DRAIN_RETRY_SECONDS = 5.0
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


class EvictionRefused(ClusterError):
    """429 TooManyRequests: a disruption budget refuses the eviction."""


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def selects(budget: dict, pod: dict) -> bool:
    if budget["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    wanted = ((budget.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _controlled(pod: dict) -> bool:
    return any(ref.get("controller") for ref in pod["metadata"].get("ownerReferences") or [])


def allowed(budget: dict, pods: list[dict]) -> int:
    """How many of the selected ``pods`` may be disrupted now."""
    live = [p for p in pods if selects(budget, p) and not p["metadata"].get("deletionTimestamp")]
    healthy = sum(1 for p in live if _ready(p))
    spec = budget.get("spec") or {}
    if spec.get("minAvailable") is not None:
        return healthy - int(spec["minAvailable"])
    if any(not _controlled(p) for p in live):
        return 0  # the controller's "found no controllers": nothing may go
    return healthy - (len(live) - int(spec.get("maxUnavailable") or 0))


def refusal(budgets: list[dict], pod: dict, pods: list[dict]) -> str | None:
    """Why an eviction of ``pod`` is refused now; None when it may go."""
    if not _ready(pod):
        return None
    for budget in budgets:
        if selects(budget, pod) and allowed(budget, pods) <= 0:
            return f"{REFUSED} (PodDisruptionBudget {budget['metadata']['name']})"
    return None
