"""Fault campaigns: a flaky API, random fleets and faults, and the invariants of every pass.

``FlakyApi`` wraps a cluster the way ``KillAfter`` does: with a seeded random
generator, about ``rate`` of the calls fail, reads and writes alike, with a
500, a timeout (which for a write may have landed before it failed) or, for
an update, a 409 Conflict. Once a read fails, no write may follow in that
pass: nothing is acted on from a failed observation.

``Campaign`` drives a small repository of services on the simulated cluster
pass by pass, with template and scale changes, pod and node faults (a silent
node either reports again or is removed and replaced by a new one), the job
killed between writes and the operator's recovery annotations, and checks
after every pass what must hold whatever happens:

- every pod is labelled as managed by omegitops and named after its Instance
  (``scenario.check_invariants``), and belongs to a row of an InferenceReplica
  (no orphan pods);
- no Instance is doubled (unique indices) or lost: the rows that fill the
  desired places are exactly ``status.desiredReplicas``, and a row only goes
  away once it was Deleting or was a gang handing over to its replacement;
- live pods stay within the budgets: (desired + maxSurge) x pods per
  Instance under SurgeThenDrain, desired x pods per Instance otherwise;
  and, while no fault from outside has touched the component, no more
  Instances are out of service than maxUnavailable allows;
- gangs on one revision and one incarnation, in rotation all together or not
  at all, and whole after every clean pass.

"Desired" in a bound is the largest desired count since the component was
last seen at rest, so a scale-down is not charged for the Instances it is
still removing.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from omegitops.app.passes import MANAGED, PassResult, plan_all, run_pass
from omegitops.capacity import nodes as sim_nodes
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.errors import Conflict, Transient
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.model.budgets import scaled_value
from omegitops.model.ids import ComponentKey
from omegitops.model.replica import decode_rows
from omegitops.render import pods as P
from omegitops.render.instance import InstancePods
from omegitops.render.templates import (
    LABEL_COMPONENT,
    LABEL_INDEX,
    LABEL_ISVC,
    MANAGED_BY,
    MANAGER,
)
from tests.fleet import TOLERATIONS, runner
from tests.scenario import POD_NAME, WRITES, KillAfter, check_invariants

READS = ("list_pods", "list_objects", "get_object", "has_kind")
# The scenario's writes, and the InferenceService status a backend with OME's CRDs takes.
ALL_WRITES = (*WRITES, "update_service_status")
# Writes that replace an existing object, and so can meet a stale resourceVersion.
UPDATES = ("replace_object", "replace_status", "set_pod_condition", "patch_pod_images")
PERSISTENT = ("crash", "hang", "node-down")
RESET = "ome.io/reset-instances"
RELEASE = "ome.io/release-revision"
NAMESPACE = "demo"
# Simulated seconds after a fault from outside before a component at rest counts as
# past it (a restarted container shows a moment later).
SETTLE_SECONDS = 60.0
COMPONENT = "engine"


class BlindWrite(AssertionError):
    """A write after a failed read in the same pass: acting on a failed observation."""


class FlakyApi:
    """A cluster whose API fails ``rate`` of the calls (seeded): 500s, timeouts, 409s."""

    def __init__(self, cluster, rng: random.Random, rate: float = 0.1):
        self._cluster = cluster
        self._rng = rng
        self.rate = rate
        self.failures: Counter = Counter()
        self.blind = False  # a read failed in this pass
        self.writes = 0

    def __getattr__(self, name):
        attr = getattr(self._cluster, name)
        if name in READS:
            return self._read(name, attr)
        if name in ALL_WRITES:
            return self._write(name, attr)
        return attr

    def _read(self, name, attr):
        def read(*args, **kwargs):
            if self._rng.random() < self.rate:
                self.blind = True
                self.failures[f"{name}: 500"] += 1
                raise Transient(f"{name}: 500 Internal Server Error (injected)")
            return attr(*args, **kwargs)

        return read

    def _write(self, name, attr):
        def write(*args, **kwargs):
            if self.blind:
                raise BlindWrite(f"{name} after a failed read in the same pass")
            self.writes += 1
            if self._rng.random() >= self.rate:
                return attr(*args, **kwargs)
            kind = self._rng.choice(("409", "500", "timeout") if name in UPDATES
                                    else ("500", "timeout"))
            self.failures[f"{name}: {kind}"] += 1
            if kind == "409":
                raise Conflict(f"{name}: the object has been modified (injected)")
            if kind == "timeout" and self._rng.random() < 0.5:
                attr(*args, **kwargs)  # the request landed; only the answer was lost
            raise Transient(f"{name}: {kind} (injected)")

        return write


# -- fleets ------------------------------------------------------------------------


@dataclass
class Service:
    """One InferenceService with its own runtime, as the campaign changes it."""

    name: str
    replicas: int
    workers: int | None
    lifecycle: dict
    image: int = 1
    env: int = 1
    bad_image: str | None = None

    @property
    def key(self) -> ComponentKey:
        return NAMESPACE, self.name, COMPONENT

    @property
    def ceiling_key(self) -> tuple[str, str]:
        return self.name, COMPONENT  # as ``check_invariants`` keys its max_rows

    @property
    def replica_name(self) -> str:
        return f"{self.name}-{COMPONENT}"

    @property
    def strategy(self) -> str:
        return self.lifecycle["updateStrategy"]["type"]

    @property
    def rolling(self) -> dict:
        return self.lifecycle["updateStrategy"].get("rollingUpdate", {})

    @property
    def pods_per_instance(self) -> int:
        return 1 + (self.workers or 0)

    def image_name(self) -> str:
        return self.bad_image or f"sglang:v{self.image}"


def write_fleet(root: Path, services: list[Service], values: dict) -> None:
    """One ClusterServingRuntime per service (its shape is the runtime's), the services
    and the operator values."""
    for folder in ("runtimes", "services"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for svc in services:
        env = {"V": str(svc.env)}
        config: dict[str, Any] = {"tolerations": TOLERATIONS, "terminationGracePeriodSeconds": 5}
        if svc.workers is None:
            config["runner"] = runner(svc.image_name(), env)
        else:
            config["leader"] = {"runner": runner(svc.image_name(), env)}
            config["worker"] = {"size": svc.workers, "runner": runner(svc.image_name(), env)}
        runtime = {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
                   "metadata": {"name": f"srt-{svc.name}"}, "spec": {"engineConfig": config}}
        service = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                   "metadata": {"name": svc.name, "namespace": NAMESPACE},
                   "spec": {"deploymentMode": "OMENative", "model": {"name": "m"},
                            "runtime": {"name": f"srt-{svc.name}"},
                            "engine": {"minReplicas": svc.replicas,
                                       "maxReplicas": svc.replicas,
                                       "lifecycle": svc.lifecycle}}}
        (root / "runtimes" / f"{svc.name}.yaml").write_text(yaml.safe_dump(runtime))
        (root / "services" / f"{svc.name}.yaml").write_text(yaml.safe_dump(service))
    (root / "ome-values.yaml").write_text(yaml.safe_dump({"ome": {"controller": values}}))


# -- the campaign --------------------------------------------------------------------


def _filling(rows: dict[int, dict], gang: bool) -> list[dict]:
    """Rows that fill a desired place (as the planner counts them): not Deleting, a
    surge replacement only once its source handed over, a gang source only until then."""
    out = []
    for row in rows.values():
        if row.get("phase") == "Deleting":
            continue
        operation = row.get("operation") or {}
        if gang and operation.get("mode") == "Surge" and operation.get("handedOver"):
            continue
        source = rows.get(row.get("surgeOf"))
        if source is not None and not (source.get("operation") or {}).get("handedOver"):
            continue
        out.append(row)
    return out


def _planned_writes(result: PassResult) -> int:
    """How many writes applying these plans takes (the InferenceReplica is two)."""
    return sum(2 * plan.replica_changed + len(plan.actions) + len(plan.events)
               for _, plan in result.plans)


def _busy(result: PassResult) -> dict[str, bool]:
    """Whether each component (by InferenceReplica name) has work in flight."""
    return {f"{item.service.id.name}-{plan.component}": plan.busy for item, plan in result.plans}


@dataclass
class Campaign:
    tmp: Path
    services: list[Service]
    values: dict
    rng: random.Random
    api_rate: float = 0.1
    kill_rate: float = 0.05
    passes: int = 0
    log: list[str] = field(default_factory=list)
    api_failures: Counter = field(default_factory=Counter)
    # Per component: the largest desired count since it was last at rest.
    ceiling: Counter = field(default_factory=Counter)
    # Components a fault from outside touched since they were last at rest.
    disturbed: set = field(default_factory=set)
    # When (simulated time) each component was last touched by a fault from outside.
    touched_at: dict = field(default_factory=dict)
    # Passes since the last fault from outside (any component).
    since_fault: int = 1000
    # Persistent faults to clear: (pass number, kind, target, components they disturb).
    to_clear: list = field(default_factory=list)
    previous_rows: dict = field(default_factory=dict)
    faults_seen: bool = False
    # Whether each Instance served when last seen with no operation.
    served_at_rest: dict = field(default_factory=dict)
    # Machines that joined in place of removed nodes.
    replacements: int = 0

    def __post_init__(self) -> None:
        self.repo = self.tmp / "repo"
        self.path = self.tmp / "cluster.json"
        SimCluster.init(self.path, nodes=6, gpus_per_node=8)
        self.write()

    # -- the repository ----------------------------------------------------------

    def write(self) -> None:
        write_fleet(self.repo, self.services, self.values)
        loaded = load(self.repo)
        assert loaded.result.ok, loaded.result.errors
        self.items = resolved_components(loaded)
        for svc in self.services:
            self.ceiling[svc.ceiling_key] = max(self.ceiling[svc.ceiling_key], svc.replicas)

    def note(self, text: str) -> None:
        self.log.append(f"pass {self.passes}: {text}")

    # -- one pass ------------------------------------------------------------------

    def run_pass(self, flaky: bool = True) -> PassResult:
        with SimCluster(self.path) as cluster:
            api = FlakyApi(cluster, self.rng, self.api_rate if flaky else 0.0)
            target: Any = api
            killed = False
            if flaky and self.rng.random() < self.kill_rate:
                # Kill the job between two of the writes this pass is about to make.
                writes = _planned_writes(plan_all(cluster, self.items))
                if writes:
                    target = KillAfter(api, self.rng.randrange(writes))
                    killed = True
            result = run_pass(target, self.items)
            self.passes += 1
            self.api_failures.update(api.failures)
            clean = not api.failures and not killed and not result.errors
            if not result.observed:
                assert result.errors and result.applied == 0 and api.writes == 0, result
            self.check(cluster, result, clean)
        self.since_fault += 1
        return result

    def settle(self, result: PassResult, cap: float) -> bool:
        """Move the clock toward the next change, by at most ``cap`` seconds."""
        with SimCluster(self.path) as cluster:
            now = cluster.now()
            wakes = [t for t in (result.wake_at, cluster.next_transition_at()) if t]
            if result.applied:
                cap = min(cap, 1.0)
            if not wakes:
                cluster.advance(cap)
                return False
            cluster.advance(min(cap, max(0.0, (min(wakes) - now).total_seconds())))
            return True

    # -- invariants ----------------------------------------------------------------

    def check(self, cluster, result: PassResult, clean: bool) -> None:
        busy = _busy(result)
        pods = cluster.list_pods()
        nodes = {n["metadata"]["name"] for n in cluster.list_objects("Node")}
        replicas = {r["metadata"]["name"]: r
                    for r in cluster.list_objects(INFERENCE_REPLICA, MANAGED)}
        rows_of: dict[str, dict[int, dict]] = {}
        for svc in self.services:
            replica = replicas.get(svc.replica_name)
            if replica is None:
                continue
            listed = decode_rows((replica.get("status") or {}).get("instances"))
            rows_of[svc.name] = {row["index"]: row for row in listed}
            assert len(rows_of[svc.name]) == len(listed), f"{svc.name}: doubled: {listed}"
        if clean:
            # A write that failed halfway through a gang's SetServing actions leaves it
            # partly in rotation until the next pass: the scenario invariants (gangs in
            # rotation together, and whole unless a fault from outside broke one) hold
            # after every pass that ran through.
            check_invariants(cluster, Counter(self.ceiling), self.items,
                             whole=not self.faults_seen, counted=True)
        instances: dict[tuple, list[dict]] = {}
        by_component: dict[tuple, list[dict]] = {}
        for pod in pods:
            meta = pod["metadata"]
            labels = meta["labels"]
            assert labels.get(MANAGED_BY) == MANAGER, f"unmanaged pod {meta['name']}"
            assert POD_NAME.match(meta["name"]), meta["name"]
            key = (meta["namespace"], labels[LABEL_ISVC], labels[LABEL_COMPONENT])
            by_component.setdefault(key, []).append(pod)
            if not P.is_terminating(pod) and not P.has_ended(pod):
                instances.setdefault((labels[LABEL_ISVC], P.index_of(pod)), []).append(pod)
        gangs = {svc.name for svc in self.services if svc.workers is not None}
        for key, live in instances.items():
            if key[0] not in gangs:
                continue
            # Even a pass cut short never mixes revisions or incarnations in a gang.
            assert len({P.revision_of(p) for p in live}) <= 1, f"{key} mixes revisions"
            assert len({P.incarnation_of(p) for p in live}) <= 1, f"{key} mixes incarnations"
        for key, members in by_component.items():
            # No orphan pods: every pod's component has its InferenceReplica (and, by
            # check_invariants, its Instance a row there).
            assert f"{key[1]}-{key[2]}" in replicas, (
                f"pods without an InferenceReplica: {[p['metadata']['name'] for p in members]}")
        for svc in self.services:
            if svc.name not in rows_of:
                continue
            rows = rows_of[svc.name]
            status = replicas[svc.replica_name].get("status") or {}
            self._check_rows(svc, status, rows)
            self._check_budgets(svc, rows, by_component.get(svc.key, []))
            if clean and busy.get(svc.replica_name) is False:
                self._at_rest(svc, rows, by_component.get(svc.key, []), nodes,
                              cluster.now().timestamp())

    def _instance_ceiling(self, svc: Service, rows: dict[int, dict]) -> int:
        """How many Instances' worth of live pods the component may carry."""
        most = self.ceiling[svc.ceiling_key]
        if svc.strategy != "SurgeThenDrain":
            return most  # the other strategies never add pods beside an Instance
        surge = scaled_value(svc.rolling.get("maxSurge"), most)
        if surge is not None:
            return most + surge
        # No maxSurge: every Instance may surge at once, one replacement each (a gang's
        # next attempt waits until the replacement of a failed one is gone).
        return 2 * most

    def _check_rows(self, svc: Service, status: dict, rows: dict[int, dict]) -> None:
        gang = svc.workers is not None
        if status:
            # No Instance lost or doubled: the rows filling places are the desired count
            # recorded with them (the status is written whole, so it never lags itself).
            filling = _filling(rows, gang)
            # Scaled down and straight back up, a place may wait for an Instance being
            # deleted to let go of its pods (planner._room): never more than those.
            leaving = [r for r in rows.values() if r.get("phase") == "Deleting"]
            want = status["desiredReplicas"]
            assert len(filling) == want or (
                len(filling) < want <= len(filling) + len(leaving)), (svc.name, rows)
        before = self.previous_rows.get(svc.key, {})
        for index, row in before.items():
            if index in rows:
                continue
            operation = row.get("operation") or {}
            gone_ok = row.get("phase") == "Deleting" or (
                gang and operation.get("type") == "Update" and operation.get("mode") == "Surge")
            assert gone_ok, f"{svc.name}: Instance {index} vanished from {row}"
        self.previous_rows[svc.key] = rows

    def _check_budgets(self, svc: Service, rows: dict[int, dict], pods: list[dict]) -> None:
        need = svc.pods_per_instance
        most = self.ceiling[svc.ceiling_key]
        live = [p for p in pods if not P.is_terminating(p) and not P.has_ended(p)]
        if self.since_fault > 1:
            ceiling = self._instance_ceiling(svc, rows)
            assert len(live) <= ceiling * need, (
                f"{svc.name}: {len(live)} live pods over the ceiling {ceiling} x {need}",
                sorted(p["metadata"]["name"] for p in live))
        budget = scaled_value(svc.rolling.get("maxUnavailable"), most)
        if budget is None or svc.key in self.disturbed:
            return
        groups: dict[int, list[dict]] = {}
        for pod in pods:
            groups.setdefault(int(pod["metadata"]["labels"][LABEL_INDEX]), []).append(pod)
        down = []
        for row in _filling(rows, svc.workers is not None):
            key = (svc.name, row["index"])
            serving = InstancePods(need, groups.get(row["index"], [])).serving_pod_count() > 0
            if not row.get("operation"):
                self.served_at_rest[key] = serving
            elif row["operation"].get("type") == "Create":
                # A new Instance at an index an earlier one had (scaled away, then back):
                # what that one served says nothing of this one.
                self.served_at_rest[key] = False
            # Instances still being created only count once they served, and one that
            # served nothing when its operation began (or never served at all, such as
            # a Failed Instance a new revision reaches) costs no budget to move: the
            # documents' repairs and updates of such Instances start without waiting.
            if (row.get("operation") or {}).get("type") != "Create" and not serving \
                    and self.served_at_rest.get(key, False):
                down.append(row["index"])
        assert len(down) <= budget, (
            f"{svc.name}: {len(down)} Instances out of service, budget {budget}", rows)

    def _at_rest(self, svc: Service, rows: dict[int, dict], pods: list[dict],
                 nodes: set[str], now: float) -> None:
        """A component seen at rest after a clean pass starts a fresh budget window."""
        self.ceiling[svc.ceiling_key] = svc.replicas
        # A fault still in force (a silent node, a hung pod) may not show yet, and a
        # fault's after-effects may still be under way (pods a lost node's taint
        # manager deleted, pods of a removed node that PodGC has yet to collect): the
        # window starts once every pod stands on a node that exists.
        lasting = any(svc.key in affected for *_, affected in self.to_clear)
        # A fault that only shows once the clock moves (a container the kubelet restarts
        # a moment later) must not look over before it began.
        lasting = lasting or now < self.touched_at.get(svc.key, 0.0) + SETTLE_SECONDS
        standing = [p for p in pods if not P.is_terminating(p) and not P.has_ended(p)
                    and P.node_of(p) in (None, *nodes)]
        whole = len(standing) == len(pods) == svc.replicas * svc.pods_per_instance
        if not lasting and whole and all(row.get("phase") == "Ready" for row in rows.values()):
            self.disturbed.discard(svc.key)

    # -- faults and changes ----------------------------------------------------------

    def pods_of(self, svc: Service) -> list[dict]:
        with SimCluster(self.path) as cluster:
            return [p for p in cluster.list_pods({LABEL_ISVC: svc.name})
                    if not P.is_terminating(p) and not P.has_ended(p)]

    def pod_fault(self, kind: str, svc: Service, duration: int) -> None:
        pods = self.pods_of(svc)
        if kind == "node-down":
            # A pod whose node was removed stays listed until PodGC takes it: its node
            # can no longer go down.
            with SimCluster(self.path) as cluster:
                nodes = {n["metadata"]["name"] for n in cluster.list_objects("Node")}
            pods = [p for p in pods if P.node_of(p) in nodes]
        if not pods:
            return
        pod = self.rng.choice(pods)
        name = pod["metadata"]["name"]
        with SimCluster(self.path) as cluster:
            if kind == "node-down":
                node = P.node_of(pod)
                cluster.inject_fault(kind, node=node)
                # A silent node takes every component's pods on it out of service.
                every = frozenset(s.key for s in self.services)
                self.to_clear.append((self.passes + duration, kind, {"node": node}, every))
                self.disturbed.update(every)
                self._touched(cluster, every)
            else:
                cluster.inject_fault(kind, pod=name, namespace=NAMESPACE)
                if kind in PERSISTENT:
                    self.to_clear.append((self.passes + duration, kind,
                                          {"pod": name, "namespace": NAMESPACE},
                                          frozenset([svc.key])))
                self.disturbed.add(svc.key)
                self._touched(cluster, [svc.key])
        self._external(f"{kind} on {name}")

    def unschedulable(self, duration: int) -> None:
        # Every node cordoned touches every component: an Instance that could not be
        # placed is out of service by the fault, not by a budget omegitops spent.
        affected = frozenset(svc.key for svc in self.services)
        with SimCluster(self.path) as cluster:
            cluster.inject_fault("unschedulable")
        self.to_clear.append((self.passes + duration, "unschedulable", {}, affected))
        self.disturbed |= affected
        with SimCluster(self.path) as cluster:
            self._touched(cluster, affected)
        self._external("unschedulable")

    def bad_image(self, svc: Service, duration: int) -> None:
        """A release whose image cannot be pulled (the revision's own failure)."""
        svc.image += 1
        svc.bad_image = f"sglang:bad{svc.image}"
        with SimCluster(self.path) as cluster:
            cluster.inject_fault("imagepull", image=svc.bad_image)
        self.to_clear.append((self.passes + duration, "imagepull", {"image": svc.bad_image},
                              frozenset()))
        self.write()
        self.note(f"{svc.name}: image {svc.bad_image} (unpullable)")

    def _touched(self, cluster, keys) -> None:
        now = cluster.now().timestamp()
        self.touched_at.update((key, now) for key in keys)

    def _external(self, what: str) -> None:
        self.faults_seen = True
        self.since_fault = 0
        self.note(what)

    def clear_due(self, everything: bool = False) -> None:
        due = [c for c in self.to_clear if everything or c[0] <= self.passes]
        self.to_clear = [c for c in self.to_clear if c not in due]
        for _, kind, target, _ in due:
            if kind == "node-down":
                self.end_node_loss(target["node"])
                continue
            with SimCluster(self.path) as cluster:
                try:
                    cluster.inject_fault(kind, clear=True, **target)
                except Exception:  # the pod went meanwhile: its fault went with it
                    if "pod" not in target:
                        raise
            self.note(f"cleared {kind} {target}")

    def end_node_loss(self, node: str) -> None:
        """A silent node's two ends in real life, drawn at random: it reports again (its
        kubelet finishes the deletions that waited), or its machine is gone and the cloud
        deletes the Node (PodGC then removes its pods) while a new machine joins."""
        with SimCluster(self.path) as cluster:
            if cluster.get_object("Node", None, node) is None:
                return  # removed already, by an earlier fault on the same node
            if self.rng.random() < 0.5:
                cluster.inject_fault("node-down", node=node, clear=True)
                self.note(f"node {node} reports again")
                return
            cluster.inject_fault("node-removed", node=node)
            joined = self._new_node(cluster)
        self._external(f"node {node} removed, {joined} joins")

    def _new_node(self, cluster) -> str:
        """A new GPU machine like the others, under a name no node had (node-101, ...)."""
        self.replacements += 1
        node = sim_nodes.make_node(100 + self.replacements, 8)
        sim_nodes.set_ready(node, True, cluster.now().timestamp())
        cluster.create_object(node)
        return node["metadata"]["name"]

    def change_template(self, svc: Service, what: str) -> None:
        if what == "image" or svc.strategy == "InPlaceOnly":
            svc.image += 1
            svc.bad_image = None
        else:
            svc.env += 1
        self.write()
        self.note(f"{svc.name}: {what} -> {svc.image_name()} V={svc.env}")

    def scale(self, svc: Service, replicas: int) -> None:
        svc.replicas = replicas
        self.write()
        self.note(f"{svc.name}: scaled to {replicas}")

    # -- the operator ------------------------------------------------------------------

    def annotate(self, svc: Service, key: str, value: str) -> None:
        """``kubectl annotate inferencereplica``: the operator's write, not omegitops's."""
        with SimCluster(self.path) as cluster:
            replica = cluster.get_object(INFERENCE_REPLICA, NAMESPACE, svc.replica_name)
            if replica is None:
                return
            replica["metadata"].setdefault("annotations", {})[key] = value
            cluster.replace_object(replica)
        self.note(f"{svc.name}: annotated {key}={value}")

    def recover(self, svc: Service) -> bool:
        """What an operator does about a stuck component: reset its Failed Instances,
        release its held revision. True when there was something to do."""
        replica = self.replica(svc)
        if replica is None:
            return False
        status = replica.get("status") or {}
        acted = False
        if any(row.get("phase") == "Failed" for row in decode_rows(status.get("instances"))):
            self.annotate(svc, RESET, "all")
            acted = True
        for revision, entry in (status.get("revisionRetries") or {}).items():
            if entry.get("held"):
                self.annotate(svc, RELEASE, revision)
                acted = True
        return acted

    def replica(self, svc: Service) -> dict | None:
        with SimCluster(self.path) as cluster:
            return cluster.get_object(INFERENCE_REPLICA, NAMESPACE, svc.replica_name)

    # -- convergence ---------------------------------------------------------------------

    def converge(self, max_passes: int = 600, recoveries: int = 3) -> PassResult:
        """Passes with a healthy API until nothing is in flight and no retry is due; the
        operator recovers a component that has come to rest Failed or held, a few times
        at most."""
        left = Counter({svc.name: recoveries for svc in self.services})
        for _ in range(max_passes):
            result = self.run_pass(flaky=False)
            idle = {name for name, busy in _busy(result).items() if not busy}
            acted = False
            for svc in self.services:
                if svc.replica_name in idle and left[svc.name] and self.recover(svc):
                    left[svc.name] -= 1
                    acted = True
            # A Failed Instance waiting out its retry backoff is not busy, but it wakes.
            if not acted and not result.busy and (result.wake_at is None or self.settled()):
                return result
            self.settle(result, cap=60.0)
        raise AssertionError(f"still busy after {max_passes} passes:\n" + "\n".join(
            self.log[-30:]))

    def settled(self) -> bool:
        """Whether every component runs its desired Instances, all Ready, none moving."""
        for svc in self.services:
            replica = self.replica(svc)
            rows = decode_rows(((replica or {}).get("status") or {}).get("instances"))
            if len(rows) != svc.replicas or any(
                    row["phase"] != "Ready" or row.get("operation") for row in rows):
                return False
        return True

    def assert_converged(self) -> None:
        # The first pass at rest may record converged fingerprints (lifecycle/converged.py)
        # and nothing else; the one after it writes nothing at all.
        settle = self.run_pass(flaky=False)
        assert all(plan.is_noop for _, plan in settle.plans), (
            "a pass after convergence still changes something")
        final = self.run_pass(flaky=False)
        assert final.applied == 0, "a pass after convergence still writes"
        with SimCluster(self.path) as cluster:
            pods = cluster.list_pods()
        for svc in self.services:
            replica = self.replica(svc)
            assert replica is not None, svc.name
            rows = decode_rows(replica["status"]["instances"])
            target = replica["spec"]["revision"]
            partition = svc.rolling.get("partition", 0)
            assert len(rows) == svc.replicas, (svc.name, rows)
            for row in rows:
                assert row["phase"] == "Ready" and row.get("operation") is None, (svc.name, row)
            # The partition holds that many Instances, whatever their indices.
            behind = [row for row in rows if row["revision"] != target]
            assert len(behind) <= partition, (svc.name, rows)
            mine = [p for p in pods if p["metadata"]["labels"][LABEL_ISVC] == svc.name]
            live = [p for p in mine if not P.is_terminating(p) and not P.has_ended(p)]
            assert len(live) == svc.replicas * svc.pods_per_instance, (
                svc.name, [p["metadata"]["name"] for p in mine])
            assert all(P.is_ready(p) for p in live), svc.name
