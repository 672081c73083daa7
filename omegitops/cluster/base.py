"""The one interface the planner sees: a small slice of the Kubernetes API.

Objects are plain Kubernetes-shaped JSON dicts (``apiVersion``, ``kind``,
``metadata``, ``spec``, ``status``). Every method returns a copy the caller may
keep or change; nothing changes on the cluster until a write method is called.
Timestamps in objects are RFC3339 strings (``2026-09-27T08:14:02Z``).

Two backends implement it: ``sim:PATH`` (``omegitops.cluster.sim``), a simulated
cluster with its own clock, and later ``kube``, a real cluster. Both are context
managers: entering takes the cluster for this run (a lock file, or a Lease),
leaving saves and releases it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import Self, TypeVar

K = TypeVar("K")
T = TypeVar("T")

# The kinds ``list_objects`` and friends serve besides pods.
INFERENCE_REPLICA = "InferenceReplica"
CONTROLLER_REVISION = "ControllerRevision"
SERVICE = "Service"
POD_GROUP = "PodGroup"
EVENT = "Event"
NODE = "Node"
POD_DISRUPTION_BUDGET = "PodDisruptionBudget"
POD = "Pod"

# The readiness gate OME uses to put a pod into rotation.
SERVING_GATE = "ome.io/serving"

# What omegitops reads of an existing pod's spec: where it runs, its scheduling gates,
# its grace, and each container's name and image (in-place updates and InPlaceOnly
# compare images). Metadata is read whole.
_KEPT_POD_SPEC = ("nodeName", "schedulingGates", "terminationGracePeriodSeconds",
                  "tolerations")
_KEPT_CONTAINER = ("name", "image")
# What it reads of a pod's status: its phase and why it ended, its conditions (ready,
# serving, scheduled) and its containers' statuses (images, readiness, restarts, crash
# loops, image pulls, exits). Not its addresses, start time or QoS class.
_KEPT_POD_STATUS = ("phase", "reason", "message", "conditions", "containerStatuses")


def side_by_side(calls: dict[K, Callable[[], T]], threads: bool = True) -> dict[K, T]:
    """Each call's result by its key: in a thread each when ``threads`` (and more than
    one), else one after the other. An error is raised once every call has ended (the
    first in the calls' order)."""
    if not threads or len(calls) < 2:
        return {key: call() for key, call in calls.items()}
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="list") as pool:
        futures = {key: pool.submit(call) for key, call in calls.items()}
    return {key: future.result() for key, future in futures.items()}


def field_value(obj: dict, path: str | list[str]) -> str:
    """The value a field selector compares at dotted ``path`` (or its parts, split once
    for a whole LIST): "" when absent, as the API server reads a missing field."""
    value: object = obj
    for part in path.split(".") if isinstance(path, str) else path:
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def fields_match(obj: dict, fields: dict[str, str] | None) -> bool:
    """Whether ``obj`` has every ``fields`` value (a field selector of equalities)."""
    return not fields or all(field_value(obj, path) == value for path, value in fields.items())


def trim_pod(pod: dict) -> dict:
    """A shallow copy of ``pod`` with only the spec and status fields omegitops reads
    (``pod`` itself is left as it is: a watch's store may hold it).

    The rest of a pod's spec (env, volumes, probes, resources, affinity) is most of
    its size, and a pass holds every managed pod, so its observation drops it, as
    client-go informers trim what their controllers never look at. The planner
    builds pods from their templates and changes them by patch, never from an
    observed pod, so nothing it needs is lost. Reads outside a pass's observation
    (``list_pods``, ``get_object``) stay whole. Trimming twice changes nothing."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    kept = {key: spec[key] for key in _KEPT_POD_SPEC if key in spec}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            kept[key] = [{k: c[k] for k in _KEPT_CONTAINER if k in c}
                         if isinstance(c, dict) else c for c in spec[key]]
    trimmed = {**pod, "spec": kept}
    status = pod.get("status")
    if isinstance(status, dict):
        trimmed["status"] = {key: status[key] for key in _KEPT_POD_STATUS if key in status}
    return trimmed


class Cluster(abc.ABC):
    """A Kubernetes-like cluster: pods, a few other kinds, events and a clock."""

    # How often ``--until-idle`` looks again when the cluster cannot say when
    # something will change (a real cluster); None when it always can (sim).
    poll_seconds: float | None = 5.0
    # Whether a pass's LISTs (and a run's first LISTs for its watches) go side by side,
    # a thread per kind (``side_by_side``), as each informer of a controller lists in
    # its own goroutine: the API server encodes one kind's pages while this process
    # decodes another's. Not on sim:, whose calls cost no waiting.
    lists_side_by_side: bool = False
    # How many InferenceServices' plans a pass applies side by side (app/batches.py):
    # one on a backend with nothing to wait for, more where each write waits on a server.
    apply_workers: int = 1
    # Whether a pass lists the nodes, to migrate Instances off those going away
    # (lifecycle/migration.py), and keeps a PodDisruptionBudget per component that holds
    # a drain back until they have moved. Off for a run whose account may not list
    # nodes (``stop_listing_nodes``): a budget that waits for migrations that never
    # come would hold a drain back for ever.
    lists_nodes: bool = False
    # ``--shard``: lists hold only namespaced objects whose namespace this accepts
    # (cluster-scoped ones always); None lists every namespace.
    namespace_scope: Callable[[str], bool] | None = None

    def in_scope(self, obj: dict) -> bool:
        """Whether a list of this cluster holds ``obj`` (see ``namespace_scope``)."""
        if self.namespace_scope is None:
            return True
        namespace = (obj.get("metadata") or {}).get("namespace")
        return not namespace or self.namespace_scope(namespace)

    def stop_listing_nodes(self) -> None:
        """No more node lists this run (RBAC refused one): no migrations, no budgets."""
        self.lists_nodes = False

    # -- lifetime -------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    # -- time -----------------------------------------------------------------

    @abc.abstractmethod
    def now(self) -> datetime:
        """The cluster's current time, an aware UTC datetime."""

    @abc.abstractmethod
    def advance(self, seconds: float) -> datetime:
        """Let ``seconds`` pass and return the new time.

        A simulated cluster moves its clock and runs every transition on the way;
        a real one just waits.
        """

    @abc.abstractmethod
    def next_transition_at(self) -> datetime | None:
        """When something will next change by itself, or None if nothing will.

        It can be ``now()`` when work is due at once (a new pod to schedule).
        A real cluster cannot know and returns None.
        """

    # -- watches --------------------------------------------------------------
    #
    # A backend that can watch (a real cluster) keeps a run's lists current
    # between passes, so that a pass costs what changed rather than what exists
    # (omegitops.app.incremental). The simulator does not need to: its lists are
    # reads of its own memory, and its clock jumps to each change.

    def watch(self, kind: str, labels: dict[str, str] | None,
              key_of: Callable[[dict], Hashable]) -> bool:
        """From now on, keep ``list_objects(kind, labels)`` current from a watch, with
        each object filed under ``key_of(object)``. False when the backend does not
        watch; then nothing changes."""
        return False

    def changed_keys(self) -> set[Hashable] | None:
        """The keys of watched objects that changed since the last call; None when
        that is not known (no watches, or a watch had to list again)."""
        return None

    def list_keyed(self, kind: str, labels: dict[str, str] | None, keys: Iterable[Hashable],
                   transform: Callable[[dict], dict] | None = None) -> list[dict]:
        """The objects of a watched ``list_objects(kind, labels)`` filed under ``keys``,
        each transformed as ``list_objects`` does."""
        raise NotImplementedError(f"{kind} is not watched")

    def stop_watching(self) -> None:
        """End the watches (their lists stay as they were last kept); nothing without."""

    def wait_for_change(self, seconds: float) -> bool:
        """Wait up to ``seconds``, less when a watched object changes; whether one did."""
        self.advance(seconds)
        return False

    # -- discovery ------------------------------------------------------------

    @abc.abstractmethod
    def has_kind(self, kind: str) -> bool:
        """Whether the cluster serves that kind, e.g. whether the PodGroup CRD is installed."""

    # -- pods -----------------------------------------------------------------

    @abc.abstractmethod
    def list_pods(self, labels: dict[str, str] | None = None) -> list[dict]:
        """Pods of all namespaces whose labels include every ``labels`` pair."""

    @abc.abstractmethod
    def create_pod(self, pod: dict) -> dict:
        """Create a pod; it comes back with uid, creationTimestamp, resourceVersion, phase Pending.

        AlreadyExists if the name is taken, even by a terminating pod.
        """

    @abc.abstractmethod
    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Start a graceful deletion (deletionTimestamp = now + grace).

        The grace defaults to the pod's terminationGracePeriodSeconds, else 30.
        Deleting again never extends the deadline. NotFound if absent.
        """

    @abc.abstractmethod
    def set_pod_condition(
        self,
        namespace: str,
        name: str,
        type: str,
        status: bool,
        reason: str = "",
        message: str = "",
        seen: dict | None = None,
    ) -> dict:
        """Set a pod status condition such as the ``ome.io/serving`` readiness gate.
        ``seen``: the pod as the caller observed it, which spares a backend a read."""

    @abc.abstractmethod
    def patch_pod_images(self, namespace: str, name: str, images: dict[str, str],
                         labels: dict[str, str] | None = None) -> dict:
        """Change container images in place (container name -> image), and ``labels``
        on the pod's metadata in the same patch.

        The only in-place spec change: the kubelet restarts each changed container.
        """

    # -- other kinds ----------------------------------------------------------

    @abc.abstractmethod
    def list_objects(self, kind: str, labels: dict[str, str] | None = None,
                     fields: dict[str, str] | None = None,
                     transform: Callable[[dict], dict] | None = None) -> list[dict]:
        """Every object of a kind in all namespaces, optionally filtered by labels and by
        ``fields``: equality on dotted paths (``{"type": "Warning"}``), as the API
        server's field selectors, and only on fields it can select by for that kind.

        ``transform`` is applied to each object as it is read, before the next is (a
        LIST's page at a time), as client-go's informer transforms are: a caller that
        keeps part of each object never holds the whole list at once. It must not
        change its argument; a watched list answers with transformed copies, its store
        staying whole."""

    @abc.abstractmethod
    def get_object(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """One object, or None. ``namespace`` is ignored for cluster-scoped kinds (Node)."""

    @abc.abstractmethod
    def create_object(self, obj: dict) -> dict:
        """Create an object; AlreadyExists if the name is taken."""

    @abc.abstractmethod
    def replace_object(self, obj: dict) -> dict:
        """Replace metadata and spec. Conflict unless metadata.resourceVersion is current."""

    @abc.abstractmethod
    def replace_status(self, obj: dict) -> dict:
        """Replace status only (the status subresource); same resourceVersion rule."""

    @abc.abstractmethod
    def delete_object(self, kind: str, namespace: str | None, name: str) -> None:
        """Delete an object; NotFound if absent. Finalizers keep it, terminating, until cleared."""

    @abc.abstractmethod
    def record_event(self, event: dict) -> dict | None:
        """Record a core/v1 Event about ``event["involvedObject"]``.

        A repeat (same involved object, type, reason and message) is aggregated
        into the existing Event: count + 1, lastTimestamp = now. An event sent for
        an outbox entry (the ``ome.io/outbox-sequence`` annotation) that the Event
        already counts is a resend: nothing is written and the answer is None
        (``omegitops.cluster.sequences``).
        """

    # -- the run's account and the InferenceServices --------------------------------

    def inference_service_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the InferenceService when the cluster's API holds it, so that its
        Events show on it; None when it does not (no OME CRDs, or not applied)."""
        return None

    def missing_permissions(self, prune: bool, namespaces: Iterable[str] = ()) -> list[str]:
        """What a reconcile run (with ``--prune`` or not) would need in ``namespaces``
        and may not do, one line each; asked before the run's first write there. Empty
        when all is allowed."""
        return []
