"""``reconcile --until-idle``: passes until nothing is in flight, within a time budget.

On a cluster that announces its transitions (``sim:``) the clock jumps to the next
thing that happens; on a real one the run watches (``omegitops.app.incremental``) or,
without watches, looks again at least every ``poll_seconds``. The single pass is
``omegitops.app.passes.run_pass``; this module is only the loop around it, apart so
that neither the pass nor the watched passes import the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

from omegitops.app.incremental import IncrementalPasses
from omegitops.app.passes import PassResult, Pruning, run_pass
from omegitops.cluster.base import Cluster
from omegitops.manifests.load import ServiceComponent
from omegitops.util.errors import ClusterError

log = logging.getLogger(__name__)


# -- passes until idle ------------------------------------------------------------

# A pass that acted is followed at once by another; this bounds a run whose
# plans keep acting without the clock moving (which would be a bug).
MAX_PASSES = 5000
# After a pass whose LISTs failed, the next look on a cluster that announces its changes.
UNOBSERVED_RETRY_SECONDS = 5.0
# Passes that plan what changed are many more and each much smaller: one per
# burst of watch events.
MAX_WATCHED_PASSES = 1_000_000
IDLE = "idle"
BUDGET_SPENT = "time budget spent with work in flight"
STUCK = "still busy, but nothing will change by itself"
FORBIDDEN = "the job's account lacks permissions the run needs"
PASS_LIMIT = "pass limit reached"


def run_until_idle(cluster: Cluster, items: list[ServiceComponent], max_seconds: float,
                   on_pass: Callable[[PassResult], None] | None = None,
                   prune: Pruning | None = None) -> str:
    """Passes until nothing is in flight or the budget is spent; returns why it stopped.

    On a cluster that announces its transitions (sim), after a pass that wrote the
    cluster gets up to a second to react, and after one that did not the clock jumps
    to the next planned wake-up or transition. A cluster that cannot announce them
    (``poll_seconds`` set: a real one) is looked at again at the earlier of the
    planned wake-up and ``poll_seconds`` from now, and once more at the budget's end.
    """
    stop_at = cluster.now() + timedelta(seconds=max_seconds)
    passes = _watching(cluster, items, prune)
    try:
        return _passes_until_idle(cluster, items, prune, stop_at, passes, on_pass)
    finally:
        if passes is not None:
            cluster.stop_watching()  # the run's watches end with its passes


def _passes_until_idle(cluster: Cluster, items: list[ServiceComponent], prune: Pruning | None,
                       stop_at: datetime, passes: IncrementalPasses | None,
                       on_pass: Callable[[PassResult], None] | None) -> str:
    for _ in range(MAX_PASSES if passes is None else MAX_WATCHED_PASSES):
        result = run_pass(cluster, items, prune) if passes is None else passes.run_pass()
        if on_pass is not None:
            on_pass(result)
        if not result.busy:
            return IDLE
        if result.forbidden:
            return FORBIDDEN
        if cluster.poll_seconds:
            wake = _next_look(cluster, result, stop_at, watching=passes is not None)
            if wake is None:
                return BUDGET_SPENT
            if passes is not None:
                passes.wait(wake)
                continue
        else:
            if result.moved:
                cluster.advance(_gap(cluster, result.now))
                continue
            wake = _next_wake(cluster, result.wake_at)
            if not result.observed:
                # Nothing is known of a cluster that could not be listed: look again soon.
                again = result.now + timedelta(seconds=UNOBSERVED_RETRY_SECONDS)
                wake = again if wake is None else min(wake, again)
            if wake is None:
                return STUCK
            if wake > stop_at:
                return BUDGET_SPENT
        cluster.advance(max(0.0, (wake - cluster.now()).total_seconds()))
    return PASS_LIMIT


def _watching(cluster: Cluster, items: list[ServiceComponent],
              prune: Pruning | None) -> IncrementalPasses | None:
    """The run's incremental passes when the cluster watches (``omegitops.app.incremental``),
    else None: every pass lists and plans everything."""
    try:
        return IncrementalPasses.start(cluster, items, prune)
    except ClusterError as err:
        # The first LISTs failed: the passes list as before, and report it.
        log.warning("not watching: %s; listing on every pass", err)
        return None


def _next_look(cluster: Cluster, result: PassResult, stop_at: datetime,
               watching: bool = False) -> datetime | None:
    """When a cluster that cannot say what it will do next is looked at again.

    Never later than ``poll_seconds`` from now, whatever is planned: a pod may become
    ready long before the deadline a plan wakes up for, and only a look puts it into
    rotation. After a pass that wrote, within a second, as the next step of an
    operation often follows at once (when the cluster watches, a change wakes the
    run before then anyway). Capped at the budget's end, so that the last look is
    there; None once that look has been made.
    """
    now = cluster.now()
    if now >= stop_at:
        return None
    moved = result.moved and not watching
    poll = cast(float, cluster.poll_seconds)
    wait = min(1.0, poll) if moved else poll
    candidates: list[datetime] = [now + timedelta(seconds=wait), stop_at]
    if result.wake_at is not None:
        candidates.append(result.wake_at)
    return min(candidates)


def _next_wake(cluster: Cluster, planned: datetime | None) -> datetime | None:
    candidates = [t for t in (planned, cluster.next_transition_at()) if t is not None]
    return min(candidates) if candidates else None


def _gap(cluster: Cluster, now: datetime) -> float:
    """Seconds to the next thing the cluster does by itself, at most one."""
    wake = _next_wake(cluster, None)
    if wake is None:
        return 0.0
    return max(0.0, min((wake - now).total_seconds(), 1.0))
