"""Errors of the cluster layer. Each names the object it is about as ``Kind/ns/name``."""

from __future__ import annotations

from omegitops.util.errors import ClusterError


def object_id(kind: str, namespace: str | None, name: str) -> str:
    """``Kind/ns/name`` for namespaced objects, ``Kind/name`` for cluster-scoped ones."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


class NotFound(ClusterError):
    """The object (or the kind) does not exist (HTTP 404)."""


class AlreadyExists(ClusterError):
    """An object of that kind and name exists already (HTTP 409 AlreadyExists)."""


class CreateRefused(ClusterError):
    """The API server will not create a pod omegitops builds, for a reason of the
    cluster's, not of omegitops' permissions: recorded on the Instance's operation."""


class NameTaken(CreateRefused):
    """The name of an object omegitops creates is held by one it does not manage (a pod
    whose labels were removed by hand, one of another controller's): never taken for
    omegitops' own earlier create, and never overwritten."""


class AdmissionRefused(CreateRefused):
    """An admission check refused the request: a ResourceQuota, a LimitRange, Pod
    Security, a webhook. The message is the API server's own."""


class Conflict(ClusterError):
    """A write based on a stale resourceVersion (HTTP 409 Conflict): read again and retry."""


class Invalid(ClusterError):
    """The API server refuses the object or the change (HTTP 422)."""


class Forbidden(ClusterError):
    """The job's account may not make that request (HTTP 403): RBAC must grant it."""


class Expired(ClusterError):
    """A list's continue token is older than the API server keeps (HTTP 410 Expired)."""


class Transient(ClusterError):
    """A failure worth retrying: timeout, throttling, connection reset (HTTP 429/5xx)."""


class LockHeld(ClusterError):
    """Another process holds the cluster (a lock file on ``sim:``, a Lease on a real cluster)."""


class LeaseLost(LockHeld):
    """Another run took the Lease while this one was running: it must stop writing."""
