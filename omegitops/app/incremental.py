"""Passes that plan what changed: ``--until-idle`` on a cluster that watches.

An informer-driven controller does not look at the whole fleet on every
event; it works on the objects whose events it was sent. A run of passes
does the same once the cluster keeps its lists current from watches
(``Cluster.watch``, the ``kube`` backend):

- the first pass lists everything and plans every component, as a single
  pass does;
- each later pass brings its observation up to date for the components whose
  objects changed since the last pass (the watches' keys), and plans those,
  the ones whose wake-up time has come, the ones in flight that were last
  planned ``poll_seconds`` ago or more, and the ones whose plan or writes
  failed; every other component keeps its last plan, already applied, which
  still counts for whether the run is busy and when it wakes;
- every ``RESYNC_SECONDS``, and whenever a watch had to list again, a pass
  plans everything again, as an informer's resync does, so that nothing an
  event could have missed stays unseen for long.

Between passes the run waits for the next change instead of a fixed poll
(``Cluster.wait_for_change``): a transition of the cluster is acted on as it
happens, not at the next poll.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import cast

from omegitops.app.passes import (
    NodeKey,
    Observation,
    PassResult,
    Pruning,
    component_key,
    components_on,
    node_key,
    nodes_refused,
    observe,
    observe_keys,
    observed_kinds,
    owner_key,
    plan_key,
    run_pass,
    unobserved,
)
from omegitops.cluster.base import NODE, Cluster, side_by_side
from omegitops.cluster.errors import Forbidden
from omegitops.lifecycle.planner import Plan
from omegitops.manifests.load import ServiceComponent
from omegitops.model.ids import ComponentKey
from omegitops.render.templates import MANAGED
from omegitops.util.errors import ClusterError

Key = ComponentKey
# A whole pass this often, however quiet the watches are (an informer's resync).
RESYNC_SECONDS = 300.0
# After the first change, how long to gather the ones right behind it (a pod
# bound, then Pending, then Running) into one pass.
GATHER_SECONDS = 0.05


def watch_nodes(cluster: Cluster) -> bool:
    """Watch the nodes where a pass lists them, each change filed under its node's name;
    an account that may not list them runs on without (``nodes_refused``). False when
    the cluster does not watch."""
    if not cluster.lists_nodes:
        return True
    try:
        return cluster.watch(NODE, None, node_key)
    except Forbidden as err:
        nodes_refused(cluster, err)
        return True


class IncrementalPasses:
    """The passes of one run on a watching cluster; ``start`` says whether it watches."""

    def __init__(self, cluster: Cluster, items: list[ServiceComponent],
                 prune: Pruning | None = None, resync_seconds: float = RESYNC_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster, self.items, self.prune = cluster, items, prune
        self.resync_seconds = resync_seconds
        self._clock = clock
        self._seen: Observation | None = None
        self._last: dict[Key, tuple[ServiceComponent | None, Plan]] = {}
        self._failed: set[Key] = set()
        self._planned_at: dict[Key, float] = {}
        self._full_at = 0.0
        self.poll_seconds = cluster.poll_seconds or 5.0

    @staticmethod
    def start(cluster: Cluster, items: list[ServiceComponent],
              prune: Pruning | None = None) -> IncrementalPasses | None:
        """Watch every kind a pass observes; None (nothing watched) when the cluster
        does not watch, and the run makes whole passes as before."""
        if not watch_nodes(cluster):
            return None
        # Their first LISTs side by side, as a pass's (reconcile.observe).
        watched = side_by_side({kind: partial(cluster.watch, kind, MANAGED, owner_key)
                                for kind in observed_kinds(cluster)},
                               threads=cluster.lists_side_by_side)
        if not all(watched.values()):
            return None
        return IncrementalPasses(cluster, items, prune)

    def run_pass(self) -> PassResult:
        changed = self.cluster.changed_keys()
        if self._seen is None or changed is None \
                or self._clock() - self._full_at >= self.resync_seconds:
            return self._whole_pass()
        now, clock = self.cluster.now(), self._clock()
        due = {key for key, (_, plan) in self._last.items()
               if plan.wake_at is not None and plan.wake_at <= now}
        # In flight with no wake-up named: what it waits for may come without an event
        # of its own objects (a scheduler's retry, a node's room): looked at again after
        # poll_seconds, as every component was before watches.
        stale = {key for key, (_, plan) in self._last.items()
                 if plan.busy and plan.wake_at is None
                 and clock - self._planned_at.get(key, 0.0) >= self.poll_seconds}
        # A node's change (cordoned, tainted) is planned for the components on it.
        nodes = {key.node for key in changed if isinstance(key, NodeKey)}
        changed = {key for key in changed if not isinstance(key, NodeKey)}
        if nodes:
            changed |= components_on(self._seen, nodes)
        keys = cast(set[Key], changed | due | stale | self._failed)
        observe_keys(self.cluster, self._seen, keys)
        result = run_pass(self.cluster, self.items, self.prune, self._seen, keys)
        self._keep(result, keys)
        result.carried = [entry for key, entry in self._last.items() if key not in keys]
        return result

    def wait(self, until: datetime) -> None:
        """Wait for the next change, or until ``until``; then a moment for the changes
        right behind it."""
        seconds = (until - self.cluster.now()).total_seconds()
        if self.cluster.wait_for_change(seconds):
            time.sleep(GATHER_SECONDS)

    def _whole_pass(self) -> PassResult:
        self.cluster.changed_keys()  # what a whole pass sees needs no keys
        try:
            self._seen = observe(self.cluster)
        except ClusterError as err:
            self._seen = None
            return unobserved(self.cluster, err)
        self._full_at = self._clock()
        result = run_pass(self.cluster, self.items, self.prune, self._seen)
        self._last = {}
        self._keep(result, None)
        return result

    def _keep(self, result: PassResult, keys: set[Key] | None) -> None:
        """Remember each component's plan; forget those planned that have none now."""
        if keys is not None:
            for key in keys:
                self._last.pop(key, None)
        now = self._clock()
        for item, plan in result.plans:
            key = component_key(item) if item is not None else plan_key(plan)
            self._last[key] = (item, plan)
            self._planned_at[key] = now
        self._failed = set(result.failed)
