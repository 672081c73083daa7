"""``KubeCluster``: the ``Cluster`` interface on a real API server.

Usage::

    with KubeCluster(context=None) as cluster:   # takes the Lease
        pods = cluster.list_pods({"app.kubernetes.io/managed-by": "omegitops"})

Each ``list_*`` call is one LIST over all namespaces with a label selector;
writes carry ``metadata.resourceVersion`` where the interface says so. Objects
go in and come out as plain Kubernetes JSON, as on the simulator.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from kubernetes.client import ApiClient

from omegitops.cluster import base
from omegitops.cluster.base import Cluster
from omegitops.cluster.errors import AlreadyExists, Invalid, NotFound
from omegitops.cluster.kube import events
from omegitops.cluster.kube.config import connect
from omegitops.cluster.kube.resources import (
    INFERENCE_SERVICE,
    RESOURCES,
    Resource,
    label_selector,
)
from omegitops.cluster.kube.rest import MERGE_PATCH, STRATEGIC_PATCH, Rest, RetryPolicy
from omegitops.cluster.lease import DEFAULT_DURATION_SECONDS, Lease

log = logging.getLogger(__name__)

# Kinds every API server serves; the others (CRDs) are found by discovery.
BUILT_IN = {base.POD, base.SERVICE, base.EVENT, base.NODE, base.CONTROLLER_REVISION}
# Conditions the kubelet owns; writing them would fight it.
KUBELET_CONDITIONS = {"PodScheduled", "Initialized", "ContainersReady", "Ready",
                      "PodReadyToStartContainers"}
# Read-only metadata a create must not send.
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "generation", "managedFields", "selfLink")


class KubeCluster(Cluster):
    """A real cluster through the official ``kubernetes`` client.

    ``context`` names a kubeconfig context (None: the current one, else the
    in-cluster service account); ``api_client`` replaces all that with a ready
    client (tests, proxies). ``lease=False`` skips the one-run-at-a-time Lease
    (read-only commands). ``retry`` and ``timeout`` tune the transport.
    """

    def __init__(self, context: str | None = None, *, api_client: ApiClient | None = None,
                 lease: bool = True, lease_namespace: str | None = None,
                 lease_seconds: int = DEFAULT_DURATION_SECONDS,
                 retry: RetryPolicy | None = None, timeout: float = 30.0) -> None:
        self.context = context
        self._own_client = api_client is None
        self.api_client = api_client if api_client is not None else connect(context)
        self.rest = Rest(self.api_client, retry=retry, timeout=timeout)
        self.lease = Lease(self.rest, lease_namespace, duration_seconds=lease_seconds) \
            if lease else None
        self._served: dict[str, set[str]] = {}  # group/version -> plurals, for the run

    # -- lifetime ---------------------------------------------------------------

    def __enter__(self) -> Self:
        if self.lease is not None:
            self.lease.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
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
        self.rest.request("DELETE", resource.path(namespace, name), query=query,
                          what=resource.object_id(namespace, name))

    def set_pod_condition(self, namespace: str, name: str, type: str, status: bool,
                          reason: str = "", message: str = "") -> dict:
        """GET the pod, then PATCH its status subresource unless the condition is as asked."""
        resource = RESOURCES[base.POD]
        what = resource.object_id(namespace, name)
        if type in KUBELET_CONDITIONS:
            raise Invalid(f"{what}: condition {type} is owned by the kubelet")
        pod = self._get(resource, namespace, name)
        patch = events.condition_patch(pod, type, status, reason, message, self.now())
        if patch is None:
            return pod
        return self._patch(resource, namespace, name, patch, STRATEGIC_PATCH, "status")

    def patch_pod_images(self, namespace: str, name: str, images: dict[str, str],
                         labels: dict[str, str] | None = None) -> dict:
        return self._patch(RESOURCES[base.POD], namespace, name,
                           events.images_patch(images, labels), STRATEGIC_PATCH)

    # -- other kinds --------------------------------------------------------------------

    def list_objects(self, kind: str, labels: dict[str, str] | None = None) -> list[dict]:
        """One LIST of the kind across all namespaces, filtered by the API server."""
        resource = self._resource(kind)
        try:
            found = self.rest.request("GET", resource.path(),
                                      query={"labelSelector": label_selector(labels)},
                                      what=f"{kind} list")
        except NotFound as err:
            raise NotFound(f"kind {kind} is not served by this cluster"
                           f"{_crd_hint(kind)}") from err
        return [resource.fill_type(item) for item in found.get("items") or []]

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
        self.rest.request("DELETE", resource.path(namespace, name),
                          what=resource.object_id(namespace, name))

    def record_event(self, event: dict) -> dict:
        """Create the Event, or count a repeat on the one with the same deterministic name."""
        involved = event.get("involvedObject") or {}
        if not involved.get("kind") or not involved.get("name"):
            raise Invalid("Event: involvedObject.kind and involvedObject.name are required")
        namespace = (event.get("metadata") or {}).get("namespace") or involved.get("namespace") \
            or "default"
        resource = RESOURCES[base.EVENT]
        name = events.event_name(event)
        stored = self.get_object(base.EVENT, namespace, name)
        if stored is None:
            try:
                return self._create(resource, events.new_event(event, namespace, self.now()))
            except AlreadyExists:
                # Another writer created it between our GET and POST: count ours on it.
                stored = self._get(resource, namespace, name)
        return self._patch(resource, namespace, name, events.repeat_patch(stored, self.now()),
                           MERGE_PATCH)

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
        if not self.has_kind(INFERENCE_SERVICE):
            return False
        patch = {"status": {"components": {component: {"lifecycle": lifecycle_status}}}}
        try:
            self._patch(resource, namespace, name, patch, MERGE_PATCH, "status")
        except NotFound:
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

    def _create(self, resource: Resource, obj: dict) -> dict:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name") or meta.get("generateName", "")
        if resource.namespaced and not namespace:
            raise Invalid(f"{resource.kind}/{name}: metadata.namespace is required")
        body = {**obj, "metadata": {k: v for k, v in meta.items() if k not in SERVER_FIELDS}}
        resource.fill_type(body)
        return resource.fill_type(self.rest.request(
            "POST", resource.path(namespace), body=body,
            what=resource.object_id(namespace, name)))

    def _replace(self, obj: dict, subresource: str | None) -> dict:
        resource = self._resource(obj.get("kind"))
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not name or (resource.namespaced and not namespace):
            raise Invalid(f"{resource.kind}: metadata.name and metadata.namespace are required")
        what = resource.object_id(namespace, name)
        if not meta.get("resourceVersion"):
            raise Invalid(f"{what}: metadata.resourceVersion must be specified for an update")
        return resource.fill_type(self.rest.request(
            "PUT", resource.path(namespace, name, subresource), body=obj, what=what))

    def _patch(self, resource: Resource, namespace: str | None, name: str, patch: dict,
               content_type: str, subresource: str | None = None) -> dict:
        if resource.custom and content_type == STRATEGIC_PATCH:
            content_type = MERGE_PATCH  # CRDs accept no strategic merge (HTTP 415)
        return resource.fill_type(self.rest.request(
            "PATCH", resource.path(namespace, name, subresource), body=patch,
            content_type=content_type, what=resource.object_id(namespace, name)))


def _crd_hint(kind: str) -> str:
    if kind == base.INFERENCE_REPLICA:
        return " (install deploy/crds/inferencereplica-crd.yaml)"
    return ""
