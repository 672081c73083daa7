"""``KubeCluster``: the ``Cluster`` interface on a real API server.

Usage::

    with KubeCluster(context=None) as cluster:   # takes the Lease
        pods = cluster.list_pods({"app.kubernetes.io/managed-by": "omegitops"})

Each ``list_*`` call is one LIST over all namespaces with a label selector, read
in pages; writes carry ``metadata.resourceVersion`` where the interface says so. Objects
go in and come out as plain Kubernetes JSON, as on the simulator.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from kubernetes.client import ApiClient

from omegitops.cluster import base
from omegitops.cluster.base import Cluster
from omegitops.cluster.errors import AlreadyExists, Expired, Forbidden, Invalid, NotFound
from omegitops.cluster.kube import events
from omegitops.cluster.kube.access import (
    REVIEW_PATH,
    RULES_REVIEW_PATH,
    Permission,
    granted,
    review_body,
    rules_review_body,
    run_permissions,
)
from omegitops.cluster.kube.config import connect
from omegitops.cluster.kube.resources import (
    INFERENCE_SERVICE,
    RESOURCES,
    Resource,
    label_selector,
)
from omegitops.cluster.kube.rest import MERGE_PATCH, STRATEGIC_PATCH, Rest, RetryPolicy
from omegitops.cluster.kube.watches import WATCH_SECONDS, WatchedKind, Watches
from omegitops.cluster.lease import DEFAULT_DURATION_SECONDS, LEASE_NAME, Lease
from omegitops.cluster.sequences import already_counted
from omegitops.util.errors import UsageError
from omegitops.util.gcpause import without_gc_pauses

log = logging.getLogger(__name__)

# Kinds every API server serves; the others (CRDs) are found by discovery.
BUILT_IN = {base.POD, base.SERVICE, base.EVENT, base.NODE, base.CONTROLLER_REVISION,
            base.POD_DISRUPTION_BUDGET}
# Conditions the kubelet owns; writing them would fight it.
KUBELET_CONDITIONS = {"PodScheduled", "Initialized", "ContainersReady", "Ready",
                      "PodReadyToStartContainers"}
# Items per LIST request: answers stay a few MB, and a list of 8,000 pods is 16 requests.
PAGE_SIZE = 500
# Read-only metadata a create must not send.
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "generation", "managedFields", "selfLink")


# Events a run remembers for their repeats (client-go's correlator keeps 4096).
MAX_REMEMBERED_EVENTS = 4096
# InferenceServices whose plans a pass applies side by side: as many as the Deployment
# controller's workers (kube-controller-manager's --concurrent-deployment-syncs).
APPLY_WORKERS = 5
APPLY_WORKERS_ENV = "OMEGITOPS_APPLY_WORKERS"
MAX_APPLY_WORKERS = 64


def apply_workers(environ: dict[str, str] | None = None) -> int:
    """``$OMEGITOPS_APPLY_WORKERS`` (1: one plan after another), else ``APPLY_WORKERS``."""
    value = (os.environ if environ is None else environ).get(APPLY_WORKERS_ENV, "").strip()
    if not value:
        return APPLY_WORKERS
    if not value.isdigit() or not 1 <= int(value) <= MAX_APPLY_WORKERS:
        raise UsageError(f"{APPLY_WORKERS_ENV}={value!r}: a whole number from 1 to "
                         f"{MAX_APPLY_WORKERS} (how many services' plans are applied at once)")
    return int(value)


class KubeCluster(Cluster):
    """A real cluster through the official ``kubernetes`` client.

    ``context`` names a kubeconfig context (None: the current one, else the
    in-cluster service account), in ``kubeconfig`` when given (kubectl's
    ``--kubeconfig``), else ``$KUBECONFIG``; ``api_client`` replaces all that with a ready
    client (tests, proxies). ``lease=False`` skips the one-run-at-a-time Lease
    (read-only commands). ``retry`` and ``timeout`` tune the transport.
    """

    lists_side_by_side = True
    # Nodes are listed (and watched) so that Instances migrate off those being drained;
    # an account that may not list them runs without migrations (Cluster.stop_listing_nodes).
    lists_nodes = True

    def __init__(self, context: str | None = None, *, api_client: ApiClient | None = None,
                 lease: bool = True, lease_namespace: str | None = None,
                 lease_name: str = LEASE_NAME,
                 lease_seconds: int = DEFAULT_DURATION_SECONDS,
                 retry: RetryPolicy | None = None, timeout: float = 30.0,
                 kubeconfig: str | None = None) -> None:
        self.apply_workers = apply_workers()  # a wrong value is told before any request
        self.context = context
        self._own_client = api_client is None
        self.api_client = api_client if api_client is not None else connect(context, kubeconfig)
        self.rest = Rest(self.api_client, retry=retry, timeout=timeout)
        self.lease = Lease(self.rest, lease_namespace, name=lease_name,
                           duration_seconds=lease_seconds) if lease else None
        self._served: dict[str, set[str]] = {}  # group/version -> plurals, for the run
        self._service_uids: dict[tuple[str, str], str | None] = {}
        # The Events this run wrote, as written: a repeat is patched with no read.
        self._events: dict[tuple[str, str], dict] = {}
        self._events_lock = threading.Lock()
        # Permissions not granted, by the namespace they were asked in (once a run).
        self._reviewed: dict[str, list[str]] = {}
        self._service_status_dropped = False  # the CRD prunes status.components.*.lifecycle
        self.page_size = PAGE_SIZE
        # Lists of namespaced kinds in this namespace alone, None: across all of them. A
        # person's command about one namespace (kubectl ome) asks no more than a Role
        # there grants.
        self.list_namespace: str | None = None
        self.watches: Watches | None = None  # once watch() is called
        self._watches_lock = threading.Lock()

    # -- lifetime ---------------------------------------------------------------

    def __enter__(self) -> Self:
        if self.lease is not None:
            self.lease.acquire()
            self.lease.keep_renewed()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self.watches is not None:
                self.watches.stop()
            if self.lease is not None:
                self.lease.release()
        finally:
            if self._own_client:
                self.api_client.close()

    # -- time -------------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.now(UTC)

    def advance(self, seconds: float) -> datetime:
        """Wait ``seconds`` of wall-clock time, renewing the Lease on the way."""
        deadline = time.monotonic() + max(0.0, seconds)
        while (left := deadline - time.monotonic()) > 0:
            if self.lease is not None:
                time.sleep(min(left, self.lease.duration_seconds / 3))
                self.lease.renew_if_due()
            else:
                time.sleep(left)
        return self.now()

    def next_transition_at(self) -> datetime | None:
        return None  # a real cluster does not announce what it will do

    # -- watches ------------------------------------------------------------------

    def watch(self, kind: str, labels: dict[str, str] | None,
              key_of: Callable[[dict], Hashable]) -> bool:
        """LIST the kind once, then keep that list current from a watch
        (``omegitops.cluster.kube.watches``); ``list_objects(kind, labels)`` answers
        from it from now on. A watch the account may not make falls back to a LIST per
        call, with a warning, once its first request is refused."""
        with self._watches_lock:  # kinds are watched side by side (side_by_side)
            if self.watches is None:
                self.watches = Watches()
        held = self.watches.get(kind, labels)
        if held is not None and held.running:
            return True
        # New, or kept from an earlier run of passes whose watch has ended: list again.
        resource = self._resource(kind)
        watched = WatchedKind(resource, labels, key_of, self.watches.changes,
                              lambda: self._list_versioned(resource, labels),
                              self._watch_request(resource), keep=self.in_scope)
        watched.fill(*self._list_versioned(resource, labels))
        self.watches.add(kind, watched)
        watched.start()
        return True

    def stop_watching(self) -> None:
        """End the watch threads. The lists stay readable, as they were when the watches
        ended: the run's last look, which its report and table show."""
        if self.watches is not None:
            self.watches.stop()

    def changed_keys(self) -> set[Hashable] | None:
        if self.watches is None:
            return None
        taken = self.watches.changes.take()
        # A kind whose watch is refused is listed whole: every component may have changed.
        # The changes are taken all the same, so the next wait waits for a new one (or
        # its time) rather than running passes back to back.
        return None if any(w.failure for w in self.watches.kinds.values()) else taken

    def list_keyed(self, kind: str, labels: dict[str, str] | None, keys: Iterable[Hashable],
                   transform: Callable[[dict], dict] | None = None) -> list[dict]:
        watched = self.watches.get(kind, labels) if self.watches is not None else None
        if watched is None:
            raise NotImplementedError(f"{kind} is not watched")
        return _transformed(watched.items(keys), transform)

    def wait_for_change(self, seconds: float) -> bool:
        """Wait until a watched object changes or ``seconds`` pass, renewing the Lease;
        whether something changed. Without watches, just waits."""
        if self.watches is None:
            self.advance(seconds)
            return False
        deadline = time.monotonic() + max(0.0, seconds)
        changes = self.watches.changes
        if self.lease is not None:
            # Before every wait, whether changes wake it early or not: a loss the
            # renewal timer found ends the run here.
            self.lease.renew_if_due()
        while (left := deadline - time.monotonic()) > 0:
            step = left if self.lease is None else min(left, self.lease.duration_seconds / 3)
            if changes.wait(step):
                return True
            if self.lease is not None:
                self.lease.renew_if_due()
        return changes.pending()

    def _watch_request(self, resource: Resource):
        """The watch call ``kubernetes.watch.Watch.stream`` makes: a GET of the
        collection with ``watch=1``, answered as a stream of JSON lines."""
        rest = self.rest

        def watch_collection(*, resource_version: str = "", label_selector: str | None = None,
                             allow_watch_bookmarks: bool = True, timeout_seconds: int = 0,
                             **_client_flags):
            query = {"watch": "1", "resourceVersion": resource_version or None,
                     "labelSelector": label_selector,
                     "allowWatchBookmarks": "true" if allow_watch_bookmarks else None,
                     "timeoutSeconds": timeout_seconds or None}
            return rest.stream("GET", resource.path(), query=query,
                               what=f"{resource.kind} watch",
                               read_timeout=(timeout_seconds or WATCH_SECONDS) + 30)

        return watch_collection

    def _watched_pod(self, namespace: str, name: str) -> dict | None:
        """The pod as the watch last delivered it, when pods are watched: no GET needed.
        Were it behind, the patch is only one that changes nothing (or one skipped
        that the watch's next event has the run plan again)."""
        if self.watches is None:
            return None
        for watched in self.watches.of_kind(base.POD):
            found = watched.get(namespace, name)
            if found is not None:
                return found
        return None

    def _remember(self, resource: Resource, obj: dict) -> dict:
        """Keep a watched kind's store up to date with the answer to a write."""
        if self.watches is not None and obj.get("metadata"):
            for watched in self.watches.of_kind(resource.kind):
                watched.remember(obj)
        return obj

    def _forget(self, resource: Resource, namespace: str | None, name: str,
                answer: dict) -> None:
        """A delete answered with a Status (the object is gone at once): out of the store.
        An answer that is the object itself (graceful deletion, finalizers) is kept."""
        if self.watches is None:
            return
        if answer.get("kind") == "Status" or not answer.get("metadata"):
            for watched in self.watches.of_kind(resource.kind):
                watched.forget(namespace, name)
        else:
            self._remember(resource, resource.fill_type(answer))

    # -- discovery ----------------------------------------------------------------

    def has_kind(self, kind: str) -> bool:
        """Built-in kinds always; a CRD's kind when discovery lists its plural (cached)."""
        if kind in BUILT_IN:
            return True
        resource = RESOURCES.get(kind)
        if resource is None:
            return False
        return resource.plural in self._plurals(resource)

    def _plurals(self, resource: Resource) -> set[str]:
        key = resource.api_version
        if key not in self._served:
            try:
                found = self.rest.request("GET", resource.group_version_path,
                                          what=f"API {resource.api_version}")
            except NotFound:
                found = {}
            self._served[key] = {r.get("name") for r in found.get("resources") or []}
        return self._served[key]

    # -- pods -----------------------------------------------------------------------

    def list_pods(self, labels: dict[str, str] | None = None) -> list[dict]:
        return self.list_objects(base.POD, labels)

    def create_pod(self, pod: dict) -> dict:
        return self._create(RESOURCES[base.POD], pod)

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """DELETE with ``gracePeriodSeconds`` (omitted: the pod's own grace applies)."""
        resource = RESOURCES[base.POD]
        query = {"gracePeriodSeconds": None if grace_seconds is None else int(grace_seconds)}
        self._may_write()
        answer = self.rest.request("DELETE", resource.path(namespace, name), query=query,
                                   what=resource.object_id(namespace, name))
        self._forget(resource, namespace, name, answer)

    def set_pod_condition(self, namespace: str, name: str, type: str, status: bool,
                          reason: str = "", message: str = "", seen: dict | None = None) -> dict:
        """PATCH the pod's status subresource unless the condition is as asked: judged on
        the watched pod, else the pod as the caller saw it (the pass's LIST), else a GET.
        A condition that moved since the caller saw it is written over, as the patch of
        one condition (merged on its type) would be anyway."""
        resource = RESOURCES[base.POD]
        what = resource.object_id(namespace, name)
        if type in KUBELET_CONDITIONS:
            raise Invalid(f"{what}: condition {type} is owned by the kubelet")
        pod = self._watched_pod(namespace, name) or seen or self._get(resource, namespace, name)
        patch = events.condition_patch(pod, type, status, reason, message, self.now())
        if patch is None:
            return pod
        return self._patch(resource, namespace, name, patch, STRATEGIC_PATCH, "status")

    def patch_pod_images(self, namespace: str, name: str, images: dict[str, str],
                         labels: dict[str, str] | None = None) -> dict:
        return self._patch(RESOURCES[base.POD], namespace, name,
                           events.images_patch(images, labels), STRATEGIC_PATCH)

    # -- other kinds --------------------------------------------------------------------

    def list_objects(self, kind: str, labels: dict[str, str] | None = None,
                     fields: dict[str, str] | None = None,
                     transform: Callable[[dict], dict] | None = None) -> list[dict]:
        """One LIST of the kind across all namespaces (or in ``list_namespace``), filtered
        by the API server, read in pages of ``PAGE_SIZE``.

        Pages keep each answer small enough for the read timeout (8,000 pods are 25 MB
        in one piece). A continue token the server no longer honours (410 Expired: the
        list took longer than etcd keeps its history) restarts the list once, from the
        start, as the pages read so far may not fit with the rest. ``fields`` goes to the
        server as a field selector, so what it leaves out is never sent; a watched list
        holds every object of its labels, so it answers only when there are none.
        """
        watched = self.watches.get(kind, labels) \
            if self.watches is not None and not fields else None
        if watched is not None:
            return _transformed(watched.items(), transform)
        resource = self._resource(kind)
        try:
            try:
                return self._list_pages(resource, labels, fields, transform)
            except Expired as err:
                log.info("%s list: %s; listing again from the start", kind, err)
                return self._list_pages(resource, labels, fields, transform)
        except NotFound as err:
            raise NotFound(f"kind {kind} is not served by this cluster"
                           f"{_crd_hint(kind)}") from err

    def _list_pages(self, resource: Resource, labels: dict[str, str] | None,
                    fields: dict[str, str] | None = None,
                    transform: Callable[[dict], dict] | None = None) -> list[dict]:
        return self._list_versioned(resource, labels, fields, transform)[0]

    # Decoding a LIST makes millions of small dicts and strings (8,000 pods are 56 MB
    # of JSON); with the collector on, their allocations set off full collections
    # that walk the growing list again and again, for no garbage (JSON is acyclic):
    # three times the decode itself (omegitops/util/gcpause.py). A watch's first LIST runs
    # outside any pass, so the pause belongs here.
    @without_gc_pauses
    def _list_versioned(self, resource: Resource, labels: dict[str, str] | None,
                        fields: dict[str, str] | None = None,
                        transform: Callable[[dict], dict] | None = None,
                        ) -> tuple[list[dict], str]:
        """Every page of one LIST, each object transformed as its page is read, and the
        list's resourceVersion (the same on every page of a continued list: the
        snapshot a watch starts from)."""
        items: list[dict] = []
        token, version = None, ""
        while True:
            query = {"labelSelector": label_selector(labels),
                     "fieldSelector": label_selector(fields), "limit": self.page_size,
                     "continue": token}
            found = self.rest.request("GET", resource.path(self.list_namespace), query=query,
                                      what=f"{resource.kind} list", counted_as="lists")
            # Popped, so that the page's whole objects go once transformed, before the
            # next page is read.
            page = (resource.fill_type(item) for item in found.pop("items", None) or []
                    if self.in_scope(item))
            items.extend(_transformed(page, transform))
            meta = found.get("metadata") or {}
            version = version or meta.get("resourceVersion") or ""
            token = meta.get("continue")
            if not token:
                return items, version

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict | None:
        try:
            return self._get(self._resource(kind), namespace, name)
        except NotFound:
            return None

    def create_object(self, obj: dict) -> dict:
        return self._create(self._resource(obj.get("kind")), obj)

    def replace_object(self, obj: dict) -> dict:
        """PUT; the server answers Conflict unless metadata.resourceVersion is current."""
        return self._replace(obj, None)

    def replace_status(self, obj: dict) -> dict:
        """PUT on the status subresource; same resourceVersion rule."""
        resource = self._resource(obj.get("kind"))
        if resource.kind == base.POD:
            raise Invalid("pod status belongs to the kubelet; use set_pod_condition")
        if not resource.status:
            raise Invalid(f"{resource.kind} has no status subresource")
        return self._replace(obj, "status")

    def delete_object(self, kind: str, namespace: str | None, name: str) -> None:
        if kind == base.POD:
            return self.delete_pod(namespace or "", name)
        resource = self._resource(kind)
        self._may_write()
        answer = self.rest.request("DELETE", resource.path(namespace, name),
                                   what=resource.object_id(namespace, name))
        self._forget(resource, namespace, name, answer)

    def record_event(self, event: dict) -> dict | None:
        """Create the Event, or count a repeat on the one with the same deterministic name;
        None, writing nothing, when that Event already counts the outbox entry ``event``
        is sent for (see ``omegitops.cluster.sequences``)."""
        involved = event.get("involvedObject") or {}
        if not involved.get("kind") or not involved.get("name"):
            raise Invalid("Event: involvedObject.kind and involvedObject.name are required")
        namespace = (event.get("metadata") or {}).get("namespace") or involved.get("namespace") \
            or "default"
        resource = RESOURCES[base.EVENT]
        name = events.event_name(event)
        key = (namespace, name)
        # As client-go's recorder does: a new event is created (one request), a repeat of
        # one this run wrote is patched on what it wrote (one request, its correlator's
        # cache), and only a repeat of an earlier run's is read first.
        stored = self._events.get(key)
        if stored is None:
            try:
                return self._remember_event(key, self._create(
                    resource, events.new_event(event, namespace, self.now())))
            except AlreadyExists:
                # An earlier occurrence, or our own POST whose answer was lost before the
                # client tried again, which the outbox sequence on it tells.
                stored = self._get(resource, namespace, name)
        if already_counted(stored, event):
            return None
        try:
            return self._remember_event(key, self._patch(
                resource, namespace, name, events.repeat_patch(stored, event, self.now()),
                MERGE_PATCH))
        except NotFound:
            # Gone since this run wrote it (its hour is up): created anew.
            self._events.pop(key, None)
            return self.record_event(event)

    def _remember_event(self, key: tuple[str, str], stored: dict) -> dict:
        """An Event as this run last wrote it, for the next repeat's patch."""
        with self._events_lock:  # plans are applied side by side
            if len(self._events) >= MAX_REMEMBERED_EVENTS:
                self._events.pop(next(iter(self._events)))
            self._events[key] = stored
        return stored

    def inference_service_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the InferenceService in the API (OME's CRD installed and the object
        applied), read once per service and run; None when there is none."""
        key = (namespace, name)
        if key not in self._service_uids:
            found = None
            if self.has_kind(INFERENCE_SERVICE):
                found = self.get_object(INFERENCE_SERVICE, namespace, name)
            self._service_uids[key] = ((found or {}).get("metadata") or {}).get("uid")
        return self._service_uids[key]

    # -- permissions ------------------------------------------------------------------

    def missing_permissions(self, prune: bool, namespaces: Iterable[str] = ()) -> list[str]:
        """What the run would use in ``namespaces`` and RBAC does not grant, one line
        each: a SelfSubjectRulesReview per namespace, once per run (the answers are
        kept), and a SelfSubjectAccessReview per permission only where the rules review
        cannot answer (an authorizer besides RBAC's marks it incomplete)."""
        needed = run_permissions(prune=prune, podgroups=self.has_kind(base.POD_GROUP),
                                 inference_services=self.has_kind(INFERENCE_SERVICE),
                                 budgets=self.lists_nodes)
        for namespace in sorted(set(namespaces) - set(self._reviewed)):
            rules = self._rules(namespace)
            self._reviewed[namespace] = [
                f"not permitted: {p.describe()} (pipelines/common/rbac.yaml grants what "
                "omegitops needs); nothing was written"
                for p in needed
                if not (granted(rules, p) if rules is not None
                        else self._allowed(replace(p, namespace=namespace)))]
        return list(dict.fromkeys(line for lines in self._reviewed.values() for line in lines))

    def _rules(self, namespace: str) -> list[dict] | None:
        """The rules that apply to this account in ``namespace``; None when the review
        cannot tell them all (incomplete, or not served)."""
        try:
            review = self.rest.request("POST", RULES_REVIEW_PATH,
                                       body=rules_review_body(namespace),
                                       what="SelfSubjectRulesReview")
        except (NotFound, Forbidden) as err:
            log.debug("cannot review the rules of %s: %s", namespace, err)
            return None
        status = review.get("status") or {}
        if status.get("incomplete"):
            return None
        return list(status.get("resourceRules") or [])

    def _allowed(self, permission: Permission) -> bool:
        try:
            review = self.rest.request("POST", REVIEW_PATH, body=review_body(permission),
                                       what="SelfSubjectAccessReview")
        except (NotFound, Forbidden) as err:
            # A server that cannot answer: the writes themselves will say what is missing.
            log.debug("cannot review %s: %s", permission.describe(), err)
            return True
        return bool((review.get("status") or {}).get("allowed"))

    # -- the InferenceService's own status ------------------------------------------------

    def update_service_status(self, namespace: str, name: str, component: str,
                              lifecycle_status: dict) -> bool:
        """Write ``status.components.{component}.lifecycle`` on the InferenceService.

        A merge patch of the status subresource: other components and fields
        stay as they are, and a key set to None in ``lifecycle_status`` is
        removed (e.g. ``rolloutHold: None`` once the hold is lifted). Returns
        False, without error, when OME's CRD or the InferenceService itself is
        absent: omegitops works without OME's controller installed.
        """
        resource = RESOURCES[INFERENCE_SERVICE]
        if self._service_status_dropped or not self.has_kind(INFERENCE_SERVICE):
            return False
        patch = {"status": {"components": {component: {"lifecycle": lifecycle_status}}}}
        try:
            stored = self._patch(resource, namespace, name, patch, MERGE_PATCH, "status")
        except NotFound:
            return False
        if not _kept(stored, component, lifecycle_status):
            # OME's released CRD has no status.components.*.lifecycle: the server answers
            # 200 and drops it. Nothing was stored, so it is not a write, and patching on
            # would only repeat that for every component.
            self._service_status_dropped = True
            log.warning("InferenceService %s/%s: this cluster's InferenceService CRD has no "
                        "status.components.*.lifecycle and drops it; not writing it for the "
                        "rest of the run (the totals stay on the InferenceReplica)",
                        namespace, name)
            return False
        return True

    # -- helpers ------------------------------------------------------------------------

    def _resource(self, kind: str | None) -> Resource:
        resource = RESOURCES.get(kind or "")
        if resource is None:
            raise Invalid(f"kind {kind!r} is not one omegitops manages")
        return resource

    def _get(self, resource: Resource, namespace: str | None, name: str) -> dict:
        return resource.fill_type(self.rest.request(
            "GET", resource.path(namespace, name), what=resource.object_id(namespace, name)))

    def _may_write(self) -> None:
        """LeaseLost before any write once the run's Lease may be someone else's."""
        if self.lease is not None:
            self.lease.check()

    def _create(self, resource: Resource, obj: dict) -> dict:
        self._may_write()
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name") or meta.get("generateName", "")
        if resource.namespaced and not namespace:
            raise Invalid(f"{resource.kind}/{name}: metadata.namespace is required")
        body = {**obj, "metadata": {k: v for k, v in meta.items() if k not in SERVER_FIELDS}}
        resource.with_type(body)
        return self._remember(resource, resource.fill_type(self.rest.request(
            "POST", resource.path(namespace), body=body,
            what=resource.object_id(namespace, name))))

    def _replace(self, obj: dict, subresource: str | None) -> dict:
        self._may_write()
        resource = self._resource(obj.get("kind"))
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not name or (resource.namespaced and not namespace):
            raise Invalid(f"{resource.kind}: metadata.name and metadata.namespace are required")
        what = resource.object_id(namespace, name)
        if not meta.get("resourceVersion"):
            raise Invalid(f"{what}: metadata.resourceVersion must be specified for an update")
        return self._remember(resource, resource.fill_type(self.rest.request(
            "PUT", resource.path(namespace, name, subresource), body=obj, what=what)))

    def _patch(self, resource: Resource, namespace: str | None, name: str, patch: dict,
               content_type: str, subresource: str | None = None) -> dict:
        self._may_write()
        if resource.custom and content_type == STRATEGIC_PATCH:
            content_type = MERGE_PATCH  # CRDs accept no strategic merge (HTTP 415)
        return self._remember(resource, resource.fill_type(self.rest.request(
            "PATCH", resource.path(namespace, name, subresource), body=patch,
            content_type=content_type, what=resource.object_id(namespace, name))))


def _transformed(objects: Iterable[dict], transform: Callable[[dict], dict] | None
                 ) -> list[dict]:
    return [transform(o) for o in objects] if transform else list(objects)


def _kept(stored: dict, component: str, lifecycle_status: dict) -> bool:
    """Whether the answer to the status patch holds every field that was set."""
    components = (stored.get("status") or {}).get("components") or {}
    kept = (components.get(component) or {}).get("lifecycle")
    if not isinstance(kept, dict):
        return False
    return all(key in kept for key, value in lifecycle_status.items() if value is not None)


def _crd_hint(kind: str) -> str:
    if kind == base.INFERENCE_REPLICA:
        return " (install deploy/crds/inferencereplica-crd.yaml)"
    return ""
