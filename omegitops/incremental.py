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

A controller starts with its caches warm; a run of a CronJob starts cold, and
inside a big fleet its first LISTs take seconds (16 s for 8,000 pods on a busy
API server) before a merged change could take its first step. So the run lists
the InferenceReplicas first, and the few components whose manifests now render
another revision than their InferenceReplica records (or that have none yet)
take their first step from lists of their own objects alone, before the fleet
is listed. A component's plan reads only its own objects, so this plan is the
one the whole pass would make; the whole pass right after plans them again,
from the fleet's lists, as a next pass would.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from omegitops.cluster.base import INFERENCE_REPLICA, POD_GROUP, Cluster
from omegitops.errors import ClusterError
from omegitops.lifecycle.planner import Plan
from omegitops.lifecycle.replica import replica_name
from omegitops.lifecycle.templates import LABEL_COMPONENT, LABEL_ISVC, revision_name
from omegitops.manifests.load import ServiceComponent
from omegitops.reconcile import (
    MANAGED,
    Observation,
    PassResult,
    Pruning,
    component_key,
    file_objects,
    observe,
    observe_keys,
    observed_kinds,
    owner_key,
    plan_key,
    run_pass,
    unobserved,
)

log = logging.getLogger(__name__)

Key = tuple[str, str, str]
# A whole pass this often, however quiet the watches are (an informer's resync).
RESYNC_SECONDS = 300.0
# After the first change, how long to gather the ones right behind it (a pod
# bound, then Pending, then Running) into one pass.
GATHER_SECONDS = 0.05
# At most this many changed components take their first step before the fleet is
# listed (three small LISTs each); a bigger change waits for the whole pass.
FIRST_STEPS_MAX = 8


class IncrementalPasses:
    """The passes of one run on a watching cluster; ``start`` says whether it watches."""

    def __init__(self, cluster: Cluster, items: list[ServiceComponent],
                 prune: Pruning | None = None, resync_seconds: float = RESYNC_SECONDS,
                 clock=time.monotonic) -> None:
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
        does not watch, and the run makes whole passes as before. Between the
        InferenceReplicas' LIST and the others, the changed components take their
        first step (``first_steps``)."""
        if not cluster.watch(INFERENCE_REPLICA, MANAGED, owner_key):
            return None
        first_steps(cluster, items, prune)
        for kind in observed_kinds(cluster):
            if not cluster.watch(kind, MANAGED, owner_key):
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
        keys = changed | due | stale | self._failed
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


def changed_components(items: list[ServiceComponent],
                       replicas: dict[tuple[str, str], dict]) -> list[ServiceComponent]:
    """The managed components whose InferenceReplica (by (namespace, name) in
    ``replicas``) is missing or records another revision than their manifests render
    now: what a merge starts. A pinned runtime's service is rendered from its stored
    revision, which only its own objects tell, so it is left to the whole pass. Pure."""
    changed = []
    for item in items:
        if not item.lifecycle.managed or item.templates is None or item.pinned:
            continue
        namespace, isvc, component = component_key(item)
        replica = replicas.get((namespace, replica_name(isvc, component)))
        recorded = ((replica or {}).get("spec") or {}).get("revision")
        if recorded != revision_name(isvc, component, item.templates):
            changed.append(item)
    return changed


def first_steps(cluster: Cluster, items: list[ServiceComponent],
                prune: Pruning | None = None) -> PassResult | None:
    """Plan and apply the changed components (``changed_components``, at most
    ``FIRST_STEPS_MAX``) from LISTs of their own objects, in their namespace and by
    their labels, before the fleet is listed; None when there are none, or too many.

    Nothing is lost if this fails or refuses: the whole pass that follows plans every
    component, these ones included, and reports what it finds. ``prune`` is the run's,
    so that the permissions asked before the first write are the whole run's.
    """
    try:
        replicas = {(r["metadata"].get("namespace", ""), r["metadata"]["name"]): r
                    for r in cluster.list_objects(INFERENCE_REPLICA, MANAGED)}
        changed = changed_components(items, replicas)
        if not changed or len(changed) > FIRST_STEPS_MAX:
            return None
        kinds = observed_kinds(cluster)
        seen = Observation(podgroups={} if POD_GROUP in kinds else None)
        for item in changed:
            namespace, isvc, component = component_key(item)
            labels = {**MANAGED, LABEL_ISVC: isvc, LABEL_COMPONENT: component}
            for kind in kinds:
                if kind != INFERENCE_REPLICA:
                    file_objects(seen, kind, cluster.list_objects(kind, labels,
                                                                  namespace=namespace))
            replica = replicas.get((namespace, replica_name(isvc, component)))
            if replica is not None:
                file_objects(seen, INFERENCE_REPLICA, [replica])
        result = run_pass(cluster, items, prune, seen, {component_key(i) for i in changed})
    except ClusterError as err:
        log.info("first steps before the fleet is listed: %s; the whole pass follows", err)
        return None
    log.info("first steps: %d changed component(s) planned before the fleet is listed, "
             "%d write(s)", len(changed), result.applied)
    return result
