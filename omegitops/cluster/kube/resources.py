"""Where each kind lives in the Kubernetes API: its group/version, plural and URL paths.

The backend speaks to the API server by path (``/api/v1/namespaces/ns/pods/name``),
so this table is also the list of what RBAC must allow (see ``docs`` in the
package's ``__init__``).
"""

from __future__ import annotations

from dataclasses import dataclass
from sys import intern
from urllib.parse import quote

from omegitops.cluster import base
from omegitops.cluster.errors import object_id

INFERENCE_SERVICE = "InferenceService"
LEASE = "Lease"


@dataclass(frozen=True)
class Resource:
    """One REST resource: ``kind`` served as ``plural`` under ``api_version``."""

    kind: str
    api_version: str  # "v1", "apps/v1", "ome.io/v1beta1"
    plural: str
    namespaced: bool = True
    status: bool = False  # has a status subresource
    custom: bool = False  # served from a CRD: no strategic merge patch, needs discovery

    @property
    def group_version_path(self) -> str:
        """``/api/v1`` for the core group, ``/apis/{group}/{version}`` for the others."""
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The collection (all namespaces when ``namespace`` is None), an object or a subresource."""
        parts = [self.group_version_path]
        if self.namespaced and namespace:
            parts += ["namespaces", quote(namespace, safe="")]
        parts.append(self.plural)
        if name:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    def object_id(self, namespace: str | None, name: str) -> str:
        return object_id(self.kind, namespace if self.namespaced else None, name)

    def fill_type(self, obj: dict) -> dict:
        """An object as read: items of a built-in kind's list come without kind and
        apiVersion, which are put back.

        ``metadata.managedFields`` goes: server-side apply's bookkeeping, which
        omegitops never reads and which is a large part of each object a real API
        server sends (client-go informers drop it the same way, with a transform).
        A PUT without it leaves the server's as they are.

        The texts objects of a fleet repeat are shared (``share_texts``).
        """
        self.with_type(obj)
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
        share_texts(obj)
        return obj

    def with_type(self, obj: dict) -> dict:
        """``obj`` with its kind and apiVersion set (a request's body)."""
        obj.setdefault("kind", self.kind)
        obj.setdefault("apiVersion", self.api_version)
        return obj


def share_texts(obj: dict) -> None:
    """Intern, in place, the text values a fleet's objects repeat: labels, annotations,
    conditions, container statuses, containers' names and images.

    The JSON decoder makes a new string of every value it reads; the 80,000 pods of
    10,000 services repeat theirs (a label's value, "True", a condition's type and
    reason, an image), and a pass holds every one of them. Interned (``sys.intern``: one
    string each, freed with its last user), the pods a pass holds take a third less
    memory. Values only change identity, never equality."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in ("labels", "annotations"):
            _intern_values(meta.get(key))
    for part, keys in (("spec", ("containers",)),
                       ("status", ("conditions", "containerStatuses"))):
        found = obj.get(part)
        if isinstance(found, dict):
            for key in keys:
                items = found.get(key)
                if isinstance(items, list):
                    for item in items:
                        _intern_values(item)


def _intern_values(values: object) -> None:
    if isinstance(values, dict):
        for key, value in values.items():
            if value.__class__ is str:
                values[key] = intern(value)


RESOURCES: dict[str, Resource] = {r.kind: r for r in (
    Resource(base.POD, "v1", "pods", status=True),
    Resource(base.SERVICE, "v1", "services", status=True),
    Resource(base.EVENT, "v1", "events"),
    Resource(base.NODE, "v1", "nodes", namespaced=False, status=True),
    Resource(base.CONTROLLER_REVISION, "apps/v1", "controllerrevisions"),
    Resource(base.POD_DISRUPTION_BUDGET, "policy/v1", "poddisruptionbudgets", status=True),
    Resource(LEASE, "coordination.k8s.io/v1", "leases"),
    Resource(base.INFERENCE_REPLICA, "ome.io/v1beta1", "inferencereplicas", status=True,
             custom=True),
    Resource(INFERENCE_SERVICE, "ome.io/v1beta1", "inferenceservices", status=True, custom=True),
    Resource(base.POD_GROUP, "scheduling.x-k8s.io/v1alpha1", "podgroups", status=True,
             custom=True),
)}


def label_selector(labels: dict[str, str] | None) -> str | None:
    """``a=b,c=d`` (sorted, so that request logs are stable), or None for no filter; a
    field selector of equalities has the same form."""
    if not labels:
        return None
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
