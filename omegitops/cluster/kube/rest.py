"""JSON over the official client's ``ApiClient``: one request, retried when worth it.

Why not the typed ``CoreV1Api`` methods: since client 3x they validate bodies
against pydantic models (an integer quantity such as ``nvidia.com/gpu: 1`` or
any field newer than the client is refused before sending), and they turn
answers into model objects. omegitops works on plain Kubernetes JSON, so this
layer sends and receives dicts through ``ApiClient.param_serialize`` and
``ApiClient.call_api``, which still give it the client's configuration:
kubeconfig or in-cluster credentials, TLS, token refresh, proxy.

Errors become the cluster layer's (``omegitops.cluster.errors``), chained to an
``HttpError`` that keeps the status and the server's Status message:

- 404 -> NotFound; 409 AlreadyExists -> AlreadyExists; other 409 -> Conflict
  (never retried: the caller reads again on its next pass);
- 400 and 422 -> Invalid;
- 403 -> Forbidden, naming the permission (verb, group/resource, namespace), once a
  SelfSubjectAccessReview confirms that RBAC does not grant it; else (an API server
  restarting, its authorizer not ready) retried, then Transient; an admission
  refusal (quota, LimitRange, Pod Security, a webhook) -> AdmissionRefused;
- 410 -> Expired (a list's continue token outlived the server's history);
- 429, 5xx, timeouts and connection errors -> retried with exponential
  back-off, then Transient.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from omegitops.cluster.errors import (
    AdmissionRefused,
    AlreadyExists,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    NotFound,
    Transient,
)
from omegitops.cluster.kube.access import REVIEW_PATH, permission_of, review_body
from omegitops.cluster.kube.token import TokenFile
from omegitops.util.errors import ClusterError

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 10.0


class HttpError(Exception):
    """A non-2xx answer: the status, and the reason and message of the server's Status."""

    def __init__(self, method: str, path: str, status: int, body: bytes,
                 retry_after: float | None = None) -> None:
        self.method, self.path, self.status = method, path, status
        self.reason, self.message = _status_fields(body)
        # Seconds the server asked to wait (Retry-After), as a 429 says while a kind's
        # watch cache is still starting.
        self.retry_after = retry_after
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {self.message}".rstrip())


class NotJson(ValueError):
    """A 2xx answer that is not JSON: what a proxy in front of the API server may send
    (a sign-in page), never the API server itself."""

    def __init__(self, method: str, path: str, status: int, body: bytes, why: str) -> None:
        shown = body[:80].decode("utf-8", "replace")
        super().__init__(f"{method} {path}: the HTTP {status} answer is not JSON ({why}): "
                         f"{shown!r}")


@dataclass
class RetryPolicy:
    """How often a transient failure is tried again: ``attempts`` tries in all,
    waiting ``backoff`` seconds, then twice that, and so on (0.2 s, 0.4 s by default)."""

    attempts: int = 3
    backoff: float = 0.2
    sleep: Callable[[float], None] = time.sleep


@dataclass
class Meter:
    """Bytes of answers read from the API server by this run, by what read them."""

    lists: int = 0  # LIST pages
    watches: int = 0  # watch streams
    other: int = 0  # GETs of one object, answers to writes, reviews, discovery
    requests: int = 0  # requests sent (a watch is one)

    @property
    def total(self) -> int:
        return self.lists + self.watches + self.other

    def as_dict(self) -> dict[str, int]:
        return {"lists": self.lists, "watches": self.watches, "other": self.other,
                "total": self.total, "requests": self.requests}


class Rest:
    """Requests to the API server, each naming the object it is about for error messages."""

    def __init__(self, client: ApiClient, *, retry: RetryPolicy | None = None,
                 timeout: float = 30.0) -> None:
        self.client = client
        self.retry = retry or RetryPolicy()
        # (connect, read) seconds: a dead server is noticed fast, a slow LIST still has time.
        self.timeout = (min(5.0, timeout), timeout)
        self.meter = Meter()
        self._meter_lock = threading.Lock()  # watch threads count too

    def count(self, kind: str, size: int, requests: int = 0) -> None:
        with self._meter_lock:
            setattr(self.meter, kind, getattr(self.meter, kind) + size)
            self.meter.requests += requests

    def request(self, method: str, path: str, *, what: str, query: dict[str, Any] | None = None,
                body: Any = None, content_type: str = JSON, counted_as: str = "other") -> dict:
        """Send one request (tried again while transient) and return the decoded JSON answer."""
        delay = self.retry.backoff
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return self._send(method, path, query, body, content_type, counted_as)
            except NotJson as err:
                raise ClusterError(f"{what}: {err}") from err
            except HttpError as err:
                if err.status == 401 and attempt < self.retry.attempts and \
                        self._token_renewed():
                    log.debug("%s %s: token refused, read again from its file", method, path)
                    continue  # at once: the new token is in place
                unconfirmed = err.status == 403 and not _admission(err) and \
                    not self._confirmed_forbidden(err)
                if unconfirmed and attempt == self.retry.attempts:
                    raise Transient(_not_ready(err, what)) from err
                if not unconfirmed and (err.status not in RETRIED_STATUSES
                                        or attempt == self.retry.attempts):
                    raise _cluster_error(err, what) from err
                cause: Exception = err
                # As client-go does: no sooner than the server asked (at most 10 s).
                delay = max(delay, min(err.retry_after or 0.0, MAX_RETRY_AFTER))
            except (urllib3.exceptions.HTTPError, OSError) as err:
                # Timeouts, refused or reset connections: nothing useful came back.
                if attempt == self.retry.attempts:
                    raise Transient(f"{what}: {method} {path}: {_describe(err)} "
                                    f"(after {attempt} tries)") from err
                cause = err
            log.debug("%s %s failed (%s); try %d of %d in %.1fs", method, path, cause,
                      attempt + 1, self.retry.attempts, delay)
            self.retry.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _token_renewed(self) -> bool:
        """After a 401: whether the token's file holds a new token to try (token.py)."""
        hook = getattr(self.client.configuration, "refresh_api_key_hook", None)
        return isinstance(hook, TokenFile) and hook.expire()

    def _confirmed_forbidden(self, err: HttpError) -> bool:
        """Whether a SelfSubjectAccessReview confirms the 403: RBAC does not grant the
        request's permission. A restarting API server answers 403 for a second or two,
        in RBAC's own words, before its authorizer has read the roles; the review, asked
        a moment later, grants what the request needs (or cannot be asked yet), and the
        request is tried again instead of being called missing RBAC."""
        permission = permission_of(err.method, err.path)
        if permission is None:
            return True  # not a resource (discovery): nothing to review
        try:
            review = self._send("POST", REVIEW_PATH, None, review_body(permission), JSON)
        except (HttpError, urllib3.exceptions.HTTPError, OSError, ValueError) as failed:
            log.debug("cannot review %s: %s", permission.describe(), failed)
            return False
        status = review.get("status") or {}
        return status.get("allowed") is False and not status.get("evaluationError")

    def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
              content_type: str, counted_as: str = "other") -> dict:
        response = self._call(method, path, query, body, content_type, self.timeout)
        data = response.read()
        self.count(counted_as, len(data), requests=1)
        if not 200 <= response.status <= 299:
            raise HttpError(method, path, response.status, data,
                            _retry_after(response.getheader("Retry-After")))
        # The standard library's decoder, not orjson's: orjson decodes a LIST page of
        # 8,000 pods in 0.57 of the time, but the pass that holds them peaked 8% higher
        # (its key cache does not share every repeated key as this decoder's memo does),
        # which 10,000 services' 974 MB cannot spare under their 1 GB.
        try:
            return json.loads(data) if data else {}
        except ValueError as err:
            raise NotJson(method, path, response.status, data, str(err)) from err

    def _call(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
              content_type: str, timeout: tuple[float, float]):
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(key, value) for key, value in (query or {}).items() if value is not None]
        try:
            method, url, headers, body, _ = self.client.param_serialize(
                method=method, resource_path=path, query_params=params,
                header_params=headers, body=body, auth_settings=["BearerToken"])
            return self.client.call_api(method, url, header_params=headers, body=body,
                                        _request_timeout=timeout)
        except ApiException as err:
            # The client raises this (status 0) for TLS failures: not worth retrying.
            raise ClusterError(f"{method} {path}: {err.reason or err}") from err

    def stream(self, method: str, path: str, *, what: str, query: dict[str, Any] | None,
               read_timeout: float) -> CountedStream:
        """Open a streamed answer (a watch), for ``kubernetes.watch.Watch`` to read.
        A failure to open it raises the cluster layer's error, as ``request`` does."""
        try:
            response = self._call(method, path, query, None, JSON,
                                  (self.timeout[0], read_timeout))
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise Transient(f"{what}: {method} {path}: {_describe(err)}") from err
        self.count("watches", 0, requests=1)
        if not 200 <= response.status <= 299:
            data = response.read()
            # A refused watch names the watch permission, not the list one.
            verb = "WATCH" if (query or {}).get("watch") else method
            raise _cluster_error(HttpError(verb, path, response.status, data), what)
        return CountedStream(response.response, self)


class CountedStream:
    """A streamed urllib3 answer whose bytes count in the run's ``Meter`` as watched."""

    def __init__(self, response: urllib3.BaseHTTPResponse, rest: Rest) -> None:
        self.response = response
        self.status = response.status
        self._rest = rest

    def stream(self, amt: int | None = None, decode_content: bool | None = None):
        for chunk in self.response.stream(amt, decode_content=decode_content):
            self._rest.count("watches", len(chunk))
            yield chunk

    def close(self) -> None:
        self.response.close()

    def release_conn(self) -> None:
        self.response.release_conn()

    def shutdown(self) -> None:
        """Close the connection under a read blocked in another thread."""
        self.response.shutdown()


def _cluster_error(err: HttpError, what: str) -> ClusterError:
    """The cluster layer's error for an HTTP failure, naming the object."""
    text = f"{what}: {err.message or err.reason or f'HTTP {err.status}'}"
    if _admission(err):
        return AdmissionRefused(text)
    if err.status == 404:
        return NotFound(text)
    if err.status == 409:
        return AlreadyExists(text) if err.reason == "AlreadyExists" else Conflict(text)
    if err.status in (400, 422):
        return Invalid(text)
    if err.status in RETRIED_STATUSES:
        return Transient(f"{text} (HTTP {err.status}, after retries)")
    if err.status == 403:
        return Forbidden(_forbidden(err, what))
    if err.status == 410:
        return Expired(text)
    if err.status == 401:
        return ClusterError(f"{text} (HTTP 401: check the credentials)")
    return ClusterError(f"{text} (HTTP {err.status})")


# How the API server words a 403 of RBAC ('User "x" cannot create resource "pods"'): any
# other 403 on a write is an admission plugin's (quota, LimitRange, Pod Security).
_RBAC = ("cannot ", " resource ")


def _admission(err: HttpError) -> bool:
    """Whether the answer is an admission refusal rather than RBAC or a bad request."""
    message = err.message or ""
    if "admission webhook" in message and "denied the request" in message:
        return True
    return err.status == 403 and err.method != "GET" and not all(
        part in message for part in _RBAC)


def _forbidden(err: HttpError, what: str) -> str:
    """One line naming the permission that is missing, whatever the server's wording."""
    permission = permission_of(err.method, err.path)
    if permission is None:
        return f"{what}: forbidden: {err.method} {err.path} (HTTP 403)"
    return (f"{what}: forbidden: {permission.describe()} is not granted to this account "
            "(HTTP 403; pipelines/common/rbac.yaml grants what omegitops needs)")


def _not_ready(err: HttpError, what: str) -> str:
    """A 403 that no SelfSubjectAccessReview confirms, as a passing fault."""
    permission = permission_of(err.method, err.path)
    granted = permission.describe() if permission else f"{err.method} {err.path}"
    return (f"{what}: refused (HTTP 403: {err.message or err.reason}), but no "
            f"SelfSubjectAccessReview denies {granted}: the API server's authorizer is not "
            "ready (restarting?), so this is not taken for missing RBAC")


def _status_fields(body: bytes) -> tuple[str, str]:
    """``reason`` and ``message`` of a ``Status`` answer; the raw text when it is not one."""
    try:
        status = json.loads(body)
    except ValueError:
        return "", body[:200].decode("utf-8", "replace").strip()
    if not isinstance(status, dict):
        return "", ""
    return str(status.get("reason") or ""), str(status.get("message") or "")


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the API server sends a number; a date is not used)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _describe(err: Exception) -> str:
    """urllib3 wraps the interesting error; show the innermost one."""
    reason = getattr(err, "reason", None)
    return f"{type(err).__name__}: {reason or err}"
