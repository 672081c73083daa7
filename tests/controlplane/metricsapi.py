"""An external metrics API for the control plane's HPA controller to read.

A small aggregated API server (the standard library's ``http.server`` and ``ssl``, in
a thread) serving ``external.metrics.k8s.io/v1beta1`` as a metrics adapter (KEDA's,
prometheus-adapter's) does: discovery, and ``GET .../namespaces/NS/METRIC`` answering
an ExternalMetricValueList with the value a test sets. It is installed as a real
adapter is, but for its Service: an ExternalName Service in ``kube-system`` naming
``localhost`` (no kube-proxy runs, and an EndpointSlice may not hold a loopback
address: controlplane.py, ``_aggregation_flags``), an APIService ``v1beta1.external.metrics.k8s.io`` with the CA of its serving certificate,
and RBAC letting the HPA controller's ServiceAccount read external metrics.

Only the API server, presenting the front-proxy client certificate, may connect: the
requester it names in ``X-Remote-User`` is kept with every request (``requests``).

Usage::

    with ExternalMetrics(cp) as metrics:
        metrics.set("ns", "queue_depth", 30)
"""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlsplit

from controlplane import FRONT_PROXY_CLIENT, ControlPlane

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"/apis/{GROUP_VERSION}"
APISERVICE = f"{VERSION}.{GROUP}"
NAMESPACE = "kube-system"
SERVICE = "omegitops-test-external-metrics"
# The ServiceAccount kube-controller-manager's HPA controller runs as (with
# --use-service-account-credentials; as the admin otherwise).
HPA_CONTROLLER = "horizontal-pod-autoscaler"
# The RBAC a metrics adapter installs for it (prometheus-adapter's names).
READER = "external-metrics-reader"
READER_BINDING = "hpa-controller-external-metrics"


@dataclass(frozen=True)
class Request:
    """A request the API server passed on: who asked (X-Remote-User), and the path."""

    user: str
    path: str


class ExternalMetrics:
    """The server and its registration; ``set`` a metric's value per namespace."""

    def __init__(self, cp: ControlPlane):
        self.cp = cp
        self._values: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the values --------------------------------------------------------------------

    def set(self, namespace: str, metric: str, value: float) -> None:
        """What ``GET .../namespaces/<namespace>/<metric>`` answers from now on. Metric
        names are lower case: the HPA controller asks for them so."""
        with self._lock:
            self._values[(namespace, metric.lower())] = value

    def value(self, namespace: str, metric: str) -> float | None:
        with self._lock:
            return self._values.get((namespace, metric.lower()))

    def reads(self, metric: str) -> list[Request]:
        """The requests for ``metric``'s value so far."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(f"/{metric.lower()}")]

    def metrics(self) -> list[str]:
        with self._lock:
            return sorted({metric for _, metric in self._values})

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    # -- lifetime ----------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()  # a registration half made is taken back
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        cert, key = self.cp.serving_certificate(
            "external-metrics", [f"{SERVICE}.{NAMESPACE}.svc",
                                 f"{SERVICE}.{NAMESPACE}.svc.cluster.local"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        # The front proxy's client certificate, and nothing else, is let in.
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(self.cp.pki / "front-proxy-ca.crt")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="external-metrics")
        self._thread.start()
        self._register(self._server.server_address[1])

    def stop(self) -> None:
        """The registration first (a namespace being deleted waits on the discovery of
        every registered group), then the server; the cluster is left as found."""
        rbac = "rbac.authorization.k8s.io/v1"
        for api_version, kind, namespace, name in (
                ("apiregistration.k8s.io/v1", "APIService", None, APISERVICE),
                ("v1", "Service", NAMESPACE, SERVICE),
                (rbac, "ClusterRoleBinding", None, READER_BINDING),
                (rbac, "ClusterRole", None, READER)):
            self.cp.delete(api_version, kind, namespace, name)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _register(self, port: int) -> None:
        """As a metrics adapter's manifests install it; until the APIService is
        Available (the API server reached the server through the front proxy)."""
        cp = self.cp
        # No kube-proxy: the API server dials the ExternalName and the APIService's port
        # (controlplane.py, ``_aggregation_flags``).
        cp.apply({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": SERVICE, "namespace": NAMESPACE},
                  "spec": {"type": "ExternalName", "externalName": "localhost",
                           "ports": [{"name": "https", "port": port}]}})
        cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                  "metadata": {"name": READER},
                  "rules": [{"apiGroups": [GROUP], "resources": ["*"],
                             "verbs": ["get", "list", "watch"]}]})
        cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                  "metadata": {"name": READER_BINDING},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": READER},
                  "subjects": [{"kind": "ServiceAccount", "name": HPA_CONTROLLER,
                                "namespace": NAMESPACE}]})
        cp.apply({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                  "metadata": {"name": APISERVICE},
                  "spec": {"group": GROUP, "version": VERSION,
                           "groupPriorityMinimum": 100, "versionPriority": 100,
                           "service": {"name": SERVICE, "namespace": NAMESPACE,
                                       "port": port},
                           "caBundle": cp.ca_bundle}})
        cp.wait_for(self._available, 60, f"APIService {APISERVICE} Available")

    def _available(self) -> bool:
        service = self.cp.get("apiregistration.k8s.io/v1", "APIService", None, APISERVICE)
        return any(c["type"] == "Available" and c["status"] == "True"
                   for c in ((service or {}).get("status") or {}).get("conditions") or [])

    # -- answers -----------------------------------------------------------------------

    def answer(self, path: str) -> tuple[int, dict]:
        """The status and body of a GET of ``path``."""
        parts = [p for p in path.split("/") if p]
        if path in ("/apis", "/apis/"):
            return 200, {"kind": "APIGroupList", "apiVersion": "v1",
                         "groups": [_group()]}
        if parts == ["apis", GROUP]:
            return 200, {"kind": "APIGroup", "apiVersion": "v1", **_group()}
        if path.rstrip("/") == PREFIX:
            return 200, self._resources()
        if len(parts) == 6 and parts[:3] == ["apis", GROUP, VERSION] \
                and parts[3] == "namespaces":
            return self._metric(parts[4], parts[5])
        return 404, _status(404, "NotFound", f"{path} is not served here")

    def _resources(self) -> dict:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                "resources": [{"name": metric, "singularName": "", "namespaced": True,
                               "kind": "ExternalMetricValueList", "verbs": ["get"]}
                              for metric in self.metrics()]}

    def _metric(self, namespace: str, metric: str) -> tuple[int, dict]:
        value = self.value(namespace, metric)
        if value is None:
            return 404, _status(404, "NotFound", f"no metric {metric} in {namespace}")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return 200, {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION,
                     "metadata": {},
                     "items": [{"metricName": metric, "metricLabels": {},
                                "timestamp": now, "value": _quantity(value)}]}


def _group() -> dict:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": reason, "message": message, "code": code}


def _quantity(value: float) -> str:
    """A Kubernetes quantity, in thousandths (the precision the HPA works in)."""
    return f"{round(value * 1000)}m"


def _handler(metrics: ExternalMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            peer = self.connection.getpeercert() or {}
            subject = dict(item for rdn in peer.get("subject", ()) for item in rdn)
            if subject.get("commonName") != FRONT_PROXY_CLIENT:
                code, body = 403, _status(403, "Forbidden", "not the front proxy")
            else:
                metrics._record(Request(self.headers.get("X-Remote-User", ""), path))
                code, body = metrics.answer(path)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the requests are kept in ``metrics.requests``

    return Handler
