"""``SimCluster``: the ``Cluster`` interface over a JSON file, with a clock, scheduler and kubelet.

Usage::

    with SimCluster(".omegitops/cluster.json") as cluster:
        cluster.create_pod(pod)
        cluster.advance(30)

Entering takes the file's lock and loads it (a missing file is a fresh cluster);
leaving without an exception saves it atomically. The simulated control plane
only moves inside ``advance``: writes through the API take effect at the
current instant (a deleted pod starts terminating, a patched container
restarts), while scheduling, pulls, probes and back-offs happen as the clock
moves. A new pod is therefore bound by the next ``advance``, even ``advance(0)``,
which ``next_transition_at`` announces by returning ``now``.
"""

from __future__ import annotations

import copy
import marshal
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from omegitops.capacity import nodes
from omegitops.capacity.scheduler import Gang, NodeRoom, Round, pod_requests
from omegitops.capacity.sizing import NodePool
from omegitops.cluster import base
from omegitops.cluster.base import Cluster
from omegitops.cluster.errors import AlreadyExists, Conflict, Invalid, NotFound, object_id
from omegitops.cluster.sequences import SEQUENCE_ANNOTATION, already_counted
from omegitops.cluster.sim import disruption, faults
from omegitops.cluster.sim.kubelet import Host, PodWorker, new_pod_record
from omegitops.cluster.sim.podstatus import (
    KUBELET_CONDITIONS,
    render,
    render_unscheduled,
    set_condition,
)
from omegitops.cluster.sim.store import (
    FileLock,
    check_writable,
    fresh_state,
    load_state,
    save_state,
)
from omegitops.cluster.sim.timeline import Timeline
from omegitops.model import podrules
from omegitops.util.errors import ClusterError
from omegitops.util.gcpause import gc_paused
from omegitops.util.times import format_time, parse_time, to_datetime

DEFAULT_GRACE_SECONDS = 30
CLUSTER_SCOPED = {base.NODE}
# kube-apiserver's default --event-ttl.
EVENT_TTL_SECONDS = 3600.0
BASE_KINDS = {
    base.POD, base.NODE, base.EVENT, base.INFERENCE_REPLICA, base.CONTROLLER_REVISION,
    base.SERVICE, base.POD_DISRUPTION_BUDGET,
}
TERMINAL = ("Succeeded", "Failed")
# The label by which the coscheduling plugin finds a pod's PodGroup.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def clone(value):
    """A copy of plain JSON data; several times faster than copy.deepcopy (no memo)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def clone_all(values: list[dict]) -> list[dict]:
    """Copies of many JSON objects at once: marshal's C round trip beats any Python walk.
    With the collector paused, as the kube backend decodes a LIST: the copies' millions
    of allocations would set off full collections of the whole simulated cluster."""
    with gc_paused():
        return marshal.loads(marshal.dumps(values))


def _labels_match(obj: dict, labels: dict[str, str] | None) -> bool:
    if not labels:
        return True
    have = obj["metadata"].get("labels") or {}
    return labels.items() <= have.items()  # a subset, checked in C


class SimCluster(Cluster):
    """A simulated cluster kept in one JSON file (``sim:PATH``)."""

    poll_seconds = None  # it knows when its next transition is
    lists_nodes = True

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = FileLock(self.path.with_name(self.path.name + ".lock"))
        self._state: dict | None = None
        self._dirty = False

    # -- creating and opening ---------------------------------------------------

    @classmethod
    def init(cls, path: str | Path, nodes: int = 8, gpus_per_node: int = 8,
             podgroups: bool = False, cpu_nodes: int = 2,
             pools: list[NodePool] | None = None) -> None:
        """Write a fresh cluster to ``path`` (replacing any), holding the lock meanwhile.

        ``pools`` (``sizing.size_for``) replaces the default nodes with pools sized
        to a repository."""
        cluster = cls(path)
        cluster._lock.acquire()
        if pools is None:
            pools = default_pools(nodes, gpus_per_node, cpu_nodes)
        try:
            cluster._adopt(_fresh_cluster_state(pools, podgroups))
            cluster.save()
        finally:
            cluster._lock.release()

    def __enter__(self) -> Self:
        self._lock.acquire()
        try:
            check_writable(self.path)
            # Read with the collector paused: the millions of objects of a large state
            # set off full collections of everything read so far (2.5 times the read).
            with gc_paused():
                state = load_state(self.path)
                if state is None:
                    state = _fresh_cluster_state(default_pools(), False)
                    self._dirty = True
                self._adopt(state)
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # An exception leaves the file as it was: half a reconcile pass is never saved.
        try:
            if exc_type is None and self._dirty:
                self.save()
        finally:
            self._state = None
            self._lock.release()

    def save(self) -> None:
        """Write the state now (atomically)."""
        state = self._require()
        state["clock"] = format_time(self._clock)
        save_state(self.path, state)
        self._dirty = False

    def _adopt(self, state: dict) -> None:
        """Take ``state`` as the current state and build the in-memory indices."""
        self._state = state
        self._objects: dict[str, dict[str, dict]] = state["objects"]
        self._sim: dict = state["sim"]
        self._clock = parse_time(state["clock"])
        for kind in BASE_KINDS:
            self._objects.setdefault(kind, {})
        self._pod_keys = {p["metadata"]["uid"]: k for k, p in self._objects[base.POD].items()}
        self._event_keys = {_event_identity(e): k for k, e in self._objects[base.EVENT].items()}
        self._timeline = Timeline()
        for uid, rec in self._sim["pods"].items():
            self._timeline.set(("pod", uid), rec.get("next"))
        for name, nrec in self._sim["nodes"].items():
            self._timeline.set(("node", name), nrec.get("next"))

    def _require(self) -> dict:
        if self._state is None:
            raise ClusterError(f"{self.path}: the simulated cluster is not open (use 'with')")
        return self._state

    # -- time ---------------------------------------------------------------------

    @property
    def pull_seconds(self) -> float:
        """How long a pull of an image not yet on a node takes here."""
        return float(self._require()["settings"]["pullSeconds"])

    def now(self) -> datetime:
        self._require()
        return to_datetime(self._clock)

    def advance(self, seconds: float) -> datetime:
        """Move the clock by ``seconds``, running every transition on the way in time order."""
        self._require()
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        target = self._clock + seconds
        self._schedule_if_needed()
        while (when := self._timeline.peek()) is not None and when <= target:
            when, (what, key) = cast("tuple[float, Any]", self._timeline.pop())
            self._clock = max(self._clock, when)
            if what == "pod":
                self._process_pod(key)
            else:
                self._process_node(key)
            self._schedule_if_needed()
        self._clock = target
        self._expire_events()
        self._dirty = True
        return self.now()

    def _expire_events(self) -> None:
        """Drop Events not written for an hour, as the API server does (``--event-ttl``,
        1h by default, renewed by each write such as a count going up)."""
        events = self._objects[base.EVENT]
        for key, event in list(events.items()):
            last = event.get("lastTimestamp") or event["metadata"].get("creationTimestamp")
            if last and parse_time(last) + EVENT_TTL_SECONDS <= self._clock:
                del events[key]
                self._event_keys.pop(_event_identity(event), None)

    def next_transition_at(self) -> datetime | None:
        self._require()
        if self._sim.get("schedulerDirty"):
            return self.now()
        when = self._timeline.peek()
        return None if when is None else to_datetime(max(when, self._clock))

    # -- discovery ---------------------------------------------------------------

    def has_kind(self, kind: str) -> bool:
        state = self._require()
        return kind in BASE_KINDS or (kind == base.POD_GROUP and state["settings"]["podGroupCRD"])

    # -- pods --------------------------------------------------------------------

    def list_pods(self, labels: dict[str, str] | None = None) -> list[dict]:
        self._require()
        pods = self._objects[base.POD].values()
        return clone_all([p for p in pods if _labels_match(p, labels) and self.in_scope(p)])

    def create_pod(self, pod: dict) -> dict:
        self._require()
        pod = clone(pod)
        pod["kind"] = base.POD
        pod.setdefault("apiVersion", "v1")
        _check_pod(pod)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        key = f"{namespace}/{name}"
        if key in self._objects[base.POD]:
            raise AlreadyExists(f"{object_id('Pod', namespace, name)} already exists")
        self._fill_metadata(pod)
        _default_host_ports(pod["spec"])
        pod["status"] = {"phase": "Pending"}
        rec = new_pod_record(pod, pod_requests(pod))
        uid = pod["metadata"]["uid"]
        self._objects[base.POD][key] = pod
        self._pod_keys[uid] = key
        self._sim["pods"][uid] = rec
        self._sim["schedulerDirty"] = True
        return clone(pod)

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        pod = self._pod(namespace, name)
        self._delete_pod(pod, grace_seconds)

    def evict_pod(self, namespace: str, name: str) -> None:
        """The eviction API: the pod goes with its grace unless a PodDisruptionBudget
        refuses (``disruption.EvictionRefused``)."""
        pod = self._pod(namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            return
        budgets = list(self._objects.get(base.POD_DISRUPTION_BUDGET, {}).values())
        why = disruption.refusal(budgets, pod, list(self._objects[base.POD].values()))
        if why is not None:
            raise disruption.EvictionRefused(f"{object_id('Pod', namespace, name)}: {why}")
        self._delete_pod(pod, None)

    def set_pod_condition(self, namespace: str, name: str, type: str, status: bool,
                          reason: str = "", message: str = "", seen: dict | None = None) -> dict:
        pod = self._pod(namespace, name)
        if type in KUBELET_CONDITIONS:
            raise Invalid(f"{object_id('Pod', namespace, name)}: condition {type} is owned by the "
                          "kubelet")
        set_condition(pod.setdefault("status", {}), type, status, self._clock, reason, message)
        rec = self._rec(pod)
        if rec["node"] is not None:
            self._render(pod, rec)
        self._bump(pod)
        return clone(pod)

    def patch_pod_images(self, namespace: str, name: str, images: dict[str, str],
                         labels: dict[str, str] | None = None) -> dict:
        pod = self._pod(namespace, name)
        containers = {c["name"]: c for c in pod["spec"]["containers"]}
        for container in images:
            if container not in containers:
                raise Invalid(f"{object_id('Pod', namespace, name)}: no container {container!r} "
                              "(only regular containers' images can change in place)")
        for key, value in (labels or {}).items():
            if not isinstance(value, str):
                raise Invalid(f"{object_id('Pod', namespace, name)}: label {key!r} must be a "
                              "string")
        # Labels are metadata, which a patch may change; they land with the images.
        pod["metadata"].setdefault("labels", {}).update(labels or {})
        for container, image in images.items():
            containers[container]["image"] = image
        if not images:
            self._bump(pod)
            return clone(pod)
        rec = self._rec(pod)
        if rec["node"] is not None and not self._node_down(rec["node"]):
            worker = self._worker(pod, rec)
            worker.patch_images(self._clock, images)
            self._after_kubelet(pod, rec, worker)
        elif rec["node"] is None:
            for c in rec["containers"]:
                c["image"] = containers[c["name"]]["image"]
        self._bump(pod)
        return clone(pod)

    # -- other kinds --------------------------------------------------------------

    def list_objects(self, kind: str, labels: dict[str, str] | None = None,
                     fields: dict[str, str] | None = None,
                     transform: Callable[[dict], dict] | None = None) -> list[dict]:
        found = list(self._kind(kind).values())
        # Each filter only when asked for: a pass lists every managed object of a kind.
        if labels:
            found = [o for o in found if _labels_match(o, labels)]
        if fields:
            wanted = [(path.split("."), value) for path, value in fields.items()]
            found = [o for o in found if all(base.field_value(o, parts) == value
                                             for parts, value in wanted)]
        if self.namespace_scope is not None:
            found = [o for o in found if self.in_scope(o)]
        if transform is None:
            return clone_all(found)
        # Cut first, then copy what is kept: a transform never changes what it is given
        # (Cluster.list_objects), and a trimmed pod is a fraction of a whole one.
        cut = [transform(o) for o in found]
        try:
            return clone_all(cut)
        except ValueError:  # what marshal cannot copy (Packed) is a copy of its own
            return [clone(o) for o in cut]

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict | None:
        obj = self._kind(kind).get(self._key(kind, namespace, name))
        return clone(obj) if obj is not None else None

    def create_object(self, obj: dict) -> dict:
        if obj.get("kind") == base.POD:
            return self.create_pod(obj)
        obj = clone(obj)
        kind, namespace, name = self._identity(obj)
        objects = self._kind(kind)
        key = self._key(kind, namespace, name)
        if key in objects:
            raise AlreadyExists(f"{object_id(kind, namespace, name)} already exists")
        self._fill_metadata(obj)
        obj["metadata"]["generation"] = 1
        objects[key] = obj
        if kind == base.NODE:
            self._node_joins(name)
        if kind == base.POD_GROUP:
            self._sim["schedulerDirty"] = True  # its pods may now go together
        return clone(obj)

    def replace_object(self, obj: dict) -> dict:
        kind, _, _ = self._identity(obj)
        stored = self._stored_for_update(obj)
        if kind == base.POD:
            _check_pod_update(stored, obj)
        metadata = clone(obj["metadata"])
        for field in ("uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "namespace", "name", "generation"):
            if field in stored["metadata"]:
                metadata[field] = stored["metadata"][field]
            else:
                metadata.pop(field, None)
        spec = clone(obj.get("spec"))
        if kind != base.POD and spec != stored.get("spec"):
            metadata["generation"] = stored["metadata"].get("generation", 1) + 1
        stored["metadata"] = metadata
        if kind == base.POD:
            self._replace_pod_spec(stored, spec)
        elif spec is not None:
            stored["spec"] = spec
        self._bump(stored)
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            self._finalize(kind, stored)
        if kind == base.NODE:
            self._sim["schedulerDirty"] = True
            self._process_node(stored["metadata"]["name"])  # new taints act at once
        if kind == base.POD_GROUP:
            self._sim["schedulerDirty"] = True  # a new minMember
        return clone(stored)

    def replace_status(self, obj: dict) -> dict:
        kind, _, _ = self._identity(obj)
        if kind == base.POD:
            raise Invalid("pod status belongs to the kubelet; use set_pod_condition")
        stored = self._stored_for_update(obj)
        stored["status"] = clone(obj.get("status", {}))
        self._bump(stored)
        return clone(stored)

    def delete_object(self, kind: str, namespace: str | None, name: str) -> None:
        if kind == base.POD:
            return self.delete_pod(namespace or "", name)
        if kind == base.NODE:
            raise Invalid(f"{object_id(kind, None, name)}: the simulator's nodes are removed "
                          "with the node-removed fault")
        objects = self._kind(kind)
        key = self._key(kind, namespace, name)
        obj = objects.get(key)
        if obj is None:
            raise NotFound(f"{object_id(kind, namespace, name)} not found")
        if obj["metadata"].get("finalizers"):
            # As the API server: the object stays, terminating, until its finalizers are removed.
            obj["metadata"].setdefault("deletionTimestamp", format_time(self._clock))
            self._bump(obj)
            return
        self._finalize(kind, obj)
        if kind == base.POD_GROUP:
            self._sim["schedulerDirty"] = True  # its pods are scheduled one by one now

    def record_event(self, event: dict) -> dict | None:
        self._require()
        involved = event.get("involvedObject") or {}
        if not involved.get("kind") or not involved.get("name"):
            raise Invalid("Event: involvedObject.kind and involvedObject.name are required")
        event = clone(event)
        event.setdefault("type", "Normal")
        now = format_time(self._clock)
        identity = _event_identity(event)
        key = self._event_keys.get(identity)
        events = self._objects[base.EVENT]
        if key is not None and key in events:
            stored = events[key]
            if already_counted(stored, event):
                return None  # a resend of an outbox entry this Event has counted
            stored["count"] = stored.get("count", 1) + 1
            stored["lastTimestamp"] = now
            sequence = (event.get("metadata") or {}).get("annotations", {}).get(
                SEQUENCE_ANNOTATION)
            if sequence is not None:
                stored["metadata"].setdefault("annotations", {})[SEQUENCE_ANNOTATION] = sequence
            self._bump(stored)
            return clone(stored)
        namespace = (event.get("metadata") or {}).get("namespace") or involved.get("namespace") \
            or "default"
        counters = cast(dict, self._state)["counters"]
        counters["event"] += 1
        event["apiVersion"], event["kind"] = "v1", base.EVENT
        event["metadata"] = {
            **(event.get("metadata") or {}),
            "name": f"{involved['name']}.{counters['event']:016x}",
            "namespace": namespace,
        }
        event.update(count=1, firstTimestamp=now, lastTimestamp=now)
        event.setdefault("source", {"component": "omegitops"})
        self._fill_metadata(event)
        key = f"{namespace}/{event['metadata']['name']}"
        events[key] = event
        self._event_keys[identity] = key
        return clone(event)

    def inference_service_uid(self, namespace: str, name: str) -> str | None:
        # The simulated API holds no InferenceServices (they live in Git), so its Events,
        # as on a cluster without OME's CRDs, name the service without a uid.
        return None

    # -- faults ------------------------------------------------------------------

    def inject_fault(self, kind: str, pod: str | None = None, namespace: str | None = None,
                     image: str | None = None, node: str | None = None,
                     clear: bool = False) -> str:
        """Inject (or with ``clear`` remove) a fault; returns a one-line description."""
        self._require()
        return faults.apply(self, kind, pod=pod, namespace=namespace, image=image, node=node,
                            clear=clear)

    # -- the scheduler ----------------------------------------------------------

    def _schedule_if_needed(self) -> None:
        if self._sim.get("schedulerDirty"):
            self._schedule()

    def _schedule(self) -> None:
        """One scheduling round: every unbound pod, oldest first, onto the first node it fits."""
        self._sim["schedulerDirty"] = False
        records = self._sim["pods"]
        pending = sorted(uid for uid, rec in records.items()
                         if rec["node"] is None and rec["terminating"] is None)
        if not pending:
            return
        rooms = {name: NodeRoom.of(node) for name, node in self._objects[base.NODE].items()}
        for uid, rec in records.items():
            if rec["node"] in rooms and not self._releases_resources(uid, rec):
                rooms[rec["node"]].take(rec["requests"])
        round_ = Round(list(rooms.values()))
        gangs: dict[str, list[tuple[dict, dict]]] = {}
        for uid in pending:
            pod, rec = self._objects[base.POD][self._pod_keys[uid]], records[uid]
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["spec"].get("schedulingGates"):
                self._mark_unschedulable(pod, rec, "SchedulingGated",
                                         "Scheduling is blocked due to non-empty scheduling gates")
                continue
            wanted = pod["spec"].get("nodeName")
            gang = None if wanted else self._gang_key(pod)
            if gang is not None:
                gangs.setdefault(gang, []).append((pod, rec))
                continue
            if wanted:
                room, message = rooms.get(wanted), f"node {wanted} does not exist"
                if room:
                    room.take(rec["requests"])
            else:
                room, message = round_.place(pod, rec["requests"])
            self._place(pod, rec, room, message)
        # Gangs after single pods: the coscheduling plugin's queue sort keeps a group's
        # pods together; which comes first within a round is the simulator's choice.
        for key, members in gangs.items():
            outcomes = round_.place_gang(self._gang(key),
                                         [(pod, rec["requests"]) for pod, rec in members])
            for (pod, rec), (room, message) in zip(members, outcomes, strict=True):
                self._place(pod, rec, room, message)

    def _place(self, pod: dict, rec: dict, room: NodeRoom | None, message: str) -> None:
        if room is None:
            self._mark_unschedulable(pod, rec, "Unschedulable", message)
        else:
            self._bind(pod, rec, room.name)

    def _gang_key(self, pod: dict) -> str | None:
        """``namespace/name`` of the PodGroup the pod belongs to, when the PodGroup kind is
        installed and that group exists (the coscheduling plugin schedules a pod whose
        group is missing as any other pod)."""
        if not cast(dict, self._state)["settings"]["podGroupCRD"]:
            return None
        group = (pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)
        if not group:
            return None
        key = f"{pod['metadata']['namespace']}/{group}"
        return key if key in self._objects.get(base.POD_GROUP, {}) else None

    def _gang(self, key: str) -> Gang:
        namespace, name = key.split("/", 1)
        minimum = (self._objects[base.POD_GROUP][key].get("spec") or {}).get("minMember")
        pods = bound = 0
        for pod in self._objects[base.POD].values():
            meta = pod["metadata"]
            if (meta["namespace"] != namespace or meta.get("deletionTimestamp")
                    or (meta.get("labels") or {}).get(POD_GROUP_LABEL) != name):
                continue
            pods += 1
            rec = self._sim["pods"][meta["uid"]]
            bound += rec["node"] is not None and pod["status"].get("phase") not in TERMINAL
        return Gang(key, int(minimum) if isinstance(minimum, int) else 1, pods, bound)

    def _releases_resources(self, uid: str, rec: dict) -> bool:
        pod = self._objects[base.POD].get(self._pod_keys.get(uid, ""))
        return pod is None or pod["status"].get("phase") in TERMINAL

    def _mark_unschedulable(self, pod: dict, rec: dict, reason: str, message: str) -> None:
        if rec["tried"] and rec["message"] == message:
            return  # nothing changed: no write, no new resourceVersion
        rec["tried"], rec["message"] = True, message
        render_unscheduled(pod, rec, self._clock, reason)
        self._bump(pod)

    def _bind(self, pod: dict, rec: dict, node_name: str) -> None:
        node = self._objects[base.NODE][node_name]
        pod["spec"]["nodeName"] = node_name
        rec["node"] = node_name
        rec["ip"] = self._new_ip()
        rec["hostIP"] = node["status"]["addresses"][0]["address"]
        if self._node_down(node_name):
            self._render(pod, rec)  # bound, but the silent kubelet never starts it
            self._bump(pod)
            return
        worker = self._worker(pod, rec)
        worker.start(self._clock)
        worker.sync(self._clock)
        self._after_kubelet(pod, rec, worker)

    # -- the kubelet -------------------------------------------------------------

    def _process_pod(self, uid: str) -> None:
        key = self._pod_keys.get(uid)
        if key is None:
            return
        pod, rec = self._objects[base.POD][key], self._sim["pods"][uid]
        rec["next"] = None
        if rec["node"] is None:
            return
        if self._node_down(rec["node"]):
            # Nobody reports for this pod, and nobody confirms that it stopped: a deleted
            # one stays Terminating until its node reports again or PodGC removes it.
            return
        worker = self._worker(pod, rec)
        worker.sync(self._clock)
        self._after_kubelet(pod, rec, worker)

    def _after_kubelet(self, pod: dict, rec: dict, worker: PodWorker) -> None:
        """After the kubelet acted on a pod: reap it if done, else publish its status."""
        was_terminal = pod["status"].get("phase") in TERMINAL
        if (rec["terminating"] is not None or rec["deadline"] is not None) and worker.finished():
            self._render(pod, rec)
            self._remove_or_hold(pod)
            return
        self._render(pod, rec)
        self._bump(pod)
        if pod["status"].get("phase") in TERMINAL and not was_terminal:
            self._sim["schedulerDirty"] = True
        self._set_next(pod["metadata"]["uid"], rec, worker.next_time(self._clock))

    def _render(self, pod: dict, rec: dict) -> None:
        nrec = self._sim["nodes"].get(rec["node"])
        # A pod whose node is gone keeps the Ready condition the node controller revoked.
        lost = nrec is None or nrec.get("lost")
        render(pod, rec, self._clock, rec["node"] if lost else None)

    def _worker(self, pod: dict, rec: dict) -> PodWorker:
        nrec = self._sim["nodes"][rec["node"]]
        fault_flags = self._sim["faults"]["pods"].get(pod["metadata"]["uid"], {})
        host = Host(images=nrec["images"], unpullable=set(self._sim["faults"]["images"]),
                    pull_seconds=cast(dict, self._state)["settings"]["pullSeconds"])
        return PodWorker(pod, rec, host, fault_flags)

    def _set_next(self, uid: str, rec: dict, when: float | None) -> None:
        rec["next"] = when
        self._timeline.set(("pod", uid), when)

    # -- deletion ----------------------------------------------------------------

    def _delete_pod(self, pod: dict, grace_seconds: int | None) -> None:
        rec = self._rec(pod)
        grace = self._deletion_grace(pod, rec, grace_seconds)
        silent = rec["node"] is not None and self._node_down(rec["node"])
        if rec["node"] is None or (silent and grace == 0):
            # No kubelet has anything to stop, or a force delete asks none: gone at once.
            self._force_remove(pod)
            return
        if not self._stamp_deletion(pod, rec, grace):
            return
        self._bump(pod)
        if silent:
            return  # Terminating until the node reports again or PodGC removes it
        worker = self._worker(pod, rec)
        worker.terminate(self._clock, rec["deadline"])
        self._after_kubelet(pod, rec, worker)

    @staticmethod
    def _deletion_grace(pod: dict, rec: dict, grace_seconds: int | None) -> int:
        """The grace the API server gives a delete (its CheckGracefulDelete)."""
        if grace_seconds is None:
            grace_seconds = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        if rec["node"] is None or pod["status"].get("phase") in TERMINAL:
            return 0  # as the API server: no kubelet has anything to stop
        return max(0, grace_seconds)

    def _stamp_deletion(self, pod: dict, rec: dict, grace: int) -> bool:
        """deletionTimestamp = now + grace; False when the pod already goes no later (a
        second delete never extends the grace, and one that does not shorten it is a no-op)."""
        deadline = self._clock + grace
        if rec["deadline"] is not None and deadline >= rec["deadline"]:
            return False
        meta = pod["metadata"]
        meta["deletionTimestamp"] = format_time(deadline)
        meta["deletionGracePeriodSeconds"] = grace
        rec["deadline"] = deadline
        return True

    def _force_remove(self, pod: dict) -> None:
        """A delete with grace 0 (a force delete, or PodGC's): the pod leaves the API at
        once, unless finalizers keep it listed; a kubelet that reports later finds it gone."""
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
            return  # already confirmed; only its finalizers keep it
        rec = self._rec(pod)
        rec["terminating"] = rec["terminating"] or self._clock
        rec["deadline"] = self._clock if rec["deadline"] is None else min(rec["deadline"],
                                                                            self._clock)
        self._remove_or_hold(pod)

    def _zero_grace(self, meta: dict) -> None:
        """A delete with grace 0 as the API server records it: on a pod already being
        deleted, the deletionTimestamp moves back by the grace it had, which becomes 0."""
        stamp = meta.get("deletionTimestamp")
        start = parse_time(stamp) - meta.get("deletionGracePeriodSeconds", 0) if stamp else (
            self._clock)
        meta["deletionTimestamp"] = format_time(start)
        meta["deletionGracePeriodSeconds"] = 0

    def _remove_or_hold(self, pod: dict) -> None:
        """The pod's deletion is confirmed (its containers are gone, or nobody waits for
        them): remove it, unless finalizers keep it listed."""
        uid = pod["metadata"]["uid"]
        rec = self._sim["pods"][uid]
        if pod["metadata"].get("finalizers"):
            # The confirmation, a delete with grace 0, lands; the finalizers hold the pod.
            self._zero_grace(pod["metadata"])
            self._bump(pod)
            self._set_next(uid, rec, None)
            return
        key = self._pod_keys.pop(uid)
        del self._objects[base.POD][key]
        del self._sim["pods"][uid]
        self._sim["faults"]["pods"].pop(uid, None)
        self._timeline.set(("pod", uid), None)
        self._sim["schedulerDirty"] = True
        self._dirty = True

    def _finalize(self, kind: str, obj: dict) -> None:
        """An object with a deletionTimestamp and no finalizers left goes away."""
        if kind == base.POD:
            rec = self._rec(obj)
            confirmed = rec["node"] is None or obj["metadata"].get("deletionGracePeriodSeconds") == 0
            # Files written before confirmations were recorded: a finished pod is confirmed.
            if confirmed or (not self._node_down(rec["node"])
                             and self._worker(obj, rec).finished()):
                self._remove_or_hold(obj)
            return
        meta = obj["metadata"]
        del self._kind(kind)[self._key(kind, meta.get("namespace"), meta["name"])]
        if kind == base.EVENT:
            self._event_keys.pop(_event_identity(obj), None)
        self._dirty = True

    # -- nodes -------------------------------------------------------------------

    def _node_down(self, name: str) -> bool:
        """Whether the node's kubelet is silent, or its machine gone."""
        nrec = self._sim["nodes"].get(name)
        return nrec is None or nrec.get("downSince") is not None

    def _pods_on(self, node_name: str) -> list[dict]:
        pods = self._objects[base.POD]
        return [pods[self._pod_keys[uid]] for uid, rec in sorted(self._sim["pods"].items())
                if rec["node"] == node_name]

    def _process_node(self, name: str) -> None:
        """What the control plane does about one node now, then when it next acts: the
        node lifecycle controller notices silence, the taint manager deletes pods past
        their tolerations, PodGC removes pods no kubelet will confirm (see ``nodes``)."""
        nrec = self._sim["nodes"].get(name)
        if nrec is None:
            return
        if nrec.get("removed") is not None:
            upcoming = self._collect_orphans(name, nrec)
        else:
            upcoming = self._notice_silence(name, nrec)
            self._note_taints(name, nrec)
            upcoming += self._evict_untolerated(name, nrec)
            upcoming += self._drain(name, nrec)
            self._collect_out_of_service(name)
        if name in self._sim["nodes"]:
            nrec["next"] = min(upcoming, default=None)
            self._timeline.set(("node", name), nrec["next"])
        self._dirty = True

    def _notice_silence(self, name: str, nrec: dict) -> list[float]:
        """The node lifecycle controller: NotReady, tainted and its pods unready at 40 s."""
        since = nrec.get("downSince")
        if since is None or nrec.get("lost"):
            return []
        lost_at = since + nodes.NODE_MONITOR_GRACE
        if self._clock < lost_at:
            return [lost_at]
        nrec["lost"] = True
        node = self._objects[base.NODE][name]
        nodes.set_ready(node, False, self._clock)
        nodes.set_unreachable_taints(node, True)
        self._bump(node)
        for pod in self._pods_on(name):
            self._render(pod, self._rec(pod))
            self._bump(pod)
        return []

    def _note_taints(self, name: str, nrec: dict) -> None:
        """When each NoExecute taint came: tolerationSeconds count from then."""
        keys = {t.get("key", "") for t in nodes.no_execute_taints(self._objects[base.NODE][name])}
        since = nrec.setdefault("noExecuteSince", {})
        for key in set(since) - keys:
            del since[key]
        for key in keys - set(since):
            lost = key == nodes.UNREACHABLE_TAINT and nrec.get("downSince") is not None
            since[key] = nrec["downSince"] + nodes.NODE_MONITOR_GRACE if lost else self._clock

    def _evict_untolerated(self, name: str, nrec: dict) -> list[float]:
        """The taint manager: it deletes a pod (it does not fail it) once a NoExecute taint
        has been on the pod's node longer than the pod tolerates; returns when it acts next."""
        taints = nodes.no_execute_taints(self._objects[base.NODE][name])
        if not taints:
            return []
        since = nrec["noExecuteSince"]
        upcoming = []
        for pod in self._pods_on(name):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            times = [since[t.get("key", "")] + delay for t in taints
                     if (delay := nodes.eviction_delay(pod, t)) is not None]
            if not times:
                continue
            if min(times) <= self._clock:
                self._delete_pod(pod, None)
            else:
                upcoming.append(min(times))
        return upcoming

    def _drain(self, name: str, nrec: dict) -> list[float]:
        """``kubectl drain`` at work on the node: each pod left is evicted, a refused one
        tried again in five seconds; once none is left the drain is over."""
        if nrec.get("draining") is None:
            return []
        refused = False
        for pod in self._pods_on(name):
            meta = pod["metadata"]
            try:
                self.evict_pod(meta["namespace"], meta["name"])
            except disruption.EvictionRefused:
                refused = True
        if refused:
            return [self._clock + disruption.DRAIN_RETRY_SECONDS]
        if not [p for p in self._pods_on(name) if not p["metadata"].get("deletionTimestamp")]:
            nrec["drained"] = self._clock
            nrec["draining"] = None
        return []

    def _collect_out_of_service(self, name: str) -> None:
        """PodGC force-deletes the terminating pods of a NotReady node tainted out-of-service
        (the node is known to be shut down, so nobody waits for its kubelet)."""
        node = self._objects[base.NODE][name]
        if nodes.is_ready(node) or not nodes.has_taint(node, nodes.OUT_OF_SERVICE_TAINT):
            return
        for pod in self._pods_on(name):
            if pod["metadata"].get("deletionTimestamp"):
                self._force_remove(pod)

    def _collect_orphans(self, name: str, nrec: dict) -> list[float]:
        """PodGC force-deletes every pod bound to a node that no longer exists, once the
        node has stayed away for the quarantine; then the node's record goes."""
        due = nrec["removed"] + nodes.PODGC_QUARANTINE
        if self._clock < due:
            return [due]
        for pod in self._pods_on(name):
            self._force_remove(pod)
        del self._sim["nodes"][name]
        self._timeline.set(("node", name), None)
        self._dirty = True
        return []

    def _node_goes_down(self, name: str) -> None:
        nrec = self._sim["nodes"][name]
        if nrec.get("downSince") is not None:
            return
        nrec["downSince"], nrec["lost"] = self._clock, False
        self._process_node(name)
        self._dirty = True

    def _node_comes_back(self, name: str) -> None:
        """The kubelet reports again: it catches up with time, deletions and image changes."""
        nrec = self._sim["nodes"][name]
        if nrec.get("downSince") is None:
            return
        nrec.update(downSince=None, lost=False, next=None)
        node = self._objects[base.NODE][name]
        nodes.set_ready(node, True, self._clock)
        nodes.set_unreachable_taints(node, False)
        self._bump(node)
        self._sim["schedulerDirty"] = True
        for pod in self._pods_on(name):
            self._catch_up(pod)
        self._process_node(name)

    def _catch_up(self, pod: dict) -> None:
        """A kubelet that reports again syncs one of its pods with what the API says now."""
        rec = self._rec(pod)
        worker = self._worker(pod, rec)
        if rec["startTime"] is None:
            worker.start(self._clock)
        worker.sync(self._clock)
        worker.patch_images(self._clock, {c["name"]: c["image"]
                                          for c in pod["spec"]["containers"]})
        faults.replay(worker, self._clock)
        if rec["deadline"] is not None:
            worker.terminate(self._clock, self._kubelet_deadline(pod, rec))
        self._after_kubelet(pod, rec, worker)

    def _kubelet_deadline(self, pod: dict, rec: dict) -> float:
        """When the kubelet kills what still runs of a deleted pod. One deleted while its
        node was silent gets the deletion's whole grace from now: the kubelet counts
        deletionGracePeriodSeconds from when it learns of the deletion."""
        if rec["terminating"] is not None:
            return rec["deadline"]  # it was stopping the pod before it went silent
        return self._clock + pod["metadata"].get("deletionGracePeriodSeconds", 0)

    def _remove_node(self, name: str) -> None:
        """The machine is gone and its Node object deleted, as a cloud provider's node
        lifecycle controller does; PodGC removes its pods after the quarantine."""
        self._node_goes_down(name)
        self._sim["nodes"][name]["removed"] = self._clock
        del self._objects[base.NODE][name]
        cordoned = self._sim["faults"]["cordoned"]
        if name in cordoned:
            cordoned.remove(name)
        self._sim["schedulerDirty"] = True
        self._process_node(name)

    def _node_joins(self, name: str) -> None:
        """A new Node object. One that takes the name of a removed node whose pods PodGC
        has not collected yet keeps them (PodGC finds the node again): its kubelet takes
        them over as a node that reports again."""
        old = self._sim["nodes"].get(name)
        self._sim["nodes"][name] = {"images": {}, "downSince": None, "next": None}
        self._sim["schedulerDirty"] = True
        if old is not None and old.get("removed") is not None:
            self._sim["nodes"][name]["downSince"] = old["downSince"]
            self._node_comes_back(name)

    # -- helpers -----------------------------------------------------------------

    def _kind(self, kind: str) -> dict[str, dict]:
        if not self.has_kind(kind):
            raise NotFound(f"kind {kind} is not served by this cluster")
        return self._objects.setdefault(kind, {})

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> str:
        return name if kind in CLUSTER_SCOPED else f"{namespace}/{name}"

    def _identity(self, obj: dict) -> tuple[str, str | None, str]:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        if not kind or not meta.get("name"):
            raise Invalid("object without kind or metadata.name")
        namespace = None if kind in CLUSTER_SCOPED else meta.get("namespace")
        if kind not in CLUSTER_SCOPED and not namespace:
            raise Invalid(f"{kind}/{meta['name']}: metadata.namespace is required")
        self._kind(kind)
        return kind, namespace, meta["name"]

    def _stored_for_update(self, obj: dict) -> dict:
        kind, namespace, name = self._identity(obj)
        stored = self._kind(kind).get(self._key(kind, namespace, name))
        if stored is None:
            raise NotFound(f"{object_id(kind, namespace, name)} not found")
        version = obj["metadata"].get("resourceVersion")
        if not version:
            raise Invalid(f"{object_id(kind, namespace, name)}: metadata.resourceVersion must be "
                          "specified for an update")
        if version != stored["metadata"].get("resourceVersion"):
            raise Conflict(
                f"{object_id(kind, namespace, name)}: the object has been modified "
                f"(resourceVersion {version}, now {stored['metadata'].get('resourceVersion')}); "
                "read it again and retry"
            )
        return stored

    def _pod(self, namespace: str, name: str) -> dict:
        self._require()
        pod = self._objects[base.POD].get(f"{namespace}/{name}")
        if pod is None:
            raise NotFound(f"{object_id('Pod', namespace, name)} not found")
        return pod

    def _rec(self, pod: dict) -> dict:
        return self._sim["pods"][pod["metadata"]["uid"]]

    def _find_pod(self, name: str, namespace: str | None) -> dict:
        """A pod by name, in any namespace when none is given (it must then be unique)."""
        if namespace:
            return self._pod(namespace, name)
        found = [p for p in self._objects[base.POD].values() if p["metadata"]["name"] == name]
        if not found:
            raise NotFound(f"Pod {name} not found in any namespace")
        if len(found) > 1:
            spaces = ", ".join(sorted(p["metadata"]["namespace"] for p in found))
            raise Invalid(f"Pod {name} exists in several namespaces ({spaces}); give one")
        return found[0]

    def _replace_pod_spec(self, pod: dict, spec: dict) -> None:
        images = {c["name"]: c["image"] for c in spec["containers"]}
        changed = {n: i for n, i in images.items()
                   if i != next(c["image"] for c in pod["spec"]["containers"] if c["name"] == n)}
        pod["spec"]["schedulingGates"] = spec.get("schedulingGates") or []
        if not pod["spec"]["schedulingGates"]:
            del pod["spec"]["schedulingGates"]
            self._sim["schedulerDirty"] = True
        for init, new in zip(pod["spec"].get("initContainers") or [],
                             spec.get("initContainers") or []):
            init["image"] = new["image"]
        if changed:
            meta = pod["metadata"]
            self.patch_pod_images(meta["namespace"], meta["name"], changed)

    def _fill_metadata(self, obj: dict) -> None:
        meta = obj.setdefault("metadata", {})
        counters = cast(dict, self._state)["counters"]
        counters["uid"] += 1
        meta["uid"] = _uid(counters["uid"])
        meta["creationTimestamp"] = format_time(self._clock)
        meta.setdefault("labels", {})
        meta.setdefault("annotations", {})
        for transient in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        self._bump(obj)

    def _bump(self, obj: dict) -> None:
        """Every write takes the next global resourceVersion, as etcd revisions do."""
        state = cast(dict, self._state)
        state["resourceVersion"] += 1
        obj["metadata"]["resourceVersion"] = str(state["resourceVersion"])
        self._dirty = True

    def _new_ip(self) -> str:
        counters = cast(dict, self._state)["counters"]
        counters["ip"] += 1
        n = counters["ip"]
        # 10.1.0.1 upwards; nothing is ever contacted at these addresses.
        return f"10.{1 + n // 65536}.{n // 256 % 256}.{n % 256}"


def _uid(n: int) -> str:
    """A UUID-shaped uid from a counter: reproducible, and sorted in creation order."""
    text = f"{n:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _event_identity(event: dict) -> str:
    """What makes two events "the same" for aggregation."""
    io = event.get("involvedObject") or {}
    parts = (io.get("kind"), io.get("namespace"), io.get("name"), io.get("uid"),
             event.get("type", "Normal"), event.get("reason"), event.get("message"))
    return "\x1f".join("" if p is None else str(p) for p in parts)


def default_pools(nodes: int = 8, gpus: int = 8, cpu_nodes: int = 2) -> list[NodePool]:
    """``nodes`` tainted GPU nodes of ``gpus`` GPUs, then untainted CPU nodes."""
    return [NodePool(nodes, gpus, tainted=True), NodePool(cpu_nodes, 0)]


def _fresh_cluster_state(pools: list[NodePool], podgroups: bool) -> dict:
    """Nodes ``node-0..``, pool after pool (by default GPU nodes, then untainted CPU
    nodes for routers and the like)."""
    state = fresh_state(podgroups=podgroups)
    cluster_nodes = state["objects"].setdefault(base.NODE, {})
    clock = parse_time(state["clock"])
    shapes = [pool for pool in pools for _ in range(pool.nodes)]
    for index, pool in enumerate(shapes):
        node = nodes.make_node(index, pool.gpus)
        node["metadata"]["labels"].update(pool.labels)
        if not pool.tainted:
            node["spec"]["taints"] = []
        nodes.set_ready(node, True, clock)
        name = node["metadata"]["name"]
        state["counters"]["uid"] += 1
        state["resourceVersion"] += 1
        node["metadata"].update(uid=_uid(state["counters"]["uid"]),
                                creationTimestamp=state["clock"],
                                resourceVersion=str(state["resourceVersion"]))
        cluster_nodes[name] = node
        state["sim"]["nodes"][name] = {"images": {}, "downSince": None, "next": None}
    return state


def _default_host_ports(spec: dict) -> None:
    """As the API server defaults a hostNetwork pod: each container port's ``hostPort``
    is its ``containerPort`` (SetDefaults_PodSpec)."""
    if not spec.get("hostNetwork"):
        return
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for port in container.get("ports") or []:
            if not port.get("hostPort") and port.get("containerPort"):
                port["hostPort"] = port["containerPort"]


def _check_pod(pod: dict) -> None:
    meta = pod.get("metadata") or {}
    name = meta.get("name")
    if not name or not meta.get("namespace"):
        raise Invalid(f"Pod/{name or '?'}: metadata.name and metadata.namespace are required")
    containers = (pod.get("spec") or {}).get("containers")
    if not containers or not all(c.get("name") and c.get("image") for c in containers):
        raise Invalid(f"{object_id('Pod', meta['namespace'], name)}: spec.containers needs at "
                      "least one container, each with a name and an image")
    # As the API server: a volumeMount must name one of the pod's volumes.
    spec = pod.get("spec") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    raise Invalid(f"{object_id('Pod', meta['namespace'], name)}: spec.{key}[{i}]"
                                  f".volumeMounts[{j}].name: Not found: {mount.get('name')!r}")
    # As the API server: the fields validate refuses (model/podrules.py).
    found = podrules.field_problem(spec, meta) or podrules.duplicate_problem(spec)
    if found:
        what, rule, field = found
        raise Invalid(f"{object_id('Pod', meta['namespace'], name)} is invalid: {what}: "
                      f"{rule} ({field})")


def _check_pod_update(stored: dict, new: dict) -> None:
    """As the API server: a pod's spec is immutable except container images and gate removal."""
    old_spec, new_spec = copy.deepcopy(stored["spec"]), copy.deepcopy(new.get("spec") or {})
    meta = stored["metadata"]
    where = object_id("Pod", meta["namespace"], meta["name"])
    for field in ("containers", "initContainers"):
        old, updated = old_spec.get(field) or [], new_spec.get(field) or []
        if [c.get("name") for c in old] != [c.get("name") for c in updated]:
            raise Invalid(f"{where}: spec: Forbidden: pod updates may not add or remove containers")
        for container in old + updated:
            container.pop("image", None)
    old_gates = old_spec.pop("schedulingGates", None) or []
    new_gates = new_spec.pop("schedulingGates", None) or []
    if any(gate not in old_gates for gate in new_gates):
        raise Invalid(f"{where}: spec.schedulingGates: Forbidden: only deletion is allowed")
    new_spec.setdefault("nodeName", old_spec.get("nodeName"))
    if old_spec.get("nodeName") is None:
        new_spec.pop("nodeName", None)
    if old_spec != new_spec:
        raise Invalid(f"{where}: spec: Forbidden: pod updates may not change fields other than "
                      "container images and scheduling gates")
