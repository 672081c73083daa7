"""An in-memory HTTP double of the Kubernetes API server, for the wire tests.

Usage::

    with ApiServerDouble(podgroups=True) as api:
        client = plain_client(api.url)         # http://127.0.0.1:PORT, no TLS
        ...
        api.fail("GET", r"/pods$", status=500, times=2)
        assert [r.verb for r in api.requests] == [...]

What it does as the real one does:

- routes ``/api/v1[/namespaces/{ns}]/{plural}[/{name}[/status]]`` and
  ``/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/status]]``,
  all-namespace lists included, and discovery ``GET /api/v1``,
  ``GET /apis/{group}/{version}`` (404 when the group is not served);
- fills namespace, uid, creationTimestamp, generation, ``generateName``
  names, and a global resourceVersion bumped by every write (a write that
  changes nothing keeps it); answers POST with 201;
- answers errors with Status JSON and the real reasons: NotFound (404),
  AlreadyExists and Conflict on a stale resourceVersion (409), Invalid (422),
  BadRequest (400), UnsupportedMediaType (415: strategic merge on a CRD);
- PUT, JSON patch, merge patch and strategic merge patch (the list keys of
  ``patches.MERGE_KEYS``); a resourceVersion in a patch is a precondition;
- keeps spec and status apart across the status subresource;
- refuses pod spec changes other than container images and removing
  scheduling gates (422), as the real one does;
- honours finalizers and deletionTimestamp; a pod bound to a node gets
  deletionTimestamp = now + grace and stays until ``finish_terminating``;
  an unbound pod, or grace 0, goes at once; a second DELETE never extends;
- filters lists by label selectors and by field selectors
  (``metadata.name``, ``metadata.namespace``, events' ``involvedObject.*``,
  ``reason``, ``type``; pods' ``spec.nodeName``, ``status.phase``);
- leaves ``kind`` and ``apiVersion`` out of built-in kinds' list items;
- validates and prunes custom resources against the CRD's schema when given
  one (``crd_schemas``), as a structural schema makes the real one do;
- pages lists with ``limit`` and ``continue`` (items in namespace/name order,
  ``metadata.continue`` and ``remainingItemCount`` while more remain); a
  token from before ``compact()`` answers 410 Expired, as etcd's compaction
  makes the real one do;
- authorizes: ``forbid(verb, group, resource, namespace=None)`` refuses matching
  requests with 403 Forbidden and the real message, and
  ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` answers
  whether a request would be allowed (everything else is).

With ``store=`` (e.g. ``simstore.SimStore``), objects live in that store instead
of the double's own dicts: reads come from ``store.objects(served)`` and
``store.get(...)`` (selectors are still applied here), and every write
(POST, PUT, PATCH, DELETE) goes to ``store.create/update/patch/delete``, which
answer as the verbs here do (raising ``ApiError``). Routing, discovery, faults
and the request log stay the double's. ``add``, ``modify`` and
``finish_terminating`` are for the double's own storage only.

What it does not: watches, consistent snapshots across a list's pages (each
page is read from the current objects), server-side apply, dry runs,
admission (defaults, quotas, namespaces that must exist), owner-reference
garbage collection, authentication and RBAC rules, protobuf/CBOR.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import re
import string
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

import crdschema
from patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from selection import SelectorError, field_selector, label_selector

from omegitops.cluster.times import format_time


@dataclass(frozen=True)
class Served:
    """A resource the double serves."""

    group_version: str  # "v1", "apps/v1", "ome.io/v1beta1"
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False  # has a status subresource
    custom: bool = False  # a CRD: no strategic merge, objects keep kind in lists

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0]

    def qualified(self) -> str:
        """``pods`` or ``inferencereplicas.ome.io``, as the API server names them in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILT_IN = (
    Served("v1", "pods", "Pod", status=True),
    Served("v1", "services", "Service", status=True),
    Served("v1", "events", "Event"),
    Served("v1", "nodes", "Node", namespaced=False, status=True),
    Served("v1", "namespaces", "Namespace", namespaced=False, status=True),
    Served("apps/v1", "controllerrevisions", "ControllerRevision"),
    Served("coordination.k8s.io/v1", "leases", "Lease"),
    Served("ome.io/v1beta1", "inferencereplicas", "InferenceReplica", status=True, custom=True),
)
INFERENCE_SERVICES = Served("ome.io/v1beta1", "inferenceservices", "InferenceService",
                            status=True, custom=True)
# Asked, never stored: whether a request of the caller would be allowed.
ACCESS_REVIEWS = Served("authorization.k8s.io/v1", "selfsubjectaccessreviews",
                        "SelfSubjectAccessReview", namespaced=False)
# The account the wire tests' requests are made as, in Forbidden messages.
USER = "system:serviceaccount:omegitops:omegitops"
POD_GROUPS = Served("scheduling.x-k8s.io/v1alpha1", "podgroups", "PodGroup", status=True,
                    custom=True)

# Metadata the server owns: a PUT cannot change it.
SERVER_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                   "generation", "namespace", "name")
DEFAULT_GRACE = 30
DROP = "drop"


class ApiError(Exception):
    """Answered as a Status: ``code``, ``reason`` and ``message``."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


@dataclass(frozen=True)
class Request:
    """One logged request: ``verb`` is the RBAC verb (list, get, create, update, patch,
    delete) or ``discovery``."""

    method: str
    path: str
    query: dict[str, str]
    verb: str
    content_type: str = ""


@dataclass
class Fault:
    """The next ``times`` requests matching ``method`` and ``path`` (a regex searched in the
    path) fail: an error Status, a delay before the normal answer, or a dropped connection
    (before the request is carried out, or with ``landed`` after it)."""

    method: str
    path: re.Pattern
    times: int
    status: int | None = None
    reason: str = ""
    delay: float = 0.0
    drop: bool = False
    query: re.Pattern | None = None  # searched in the raw query string too
    landed: bool = False  # with drop: carried out first, only the answer is lost

    def matches(self, method: str, path: str, query: str = "") -> bool:
        return self.times > 0 and self.method in ("*", method) and bool(
            self.path.search(path)) and (self.query is None or bool(self.query.search(query)))


@dataclass(frozen=True)
class Denial:
    """Requests ``forbid`` refuses: a verb on group/resource[/subresource], in one
    namespace or (None) in all."""

    verb: str
    group: str
    resource: str  # with "/subresource" when there is one
    namespace: str | None = None

    def covers(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        # A permission asked for every namespace (None) is missing if any namespace lacks it.
        return (self.verb, self.group, self.resource) == (verb, group, resource) and (
            self.namespace is None or namespace is None or self.namespace == namespace)


@dataclass
class Route:
    served: Served | None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    discovery: str | None = None  # a group/version, "" for /apis


@dataclass
class ApiServerDouble:
    """The API server: state, routing, faults and the request log; ``start`` serves HTTP."""

    podgroups: bool = False
    inferenceservices: bool = False
    crd_schemas: dict[str, dict] = field(default_factory=dict)  # plural -> openAPIV3Schema
    clock: Any = time.time
    log_size: int = 5000
    store: Any = None  # another storage for the objects (see the module docstring)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self.requests: deque[Request] = deque(maxlen=self.log_size)
        self.faults: list[Fault] = []
        self.denials: list[Denial] = []
        self.resource_version = 0
        self.compacted = 0  # continue tokens from before this resourceVersion are expired
        self._converted: dict[str, tuple[dict, Any]] = {}  # plural -> (schema, validator)
        self._served = {(s.group_version, s.plural): s for s in (*BUILT_IN, ACCESS_REVIEWS)}
        self._store: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self.serve(POD_GROUPS, self.podgroups)
        self.serve(INFERENCE_SERVICES, self.inferenceservices)
        self._http: ThreadingHTTPServer | None = None

    # -- lifetime ---------------------------------------------------------------------

    def start(self) -> ApiServerDouble:
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.api = self  # type: ignore[attr-defined]
        self._http.handle_error = lambda request, address: None  # clients that hung up
        thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.01},
                                  daemon=True)
        thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._http is not None, "start() the double first"
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    # -- test helpers -----------------------------------------------------------------

    def serve(self, served: Served, on: bool = True) -> None:
        """Serve (or stop serving) a resource, as installing or removing its CRD would."""
        with self.lock:
            key = (served.group_version, served.plural)
            if on:
                self._served[key] = served
            else:
                self._served.pop(key, None)

    def fail(self, method: str, path: str, *, times: int = 1, status: int | None = None,
             reason: str = "", delay: float = 0.0, drop: bool = False,
             query: str | None = None, landed: bool = False) -> Fault:
        """Inject a fault on the next ``times`` matching requests (see ``Fault``)."""
        if status is None and not delay and not drop:
            status = 500
        fault = Fault(method.upper(), re.compile(path), times, status, reason, delay, drop,
                      re.compile(query) if query is not None else None, landed)
        with self.lock:
            self.faults.append(fault)
        return fault

    def forbid(self, verb: str, group: str, resource: str,
               namespace: str | None = None) -> None:
        """Refuse ``verb`` on ``group/resource[/subresource]`` (in ``namespace``, else in
        all), as RBAC that does not grant it would."""
        with self.lock:
            self.denials.append(Denial(verb, group, resource, namespace))

    def compact(self) -> None:
        """Forget history, as etcd's compaction does: continue tokens handed out so far
        answer 410 Expired."""
        with self.lock:
            self.compacted = self.resource_version + 1

    def calls(self, verb: str | None = None, path: str | None = None) -> list[Request]:
        """Logged requests with that verb and a path matching the regex ``path``."""
        with self.lock:
            return [r for r in self.requests if (verb is None or r.verb == verb)
                    and (path is None or re.search(path, r.path))]

    def clear_log(self) -> None:
        with self.lock:
            self.requests.clear()

    def add(self, obj: dict) -> dict:
        """Store an object as a create would, without HTTP (fixtures: nodes, namespaces)."""
        self._own_storage("add")
        served = self._served_for(obj)
        namespace = obj.get("metadata", {}).get("namespace") if served.namespaced else None
        with self.lock:
            return self._create(served, namespace, copy.deepcopy(obj), keep_status=True)

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """A stored object by kind (a copy), or None."""
        served = self._served_kind(kind)
        with self.lock:
            obj = self._objects(served).get((namespace or "", name))
            return copy.deepcopy(obj)

    def objects(self, kind: str) -> list[dict]:
        served = self._served_kind(kind)
        with self.lock:
            return [copy.deepcopy(o) for _, o in sorted(self._objects(served).items())]

    def modify(self, kind: str, namespace: str | None, name: str, change) -> dict:
        """Change a stored object in place as a controller would (``change(obj)``), bumping
        its resourceVersion: a kubelet binding a pod, another writer racing us."""
        self._own_storage("modify")
        served = self._served_kind(kind)
        with self.lock:
            obj = self._objects(served)[(namespace or "", name)]
            change(obj)
            self._bump(obj)
            return copy.deepcopy(obj)

    def finish_terminating(self, *, all_pods: bool = True) -> int:
        """Remove terminating pods (all, or those whose grace has passed) that have no
        finalizers, as the kubelet and garbage collector would; returns how many."""
        self._own_storage("finish_terminating")
        served = self._served[("v1", "pods")]
        now = self.clock()
        gone = 0
        with self.lock:
            pods = self._objects(served)
            for key, pod in list(pods.items()):
                meta = pod["metadata"]
                stamp = meta.get("deletionTimestamp")
                if not stamp or meta.get("finalizers"):
                    continue
                if all_pods or _seconds(stamp) <= now:
                    del pods[key]
                    gone += 1
            if gone:
                self.resource_version += 1
        return gone

    # -- one request --------------------------------------------------------------------

    def handle(self, method: str, target: str, content_type: str, body: bytes) -> Any:
        """Answer one request: ``(status code, JSON payload)``, or DROP for no answer."""
        parts = urlsplit(target)
        path, query = parts.path, dict(parse_qsl(parts.query))
        route = self._route(path)
        verb = _verb(method, route)
        with self.lock:
            self.requests.append(Request(method, path, query, verb, content_type))
            fault = next((f for f in self.faults if f.matches(method, path, parts.query)),
                         None)
            if fault is not None:
                fault.times -= 1
            refusal = self._refusal(verb, route)
        if refusal is not None:
            return 403, refusal.status()
        if fault is not None:
            if fault.drop and not fault.landed:
                return DROP
            if fault.status is not None:
                return fault.status, ApiError(fault.status, fault.reason or _reason(fault.status),
                                              "injected fault").status()
            time.sleep(fault.delay)  # then answer normally: the write still happens
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return 400, ApiError(400, "BadRequest", "the body is not JSON").status()
        try:
            with self.lock:
                answer = self._dispatch(method, route, query, content_type, payload)
        except ApiError as err:
            answer = err.code, err.status()
        return DROP if fault is not None and fault.landed else answer

    def _dispatch(self, method: str, route: Route, query: dict, content_type: str,
                  body: Any) -> tuple[int, dict]:
        if route.discovery is not None:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "discovery is read-only")
            return 200, self._discovery(route.discovery)
        served, namespace, name, sub = route.served, route.namespace, route.name, route.subresource
        if served is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if served is ACCESS_REVIEWS:
            if method != "POST" or name is not None:
                raise ApiError(405, "MethodNotAllowed", "access reviews are only created")
            return 201, self._review(_object_body(body))
        if method == "GET" and name is None:
            return 200, self._list(served, namespace, query)
        if method == "GET":
            return 200, self._read(served, namespace, name)
        store = self.store
        if method == "POST" and name is None:
            if served.namespaced and namespace is None:
                raise ApiError(405, "MethodNotAllowed", "POST needs a namespace in the path")
            if store is not None:
                return 201, store.create(self, served, namespace, _object_body(body))
            return 201, self._create(served, namespace, _object_body(body))
        if name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not supported")
        if method == "PUT":
            if store is not None:
                return 200, store.update(self, served, namespace, name, _object_body(body), sub)
            return 200, self._update(served, namespace, name, _object_body(body), sub)
        if method == "PATCH":
            if store is not None:
                return 200, store.patch(self, served, namespace, name, sub, content_type, body)
            return 200, self._patch(served, namespace, name, sub, content_type, body)
        if method == "DELETE" and sub is None:
            if store is not None:
                return 200, store.delete(self, served, namespace, name, query, body or {})
            return 200, self._delete(served, namespace, name, query, body or {})
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    # -- routing ----------------------------------------------------------------------

    def _route(self, path: str) -> Route:
        segments = [unquote(s) for s in path.strip("/").split("/") if s]
        if segments == ["apis"]:
            return Route(None, discovery="")
        if len(segments) >= 2 and segments[0] == "api":
            group_version, rest = segments[1], segments[2:]
        elif len(segments) >= 3 and segments[0] == "apis":
            group_version, rest = f"{segments[1]}/{segments[2]}", segments[3:]
        else:
            return Route(None)
        if not rest:
            return Route(None, discovery=group_version)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            return Route(None)
        served = self._served.get((group_version, rest[0]))
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if served is None or (namespace is not None and not served.namespaced) or (
                served.namespaced and name is not None and namespace is None) or (
                sub is not None and (sub != "status" or not served.status)):
            return Route(None)
        return Route(served, namespace, name, sub)

    def _discovery(self, group_version: str) -> dict:
        if group_version == "":
            versions = sorted({s.group_version for s in self._served.values() if s.group})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": gv.split("/")[0], "versions": [{"groupVersion": gv,
                                                         "version": gv.split("/")[1]}]}
                for gv in versions]}
        found = [s for s in self._served.values() if s.group_version == group_version]
        if not found:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resources = []
        for s in sorted(found, key=lambda s: s.plural):
            resources.append({"name": s.plural, "singularName": s.kind.lower(),
                              "namespaced": s.namespaced, "kind": s.kind,
                              "verbs": ["create", "delete", "get", "list", "patch", "update"]})
            if s.status:
                resources.append({"name": f"{s.plural}/status", "singularName": "",
                                  "namespaced": s.namespaced, "kind": s.kind,
                                  "verbs": ["get", "patch", "update"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": resources}

    # -- authorization ------------------------------------------------------------------

    def _denied(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        return any(d.covers(verb, group, resource, namespace) for d in self.denials)

    def _refusal(self, verb: str, route: Route) -> ApiError | None:
        """The 403 the real server answers when RBAC does not grant the request."""
        served = route.served
        if served is None or served is ACCESS_REVIEWS or verb in ("discovery", "unknown"):
            return None
        resource = served.plural + (f"/{route.subresource}" if route.subresource else "")
        if not self._denied(verb, served.group, resource, route.namespace):
            return None
        what = f'{served.qualified()} "{route.name}"' if route.name else served.qualified()
        plural, _, sub = resource.partition("/")
        where = (f'in the namespace "{route.namespace}"' if route.namespace
                 else "at the cluster scope")
        return ApiError(403, "Forbidden", f'{what} is forbidden: User "{USER}" cannot {verb} '
                        f'resource "{plural}"' + (f' in subresource "{sub}"' if sub else "")
                        + f' in API group "{served.group}" {where}')

    def _review(self, review: dict) -> dict:
        attributes = (review.get("spec") or {}).get("resourceAttributes") or {}
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource += f"/{attributes['subresource']}"
        allowed = not self._denied(attributes.get("verb", ""), attributes.get("group", ""),
                                   resource, attributes.get("namespace") or None)
        return {**review, "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview", "metadata": {},
                "status": {"allowed": allowed}}

    # -- the verbs ----------------------------------------------------------------------

    def _list(self, served: Served, namespace: str | None, query: dict) -> dict:
        try:
            by_labels = label_selector(query.get("labelSelector"))
            by_fields = field_selector(query.get("fieldSelector"), served.plural)
        except SelectorError as err:
            raise ApiError(400, "BadRequest", str(err)) from err
        limit, version, after = self._page(query)
        items, keys = [], []
        for key, obj in sorted(self._objects(served).items()):
            if (namespace is not None and key[0] != namespace) or (
                    after is not None and key <= after):
                continue
            if by_labels(obj) and by_fields(obj):
                item = copy.deepcopy(obj)
                if not served.custom:
                    # Built-in kinds' list items carry no kind or apiVersion.
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                items.append(item)
                keys.append(key)
        metadata: dict[str, Any] = {"resourceVersion": version}
        if limit is not None and len(items) > limit:
            metadata["continue"] = _token(version, keys[limit - 1])
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {"kind": f"{served.kind}List", "apiVersion": served.group_version,
                "metadata": metadata, "items": items}

    def _page(self, query: dict) -> tuple[int | None, str, tuple[str, str] | None]:
        """(limit, the list's resourceVersion, the key the page starts after)."""
        limit = None
        if query.get("limit"):
            try:
                limit = int(query["limit"])
            except ValueError as err:
                raise ApiError(400, "BadRequest", f"invalid limit {query['limit']!r}") from err
            limit = limit if limit > 0 else None
        token = query.get("continue")
        if not token:
            return limit, self._list_version(), None
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            version, after = str(decoded["rv"]), (decoded["ns"], decoded["name"])
        except (ValueError, KeyError, TypeError) as err:
            raise ApiError(400, "BadRequest", "continue key is not valid") from err
        if int(version) < self.compacted:
            raise ApiError(410, "Expired", "The provided continue parameter is too old to "
                           "display a consistent list result. You can start a new list "
                           "without the continue parameter.")
        return limit, version, after

    def _read(self, served: Served, namespace: str | None, name: str) -> dict:
        return copy.deepcopy(self._stored(served, namespace, name))

    def admit_create(self, served: Served, namespace: str | None, obj: dict) -> str | None:
        """What the API server checks and fills on every create, whatever stores it:
        kind, namespace, a name (from generateName) and no resourceVersion. Returns the
        namespace the object lands in."""
        meta = obj.setdefault("metadata", {})
        self._check_type(served, obj)
        if served.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does "
                               "not match the namespace sent on the request")
            namespace = namespace or meta.get("namespace")
            if not namespace:
                raise ApiError(422, "Invalid", "metadata.namespace: Required value")
            meta["namespace"] = namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid",
                               "metadata.name: Required value: name or generateName is required")
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = meta["generateName"] + suffix
        if meta.get("resourceVersion"):
            raise ApiError(422, "Invalid", "metadata.resourceVersion: Invalid value: "
                           "resourceVersion should not be set on objects to be created")
        obj["apiVersion"], obj["kind"] = served.group_version, served.kind
        return namespace

    def _create(self, served: Served, namespace: str | None, obj: dict,
                keep_status: bool = False) -> dict:
        namespace = self.admit_create(served, namespace, obj)
        meta = obj["metadata"]
        objects = self._objects(served)
        key = (namespace or "", meta["name"])
        if key in objects:
            raise ApiError(409, "AlreadyExists",
                           f'{served.qualified()} "{meta["name"]}" already exists')
        for transient in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=self._now_text(), generation=1)
        if served.kind == "Pod":
            _check_pod(obj)
            obj["status"] = obj.get("status") if keep_status else {"phase": "Pending"}
        elif served.status and not keep_status:
            obj.pop("status", None)  # the status subresource: a create cannot set it
        obj = self._validated(served, obj)
        self._bump(obj)
        objects[key] = obj
        return copy.deepcopy(obj)

    def _update(self, served: Served, namespace: str | None, name: str, body: dict,
                sub: str | None) -> dict:
        stored = self._stored(served, namespace, name)
        self._check_type(served, body)
        meta = body.setdefault("metadata", {})
        if meta.get("name", name) != name or (
                served.namespaced and meta.get("namespace", namespace) != namespace):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name "
                           "on the URL")
        version = meta.get("resourceVersion")
        if not version and served.custom:
            raise ApiError(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must "
                           "be specified for an update")
        if version and version != stored["metadata"]["resourceVersion"]:
            raise self._conflict(served, name)
        return self._write(served, stored, body, sub)

    def _patch(self, served: Served, namespace: str | None, name: str, sub: str | None,
               content_type: str, patch: Any) -> dict:
        stored = self._stored(served, namespace, name)
        kind = content_type.split(";")[0].strip()
        try:
            if kind == "application/json-patch+json":
                if not isinstance(patch, list):
                    raise ApiError(400, "BadRequest", "a JSON patch must be a list")
                patched = json_patch(stored, patch)
            elif kind == "application/merge-patch+json":
                patched = merge_patch(stored, patch)
            elif kind == "application/strategic-merge-patch+json" and not served.custom:
                patched = strategic_merge_patch(stored, patch)
            else:
                accepted = ["application/json-patch+json", "application/merge-patch+json"]
                if not served.custom:
                    accepted.append("application/strategic-merge-patch+json")
                raise ApiError(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format - accepted "
                               f"media types include: {', '.join(accepted)}")
        except PatchError as err:
            raise ApiError(422, "Invalid", str(err)) from err
        if not isinstance(patched, dict):
            raise ApiError(422, "Invalid", "the patch does not leave an object")
        meta = patched.setdefault("metadata", {})
        # A resourceVersion in the patch is a precondition; none means "whatever is stored".
        if meta.get("resourceVersion", stored["metadata"]["resourceVersion"]) != \
                stored["metadata"]["resourceVersion"]:
            raise self._conflict(served, name)
        meta["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return self._write(served, stored, patched, sub)

    def _write(self, served: Served, stored: dict, body: dict, sub: str | None) -> dict:
        """Store ``body`` over ``stored``: only status through /status, never status otherwise."""
        if sub == "status":
            new = copy.deepcopy(stored)
            if body.get("status") is None:
                new.pop("status", None)
            else:
                new["status"] = body["status"]
        else:
            new = copy.deepcopy(body)
            meta = new.setdefault("metadata", {})
            for key in SERVER_METADATA:
                if key in stored["metadata"]:
                    meta[key] = stored["metadata"][key]
                else:
                    meta.pop(key, None)
            if served.status:
                if "status" in stored:
                    new["status"] = copy.deepcopy(stored["status"])
                else:
                    new.pop("status", None)
            if served.kind == "Pod":
                _check_pod_update(stored, new)
            elif new.get("spec") != stored.get("spec"):
                meta["generation"] = stored["metadata"].get("generation", 1) + 1
        new["apiVersion"], new["kind"] = served.group_version, served.kind
        new = self._validated(served, new)
        new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if new == stored:
            return copy.deepcopy(stored)  # nothing changed: no new resourceVersion
        meta = new["metadata"]
        key = (meta.get("namespace", "") if served.namespaced else "", meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and (
                served.kind != "Pod"):
            del self._objects(served)[key]  # the last finalizer is gone
            self.resource_version += 1
            return new
        self._bump(new)
        self._objects(served)[key] = new
        return copy.deepcopy(new)

    def _delete(self, served: Served, namespace: str | None, name: str, query: dict,
                options: dict) -> dict:
        stored = self._stored(served, namespace, name)
        meta = stored["metadata"]
        wanted = (options.get("preconditions") or {}).get("resourceVersion")
        if wanted and wanted != meta["resourceVersion"]:
            raise self._conflict(served, name)
        key = (namespace or "", name)
        if served.kind == "Pod":
            return self._delete_pod(stored, key, query, options)
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = self._now_text()
                meta["deletionGracePeriodSeconds"] = 0
                self._bump(stored)
            return copy.deepcopy(stored)
        del self._objects(served)[key]
        self.resource_version += 1
        return copy.deepcopy(stored)

    def _delete_pod(self, pod: dict, key: tuple[str, str], query: dict, options: dict) -> dict:
        meta = pod["metadata"]
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        if grace is None:
            grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        grace = max(0, int(grace))
        if not pod.get("spec", {}).get("nodeName"):
            grace = 0  # no kubelet has anything to stop
        now = self.clock()
        deadline = now + grace
        if meta.get("deletionTimestamp"):
            deadline = min(deadline, _seconds(meta["deletionTimestamp"]))  # never extended
        if deadline <= now and not meta.get("finalizers"):
            del self._objects(self._served[("v1", "pods")])[key]
            self.resource_version += 1
            return copy.deepcopy(pod)
        stamp = format_time(int(deadline))
        if meta.get("deletionTimestamp") != stamp:
            meta["deletionTimestamp"] = stamp
            meta["deletionGracePeriodSeconds"] = max(0, round(deadline - now))
            self._bump(pod)
        return copy.deepcopy(pod)

    # -- helpers ----------------------------------------------------------------------

    def _objects(self, served: Served) -> dict[tuple[str, str], dict]:
        if self.store is not None:
            return self.store.objects(served)  # a snapshot: writes go through the store
        return self._store.setdefault((served.group_version, served.plural), {})

    def _own_storage(self, what: str) -> None:
        if self.store is not None:
            raise TypeError(f"{what}: the objects live in {type(self.store).__name__}; "
                            "change them there")

    def _list_version(self) -> str:
        if self.store is not None:
            return self.store.resource_version()
        return str(self.resource_version)

    def _stored(self, served: Served, namespace: str | None, name: str) -> dict:
        if self.store is not None:
            obj = self.store.get(served, namespace, name)
        else:
            obj = self._objects(served).get((namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{served.qualified()} "{name}" not found')
        return obj

    def _served_for(self, obj: dict) -> Served:
        for served in self._served.values():
            if served.kind == obj.get("kind") and served.group_version == obj.get("apiVersion"):
                return served
        raise KeyError(f"not served: {obj.get('apiVersion')} {obj.get('kind')}")

    def _served_kind(self, kind: str) -> Served:
        for served in (*self._served.values(), POD_GROUPS, INFERENCE_SERVICES):
            if served.kind == kind:
                return served
        raise KeyError(kind)

    @staticmethod
    def _check_type(served: Served, obj: dict) -> None:
        if obj.get("kind") not in (None, served.kind) or obj.get("apiVersion") not in (
                None, served.group_version):
            raise ApiError(400, "BadRequest", f"the API version in the data "
                           f"({obj.get('apiVersion')}) or kind ({obj.get('kind')}) does not "
                           f"match the expected {served.group_version} {served.kind}")

    def _validated(self, served: Served, obj: dict) -> dict:
        schema = self.crd_schemas.get(served.plural)
        if schema is None:
            return obj
        obj = crdschema.prune(obj, schema)
        cached = self._converted.get(served.plural)
        if cached is None or cached[0] is not schema:
            # Converting OME's 1.8 MB InferenceService schema takes longer than a request.
            cached = (schema, crdschema.validator(schema))
            self._converted[served.plural] = cached
        problems = crdschema.validate(obj, schema, cached[1])
        if problems:
            raise ApiError(422, "Invalid", f'{served.kind}.{served.group} '
                           f'"{obj["metadata"].get("name")}" is invalid: ' + "; ".join(problems))
        return obj

    @staticmethod
    def _conflict(served: Served, name: str) -> ApiError:
        return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {served.qualified()} '
                        f'"{name}": the object has been modified; please apply your changes to '
                        f'the latest version and try again')

    def _bump(self, obj: dict) -> None:
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)

    def _now_text(self) -> str:
        return format_time(int(self.clock()))


def _verb(method: str, route: Route) -> str:
    if route.discovery is not None:
        return "discovery"
    if route.served is None:
        return "unknown"
    if method == "GET":
        return "list" if route.name is None else "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower())


def _reason(status: int) -> str:
    return {403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
            422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}.get(status, "")


def _token(version: str, after: tuple[str, str]) -> str:
    """An opaque continue token: the list's resourceVersion and the last key served."""
    text = json.dumps({"rv": version, "ns": after[0], "name": after[1]})
    return base64.urlsafe_b64encode(text.encode()).decode()


def _object_body(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body must be a JSON object")
    return body


def _seconds(stamp: str) -> float:
    from omegitops.cluster.times import parse_time

    return parse_time(stamp)


def _check_pod(pod: dict) -> None:
    containers = (pod.get("spec") or {}).get("containers")
    if not containers or not all(c.get("name") and c.get("image") for c in containers):
        raise ApiError(422, "Invalid", f'Pod "{pod["metadata"]["name"]}" is invalid: '
                       "spec.containers: Required value")


def _check_pod_update(stored: dict, new: dict) -> None:
    """Only container images change in place, and scheduling gates can only be removed."""
    old_spec, new_spec = copy.deepcopy(stored.get("spec") or {}), copy.deepcopy(
        new.get("spec") or {})
    name = stored["metadata"]["name"]
    for key in ("containers", "initContainers"):
        old, updated = old_spec.get(key) or [], new_spec.get(key) or []
        if [c.get("name") for c in old] != [c.get("name") for c in updated]:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec: Forbidden: pod '
                           "updates may not add or remove containers")
        for container in old + updated:
            container.pop("image", None)
    old_gates = old_spec.pop("schedulingGates", None) or []
    new_gates = new_spec.pop("schedulingGates", None) or []
    if any(gate not in old_gates for gate in new_gates):
        raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.schedulingGates: '
                       "Forbidden: only deletion is allowed")
    if old_spec != new_spec:
        raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec: Forbidden: pod updates '
                       "may not change fields other than `spec.containers[*].image`")


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with Content-Length and keep-alive; headers and body leave in one write
    (a big write buffer, no Nagle), else each answer stalls ~40 ms on delayed ACKs."""

    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 20
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        api: ApiServerDouble = self.server.api  # type: ignore[attr-defined]
        answer = api.handle(self.command, self.path, self.headers.get("Content-Type", ""), body)
        if answer == DROP:
            self.close_connection = True  # hang up without a word
            return
        status, payload = answer
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        pass
