"""Drive the simulated cluster pass by pass, checking invariants after every pass."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from omegitops.app.passes import MANAGED, PassResult, run_pass
from omegitops.cluster.base import CONTROLLER_REVISION, INFERENCE_REPLICA
from omegitops.cluster.errors import Transient
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.model.budgets import scaled_value
from omegitops.model.replica import decode_rows
from omegitops.render import pods as P
from omegitops.render.templates import (
    LABEL_COMPONENT,
    LABEL_INCARNATION,
    LABEL_INDEX,
    LABEL_ISVC,
    LABEL_REVISION,
    LABEL_RUNNER,
    MANAGED_BY,
    SERVING_GATE,
)

POD_NAME = re.compile(r"^(?P<isvc>.+)-(?P<component>engine|decoder|router)-(?P<index>\d+)-"
                      r"(?P<runner>default|leader|worker)-(?P<ordinal>\d+)$")
WRITES = ("create_pod", "delete_pod", "set_pod_condition", "patch_pod_images", "create_object",
          "replace_object", "replace_status", "delete_object", "record_event")


class Killed(Transient):
    """The job dies between two writes."""


class KillAfter:
    """A cluster that lets ``writes`` writes through, then fails every later one."""

    def __init__(self, cluster, writes: int):
        self._cluster = cluster
        self.left = writes

    def __getattr__(self, name):
        attr = getattr(self._cluster, name)
        if name not in WRITES:
            return attr

        def write(*args, **kwargs):
            if self.left <= 0:
                raise Killed("the job was killed")
            self.left -= 1
            return attr(*args, **kwargs)

        return write


class Scenario:
    def __init__(self, tmp_path: Path, repo: Path, nodes: int = 8, gpus: int = 8,
                 podgroups: bool = False):
        self.repo = repo
        self.path = tmp_path / "cluster.json"
        SimCluster.init(self.path, nodes=nodes, gpus_per_node=gpus, podgroups=podgroups)
        self.passes = 0
        self.max_rows: Counter = Counter()
        # Checks a test adds, run after every pass like the invariants.
        self.watches: list = []
        # A fault from outside (an eviction, a deleted pod) may leave a gang partial
        # until the planner restarts it; after one, that invariant is not ours to hold.
        self.strict_gangs = True
        self.results: list[PassResult] = []

    def items(self):
        loaded = load(self.repo)
        assert loaded.result.ok, loaded.result.errors
        return resolved_components(loaded)

    def run_pass(self, kill_after: int | None = None) -> PassResult:
        items = self.items()
        for item in items:
            key = (item.service.id.name, item.lifecycle.component)
            self.max_rows[key] = max(self.max_rows[key], most_wanted(item.lifecycle))
        with SimCluster(self.path) as cluster:
            target = cluster if kill_after is None else KillAfter(cluster, kill_after)
            result = run_pass(target, items)
            self.passes += 1
            self.results.append(result)
            # A killed pass may leave a gang half-created; the next pass completes it.
            check_invariants(cluster, self.max_rows, items,
                             whole=kill_after is None and self.strict_gangs,
                             counted=kill_after is None and not result.errors)
        for watch in self.watches:
            watch(self)
        return result

    def advance(self, seconds: float) -> None:
        with SimCluster(self.path) as cluster:
            cluster.advance(seconds)

    def settle(self, result: PassResult) -> bool:
        """Move the clock to the next change; False when nothing will change."""
        with SimCluster(self.path) as cluster:
            if result.applied:
                nxt = cluster.next_transition_at()
                gap = 0.0 if nxt is None else min(1.0, (nxt - cluster.now()).total_seconds())
                cluster.advance(max(gap, 0.0))
                return True
            wakes = [t for t in (result.wake_at, cluster.next_transition_at()) if t]
            if not wakes:
                return False
            cluster.advance(max(0.0, (min(wakes) - cluster.now()).total_seconds()))
            return True

    def until_idle(self, max_passes: int = 300) -> PassResult:
        for _ in range(max_passes):
            result = self.run_pass()
            if not result.busy or not self.settle(result):
                return result
        raise AssertionError(f"still busy after {max_passes} passes")

    def until(self, predicate, max_passes: int = 300) -> PassResult:
        """Passes until ``predicate(self)`` holds after one."""
        for _ in range(max_passes):
            result = self.run_pass()
            if predicate(self):
                return result
            if not self.settle(result):
                raise AssertionError("nothing left to happen and the condition never held")
        raise AssertionError(f"condition not reached in {max_passes} passes")

    # -- reading the cluster ----------------------------------------------------

    def replica(self, name: str) -> dict:
        with SimCluster(self.path) as cluster:
            for replica in cluster.list_objects(INFERENCE_REPLICA):
                if replica["metadata"]["name"] == name:
                    return replica
        raise KeyError(name)

    def rows(self, name: str) -> list[dict]:
        return decode_rows(self.replica(name)["status"]["instances"])

    def pods(self, prefix: str = "") -> list[dict]:
        with SimCluster(self.path) as cluster:
            return [p for p in cluster.list_pods() if p["metadata"]["name"].startswith(prefix)]

    def fault(self, kind: str, pod: str | None = None, clear: bool = False,
              image: str | None = None) -> None:
        self.strict_gangs = False
        with SimCluster(self.path) as cluster:
            cluster.inject_fault(kind, pod=pod, clear=clear, image=image)

    def events(self, reason: str | None = None) -> list[dict]:
        with SimCluster(self.path) as cluster:
            events = cluster.list_objects("Event")
        return [e for e in events if reason in (None, e["reason"])]

    def status(self, name: str) -> dict:
        return self.replica(name)["status"]

    def now(self):
        with SimCluster(self.path) as cluster:
            return cluster.now()


def most_wanted(lifecycle) -> int:
    """The most Instances a component may want: Git's count, or an autoscaler's bound."""
    return lifecycle.bounds[1] if lifecycle.bounds is not None else lifecycle.replicas


def check_invariants(cluster, max_rows: Counter, items, whole: bool = True,
                     short: dict | None = None, counted: bool = False) -> None:
    """What must hold after every pass, whatever the scenario.

    ``counted``: the pass wrote every status it planned, and nothing moved since (sim:),
    so the counts it stored can be held to the pods (``_check_available``).

    ``short``: where pods change on their own between a pass and this check (the real
    control plane, whose kwok stages and controllers act while the pass runs), the Ready
    rows found short of pods after the previous pass; a row is only wrong once a pass
    that could see its missing pods left it so. The caller keeps the dict between
    passes. Without it (sim:, where nothing moves between a pass and the check), the
    first sighting fails."""
    pods = cluster.list_pods()
    by_instance: dict[tuple, list[dict]] = {}
    for pod in pods:
        meta = pod["metadata"]
        labels = meta["labels"]
        assert labels.get(MANAGED_BY) == "omegitops", meta["name"]
        match = POD_NAME.match(meta["name"])
        assert match, meta["name"]
        assert match["isvc"] == labels[LABEL_ISVC]
        assert match["component"] == labels[LABEL_COMPONENT]
        assert match["index"] == labels[LABEL_INDEX]
        assert match["runner"] == labels[LABEL_RUNNER]
        assert labels[LABEL_INCARNATION].isdigit() and labels[LABEL_REVISION]
        assert {"conditionType": SERVING_GATE} in pod["spec"]["readinessGates"]
        key = (meta["namespace"], labels[LABEL_ISVC], labels[LABEL_COMPONENT],
               int(labels[LABEL_INDEX]))
        by_instance.setdefault(key, []).append(pod)
    _check_revision_labels(cluster, pods)
    sizes = _stored_sizes(cluster)
    shapes = {(i.service.id.namespace, i.service.id.name, i.lifecycle.component): i.lifecycle
              for i in items}
    live_by_component: Counter = Counter()
    for key, members in by_instance.items():
        live = [p for p in members if not P.is_terminating(p) and not P.has_ended(p)]
        lifecycle = shapes.get(key[:3])
        if lifecycle is None:
            continue
        live_by_component[key[:3]] += len(live)
        if lifecycle.shape == "gang":
            # The size of the revision the gang runs: a resized gang moves as a new one.
            revisions = {P.revision_of(p) for p in live}
            workers = sizes.get((key[0], revisions.pop())) if len(revisions) == 1 else None
            want = 1 + (lifecycle.worker_size if workers is None else workers)
            # A gang is created, routed, moved and deleted whole, on one revision.
            if whole:
                assert len(live) in (0, want), (key, [p["metadata"]["name"] for p in live])
            assert len({P.revision_of(p) for p in live}) <= 1, f"gang {key} mixes revisions"
            if lifecycle.settings.restart_policy != "None":
                # Under None one pod is restarted alone, one incarnation higher.
                assert len({P.incarnation_of(p) for p in live}) <= 1, f"gang {key} mixes pods"
            gates = {P.gate_set(p) for p in live}
            if lifecycle.settings.restart_policy != "None":
                # Under None the others serve on while one replaced pod comes up.
                assert len(gates) <= 1, f"gang {key} is partly in rotation"
        else:
            # The Instance's pod, and at most one surge replacement beside it.
            assert len(live) <= 2, (key, [p["metadata"]["name"] for p in live])
    for key, lifecycle in shapes.items():
        if not lifecycle.managed:
            continue
        need = 1 + max([lifecycle.worker_size] + [
            size for (namespace, revision), size in sizes.items()
            if namespace == key[0] and revision.startswith(f"{key[1]}-{key[2]}-")]) \
            if lifecycle.shape == "gang" else 1
        # Scaling down from the most this component wanted shrinks a percentage budget,
        # but the Instances on their way out still hold their pods until unrouted.
        most = max_rows[(key[1], key[2])]
        surge = scaled_value(lifecycle.settings.max_surge, most)
        group = lifecycle.fields.get("group")
        if group is not None and isinstance(group.value, dict) \
                and group.value.get("strategy") == "blueGreen":
            surge = None  # a blue-green group brings its whole new set up at once
        ceiling = most + (surge if surge is not None else most)
        assert live_by_component[key] <= ceiling * need, (key, live_by_component[key])
    replicas = cluster.list_objects(INFERENCE_REPLICA, MANAGED)
    seen_short: dict = {}
    for replica in replicas:
        rows = decode_rows((replica.get("status") or {}).get("instances"))
        indices = [row["index"] for row in rows]
        assert len(indices) == len(set(indices)), f"{replica['metadata']['name']}: doubled"
        spec = replica["spec"]
        most = max_rows[(spec["inferenceService"], spec["component"])]
        # Beyond the desired Instances, rows are surge replacements or going away.
        filling = [r for r in rows if r.get("surgeOf") is None and r["phase"] != "Deleting"]
        assert len(filling) <= most, rows
        namespace = replica["metadata"]["namespace"]
        for key in by_instance:
            if key[:3] == (namespace, spec["inferenceService"], spec["component"]):
                assert key[3] in indices, f"pods of Instance {key} have no row"
        component = (namespace, spec["inferenceService"], spec["component"])
        if component in shapes:
            _check_ready_rows(rows, by_instance, component, shapes[component], sizes,
                              short, seen_short)
            if counted:
                _check_available(replica, rows, by_instance, component,
                                 shapes[component], sizes, cluster.now().timestamp())
    if short is not None:
        short.clear()
        short.update(seen_short)


def _check_ready_rows(rows: list[dict], by_instance: dict[tuple, list[dict]],
                      component: tuple, lifecycle, sizes: dict,
                      before: dict | None = None, seen: dict | None = None) -> None:
    """No Ready row stands with fewer pods than it needs (restart-policy.txt: such an
    Instance is restarted), so none is left Ready with nothing to serve. With
    ``before`` (see check_invariants) a row fails only when it was short after the
    previous pass too; ``seen`` collects this check's short rows."""
    for row in rows:
        if row["phase"] != "Ready" or row.get("operation"):
            continue
        members = by_instance.get((*component, row["index"]), [])
        live = [p for p in members if not P.is_terminating(p) and not P.has_ended(p)]
        if lifecycle.shape == "gang":
            workers = sizes.get((component[0], row["revision"]))
            need = 1 + (lifecycle.worker_size if workers is None else workers)
        else:
            live = [p for p in live if P.ordinal_of(p) == (row.get("ordinal") or 0)]
            need = 1
        shown = f"{component[1]}-{component[2]}"
        if len(live) >= need:
            continue
        key = (*component, row["index"], row.get("incarnation"), row["revision"])
        if before is not None and key not in before:
            seen[key] = row  # type: ignore[index]
            continue
        raise AssertionError(
            f"Instance {row['index']} of {shown} is Ready with {len(live)}/{need} pods", row)


def _check_available(replica: dict, rows: list[dict], by_instance: dict[tuple, list[dict]],
                     component: tuple, lifecycle, sizes: dict, now: float) -> None:
    """Every Instance whose desired number of pods have had their containers ready for
    minReadySeconds counts as available (instances.txt, min-ready-seconds.txt), whatever
    else its index holds: a surge pod, or the leftover of a failed attempt, neither
    holds it back nor restarts its window. So availableReplicas never dips while the
    pods an Instance needs serve on."""
    window = replica["spec"].get("minReadySeconds") or 0
    expected = []
    for row in rows:
        members = by_instance.get((*component, row["index"]), [])
        live = [p for p in members if not P.is_terminating(p) and not P.has_ended(p)]
        need = 1
        if lifecycle.shape == "gang":
            revisions = {P.revision_of(p) for p in live}
            revision = revisions.pop() if len(revisions) == 1 else row["revision"]
            need = 1 + sizes.get((component[0], revision), lifecycle.worker_size)
        ready = [p for p in live if P.containers_ready(p)
                 and (P.condition(p, "ContainersReady")[1] or 0.0) + window <= now]
        if len(ready) >= need:
            expected.append(row["index"])
    counted = (replica.get("status") or {}).get("availableReplicas") or 0
    assert counted >= len(expected), (
        f"{replica['metadata']['name']}: availableReplicas {counted}, but the pods of "
        f"Instances {expected} have been ready for {window} s")


def _stored_sizes(cluster) -> dict[tuple[str, str], int]:
    """(namespace, revision) -> the worker count its stored worker template holds."""
    sizes = {}
    for revision in cluster.list_objects(CONTROLLER_REVISION):
        worker = ((revision.get("data") or {}).get("templates") or {}).get("worker") or {}
        if isinstance(worker.get("size"), int):
            sizes[(revision["metadata"]["namespace"], revision["metadata"]["name"])] = \
                worker["size"]
    return sizes


def _check_revision_labels(cluster, pods: list[dict]) -> None:
    """A pod never carries a revision label whose template it does not run: its
    containers' images are those its ``ome.io/revision`` stores for its runner (a
    revision whose ControllerRevision is gone can't be checked, and is skipped)."""
    stored = {(r["metadata"]["namespace"], r["metadata"]["name"]):
              (r.get("data") or {}).get("templates") or {}
              for r in cluster.list_objects(CONTROLLER_REVISION)}
    for pod in pods:
        meta = pod["metadata"]
        templates = stored.get((meta["namespace"], meta["labels"][LABEL_REVISION]))
        template = (templates or {}).get(meta["labels"][LABEL_RUNNER])
        if template is None:
            continue
        want = {c["name"]: c.get("image") for c in template["spec"].get("containers") or []}
        have = {c["name"]: c.get("image") for c in pod["spec"]["containers"]}
        assert have == want, (f"pod {meta['name']} is labelled {meta['labels'][LABEL_REVISION]}"
                              f" ({want}) but runs {have}")


def converged(tmp_path: Path, **service):
    """A one-service repository (``tests.fleet.write_service``) brought to rest, and a
    ``change(**more)`` that rewrites it with some arguments changed."""
    from tests.fleet import write_service

    repo = tmp_path / "repo"
    write_service(repo, **service)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()

    def change(**more):
        write_service(repo, **{**service, **more})

    return scenario, change
