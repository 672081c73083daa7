"""An in-memory HTTP double of the Kubernetes API server, for the fault tests.

The ``kube`` backend's behaviour on a real API server is tested on one
(``tests/controlplane/``). This double is for what a real server cannot be made to
do on demand, and for counting requests where the count is the point:

    with ApiServerDouble(podgroups=True) as api:
        client = plain_client(api.url)         # http://127.0.0.1:PORT, no TLS
        ...
        api.fail("GET", r"/pods$", status=500, times=2)
        api.fail("POST", r"/events$", drop=True, landed=True)   # the reply is lost
        assert [r.verb for r in api.requests] == [...]

Faults (``fail``): an error Status (500, 429, 503, 409, 410, 403...), a delay before
the answer (a timeout), a connection dropped before the request is carried out or,
with ``landed``, after it. Every request is logged with its RBAC verb.

Enough of the API for the backend to run a pass on: routing of
``/api/v1[/namespaces/{ns}]/{plural}[/{name}[/status]]`` and the same under
``/apis/{group}/{version}``; discovery of a group/version (404 when not served:
``serve`` installs or removes a CRD's kind); uid, creationTimestamp and a global
resourceVersion that every write bumps (a write that changes nothing keeps it);
Conflict on a stale resourceVersion, AlreadyExists, NotFound; status kept apart
behind the status subresource; merge and strategic merge patches (containers by
name, conditions by type); equality label selectors; pages with ``limit`` and
``continue``; SelfSubjectAccessReviews, allowed but for what ``deny`` names. A DELETE removes at once.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

from omegitops.cluster.base import fields_match
from omegitops.util.times import format_time


@dataclass(frozen=True)
class Served:
    """A resource the double serves."""

    group_version: str  # "v1", "apps/v1", "ome.io/v1beta1"
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False  # has a status subresource

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
    Served("apps/v1", "controllerrevisions", "ControllerRevision"),
    Served("v1", "nodes", "Node", namespaced=False, status=True),
    Served("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", status=True),
    Served("ome.io/v1beta1", "inferencereplicas", "InferenceReplica", status=True),
)
INFERENCE_SERVICES = Served("ome.io/v1beta1", "inferenceservices", "InferenceService",
                            status=True)
POD_GROUPS = Served("scheduling.x-k8s.io/v1alpha1", "podgroups", "PodGroup", status=True)
# Asked, never stored: whether a request of the caller would be allowed (always).
ACCESS_REVIEWS = Served("authorization.k8s.io/v1", "selfsubjectaccessreviews",
                        "SelfSubjectAccessReview", namespaced=False)
# Asked, never stored: the rules that apply to the caller in a namespace. With nothing
# denied, one rule grants everything; with something denied, the answer is incomplete (as
# an authorizer besides RBAC's makes it), so that the caller asks access reviews.
RULES_REVIEWS = Served("authorization.k8s.io/v1", "selfsubjectrulesreviews",
                       "SelfSubjectRulesReview", namespaced=False)

# Metadata the server owns: a write cannot change it.
SERVER_METADATA = ("uid", "creationTimestamp", "namespace", "name")
# Lists merged by a key under strategic merge (what the backend patches on pods).
MERGE_KEYS = {"containers": "name", "conditions": "type"}
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
    retry_after: int | None = None  # with a status: the Retry-After header sent with it
    message: str = ""  # with a status: the Status message (default: one per status)
    # Answered as it is, with ``status`` (default 200): what a proxy in front may send.
    body: bytes | None = None

    def matches(self, method: str, path: str, query: str = "") -> bool:
        return self.times > 0 and self.method in ("*", method) and bool(
            self.path.search(path)) and (self.query is None or bool(self.query.search(query)))


@dataclass
class Raw:
    """An answer's body as it is, not JSON (``Fault.body``)."""

    data: bytes


@dataclass
class Route:
    served: Served | None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    discovery: str | None = None  # a group/version


class ApiServerDouble:
    """The API server: objects, routing, faults and the request log; ``start`` serves HTTP."""

    def __init__(self, *, podgroups: bool = False, log_size: int = 5000) -> None:
        self.lock = threading.RLock()
        self.requests: deque[Request] = deque(maxlen=log_size)
        self.faults: list[Fault] = []
        self.resource_version = 0
        # What RBAC denies the caller, as (verb, resource, subresource): the answer of a
        # SelfSubjectAccessReview, which allows everything else.
        self.denied: set[tuple[str, str, str]] = set()
        self._served = {(s.group_version, s.plural): s for s in (*BUILT_IN, ACCESS_REVIEWS,
                                                                  RULES_REVIEWS)}
        self._store: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self.serve(POD_GROUPS, podgroups)
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
             query: str | None = None, landed: bool = False,
             retry_after: int | None = None, message: str = "",
             body: bytes | None = None) -> Fault:
        """Inject a fault on the next ``times`` matching requests (see ``Fault``)."""
        if status is None and not delay and not drop and body is None:
            status = 500
        fault = Fault(method.upper(), re.compile(path), times, status, reason, delay, drop,
                      re.compile(query) if query is not None else None, landed, retry_after,
                      message, body)
        with self.lock:
            self.faults.append(fault)
        return fault

    def deny(self, verb: str, resource: str, subresource: str = "") -> None:
        """RBAC does not grant ``verb`` on ``resource``: SelfSubjectAccessReviews say so
        (the 403 itself is a ``fail``)."""
        with self.lock:
            self.denied.add((verb, resource, subresource))

    def calls(self, verb: str | None = None, path: str | None = None) -> list[Request]:
        """Logged requests with that verb and a path matching the regex ``path``."""
        with self.lock:
            return [r for r in self.requests if (verb is None or r.verb == verb)
                    and (path is None or re.search(path, r.path))]

    def clear_log(self) -> None:
        with self.lock:
            self.requests.clear()

    def add(self, obj: dict, keep_version: bool = False) -> dict:
        """Store an object, status included, without HTTP (fixtures: a fleet to observe).

        ``keep_version`` keeps the object's own resourceVersion (a copy of another
        cluster whose versions come from one counter, as the simulator's do), and moves
        the double's counter past it, so that later writes still get newer ones."""
        served = self._served_kind(obj["kind"])
        namespace = obj["metadata"].get("namespace") if served.namespaced else None
        version = obj["metadata"].get("resourceVersion") if keep_version else None
        with self.lock:
            stored = self._create(served, namespace, copy.deepcopy(obj), keep_status=True)
            if version is not None and str(version).isdigit():
                kept = self._objects(served)[(namespace or "", obj["metadata"]["name"])]
                kept["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"] = \
                    str(version)
                self.resource_version = max(self.resource_version, int(version))
            return stored

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """A stored object by kind (a copy), or None."""
        served = self._served_kind(kind)
        with self.lock:
            return copy.deepcopy(self._objects(served).get((namespace or "", name)))

    def objects(self, kind: str) -> list[dict]:
        served = self._served_kind(kind)
        with self.lock:
            return [copy.deepcopy(o) for _, o in sorted(self._objects(served).items())]

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
        if fault is not None:
            if fault.drop and not fault.landed:
                return DROP
            if fault.body is not None:
                return fault.status or 200, Raw(fault.body)
            if fault.status is not None:
                headers = {} if fault.retry_after is None else {
                    "Retry-After": str(fault.retry_after)}
                # A 403 is worded as RBAC words it (an admission plugin's is not).
                message = fault.message or (
                    f'User "system:serviceaccount:omegitops:omegitops" cannot '
                    f'{method.lower()} resource (injected fault)'
                    if fault.status == 403 else "injected fault")
                return fault.status, ApiError(fault.status, fault.reason or _reason(fault.status),
                                              message).status(), headers
            time.sleep(fault.delay)  # then answer normally: the write still happens
        try:
            with self.lock:
                answer = self._dispatch(method, route, query, content_type,
                                        json.loads(body) if body else None)
        except ApiError as err:
            answer = err.code, err.status()
        return DROP if fault is not None and fault.landed else answer

    def _dispatch(self, method: str, route: Route, query: dict, content_type: str,
                  body: Any) -> tuple[int, dict]:
        if route.discovery is not None:
            return 200, self._discovery(route.discovery)
        served, namespace, name, sub = route.served, route.namespace, route.name, route.subresource
        if served is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if served is RULES_REVIEWS:
            rules = [] if self.denied else [
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
            return 201, {**body, "status": {"resourceRules": rules,
                                            "incomplete": bool(self.denied)}}
        if served is ACCESS_REVIEWS:
            asked = (body.get("spec") or {}).get("resourceAttributes") or {}
            key = (asked.get("verb", ""), asked.get("resource", ""), asked.get("subresource", ""))
            return 201, {**body, "status": {"allowed": key not in self.denied}}
        if method == "GET" and name is None:
            return 200, self._list(served, namespace, query)
        if method == "GET":
            return 200, copy.deepcopy(self._stored(served, namespace, name))
        if method == "POST" and name is None:
            return 201, self._create(served, namespace, body)
        if method == "PUT" and name is not None:
            return 200, self._update(served, namespace, name, body, sub)
        if method == "PATCH" and name is not None:
            return 200, self._patch(served, namespace, name, sub, content_type, body)
        if method == "DELETE" and name is not None and sub is None:
            stored = self._stored(served, namespace, name)
            del self._objects(served)[(namespace or "", name)]
            self.resource_version += 1
            return 200, copy.deepcopy(stored)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    # -- routing ----------------------------------------------------------------------

    def _route(self, path: str) -> Route:
        segments = [unquote(s) for s in path.strip("/").split("/") if s]
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
        if served is None or (served.namespaced and name is not None and namespace is None) or (
                sub is not None and (sub != "status" or not served.status)):
            return Route(None)
        return Route(served, namespace, name, sub)

    def _discovery(self, group_version: str) -> dict:
        found = [s for s in self._served.values() if s.group_version == group_version]
        if not found:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": [{"name": s.plural, "namespaced": s.namespaced, "kind": s.kind}
                              for s in sorted(found, key=lambda s: s.plural)]}

    # -- the verbs ----------------------------------------------------------------------

    def _list(self, served: Served, namespace: str | None, query: dict) -> dict:
        wanted = _label_selector(query.get("labelSelector"))
        fields = _label_selector(query.get("fieldSelector"))
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        after = tuple(json.loads(base64.urlsafe_b64decode(token))) if token else None
        items, keys = [], []
        for key, obj in sorted(self._objects(served).items()):
            if (namespace is not None and key[0] != namespace) or (
                    after is not None and key <= after):
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()) and fields_match(obj, fields):
                if limit and len(items) > limit:
                    break  # one past the page says there is more: copy no further
                items.append(copy.deepcopy(obj))
                keys.append(key)
        metadata: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if limit and len(items) > limit:
            metadata["continue"] = base64.urlsafe_b64encode(
                json.dumps(keys[limit - 1]).encode()).decode()
            items = items[:limit]
        return {"kind": f"{served.kind}List", "apiVersion": served.group_version,
                "metadata": metadata, "items": items}

    def _create(self, served: Served, namespace: str | None, obj: dict,
                keep_status: bool = False) -> dict:
        meta = obj.setdefault("metadata", {})
        if served.namespaced:
            namespace = meta["namespace"] = namespace or meta.get("namespace")
        key = (namespace or "", meta["name"])
        objects = self._objects(served)
        if key in objects:
            raise ApiError(409, "AlreadyExists",
                           f'{served.qualified()} "{meta["name"]}" already exists')
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=format_time(int(time.time())))
        obj["apiVersion"], obj["kind"] = served.group_version, served.kind
        if served.kind == "Pod":
            obj["status"] = obj.get("status") if keep_status else {"phase": "Pending"}
        elif served.status and not keep_status:
            obj.pop("status", None)  # the status subresource: a create cannot set it
        self._bump(obj)
        objects[key] = obj
        return copy.deepcopy(obj)

    def _update(self, served: Served, namespace: str | None, name: str, body: dict,
                sub: str | None) -> dict:
        stored = self._stored(served, namespace, name)
        version = body.get("metadata", {}).get("resourceVersion")
        if version and version != stored["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                           f'{served.qualified()} "{name}": the object has been modified; '
                           f'please apply your changes to the latest version and try again')
        return self._write(served, stored, body, sub)

    def _patch(self, served: Served, namespace: str | None, name: str, sub: str | None,
               content_type: str, patch: Any) -> dict:
        stored = self._stored(served, namespace, name)
        kind = content_type.split(";")[0].strip()
        if kind == "application/merge-patch+json":
            patched = _merge_patch(stored, patch)
        elif kind == "application/strategic-merge-patch+json":
            patched = _strategic_merge_patch(stored, patch)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"not a patch the double takes: {kind}")
        return self._write(served, stored, patched, sub)

    def _write(self, served: Served, stored: dict, body: dict, sub: str | None) -> dict:
        """Store ``body`` over ``stored``: only status through /status, never status otherwise."""
        if sub == "status":
            new = copy.deepcopy(stored)
            new["status"] = copy.deepcopy(body.get("status"))
            if new["status"] is None:
                del new["status"]
        else:
            new = copy.deepcopy(body)
            meta = new.setdefault("metadata", {})
            for key in SERVER_METADATA:
                meta.pop(key, None)
                if key in stored["metadata"]:
                    meta[key] = stored["metadata"][key]
            if served.status:
                new.pop("status", None)
                if "status" in stored:
                    new["status"] = copy.deepcopy(stored["status"])
        new["apiVersion"], new["kind"] = served.group_version, served.kind
        new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if new == stored:
            return copy.deepcopy(stored)  # nothing changed: no new resourceVersion
        self._bump(new)
        meta = new["metadata"]
        self._objects(served)[(meta.get("namespace", ""), meta["name"])] = new
        return copy.deepcopy(new)

    # -- helpers ----------------------------------------------------------------------

    def _objects(self, served: Served) -> dict[tuple[str, str], dict]:
        return self._store.setdefault((served.group_version, served.plural), {})

    def _stored(self, served: Served, namespace: str | None, name: str) -> dict:
        obj = self._objects(served).get((namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{served.qualified()} "{name}" not found')
        return obj

    def _served_kind(self, kind: str) -> Served:
        for served in (*self._served.values(), POD_GROUPS, INFERENCE_SERVICES):
            if served.kind == kind:
                return served
        raise KeyError(kind)

    def _bump(self, obj: dict) -> None:
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)


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


def _label_selector(text: str | None) -> dict[str, str]:
    """``a=b,c=d`` (the only form the backend sends) as a dict."""
    return dict(part.split("=", 1) for part in (text or "").split(",") if part)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, lists are replaced."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """As a merge patch, but the lists of ``MERGE_KEYS`` merge item by item on their key."""
    key = MERGE_KEYS.get(field)
    if isinstance(patch, list) and key is not None and isinstance(target, list):
        result = [copy.deepcopy(item) for item in target]
        for item in patch:
            index = next((i for i, old in enumerate(result) if old.get(key) == item[key]), None)
            if index is None:
                result.append(copy.deepcopy(item))
            else:
                result[index] = _strategic_merge_patch(result[index], item)
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = _strategic_merge_patch(result.get(name), value, name)
    return result


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
        status, payload, *more = answer
        raw = isinstance(payload, Raw)
        data = payload.data if raw else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (more[0] if more else {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/html" if raw else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        pass
