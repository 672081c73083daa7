"""A real Kubernetes control plane on loopback, for the tests of the ``kube`` backend.

etcd, kube-apiserver (RBAC on, service-account tokens signed by a key of its
own), kube-scheduler, kube-controller-manager and KWOK (nodes and pod status,
without containers: ``kwok-stages.yaml``), all built from the Kubernetes
project's own Go modules by ``build.sh``. Everything lives in one temporary
folder; nothing listens beyond 127.0.0.1.

Usage::

    with ControlPlane(bin_dir, workdir) as cp:
        cp.add_nodes(4, gpus=8)
        cp.apply_file(Path("pipelines/common/rbac.yaml"))
        kubeconfig = cp.service_account_kubeconfig("omegitops", "omegitops")

``admin`` is an ``ApiClient`` in the ``system:masters`` group, for setting up
and for playing the parts of other actors (a node, a person with kubectl).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError, ResourceNotFoundError

HERE = Path(__file__).resolve().parent
STAGES = HERE / "kwok-stages.yaml"
# KWOK runs the nodes with this label: a node that loses it stops reporting.
KWOK_NODE_LABEL = "omegitops.test/kwok"
FAULT_ANNOTATION = "faults.omegitops.io/kind"

# How fast a lost node is noticed and its pods evicted. The defaults (50 s, then
# 300 s of toleration) would make a node-loss test take six minutes; these keep
# the same sequence, shorter.
NODE_LEASE_SECONDS = 10
# Service-account tokens live an hour, as a pod's projected token does, and are
# renewed every twenty minutes (the kubelet renews at 80% of a token's life).
TOKEN_SECONDS = 3600
TOKEN_ROTATION_SECONDS = 1200
NODE_MONITOR_GRACE = "20s"
EVICTION_TOLERATION_SECONDS = 30
SERVICE_CIDR = "10.96.0.0/16"
# The ``kubernetes`` Service's address: the first of the range.
SERVICE_IP = "10.96.0.1"
# The HPA controller reads metrics and writes /scale every 2 s (15 s by default), and
# acts on a lower recommendation after 5 s (5 min by default): an autoscaling test
# sees the HPA move in seconds. An HPA's own behavior can still ask for longer.
HPA_SYNC_PERIOD = "2s"
HPA_DOWNSCALE_STABILIZATION = "5s"
# The name the API server's front-proxy client certificate carries: an aggregated API
# server (metricsapi.py) trusts the X-Remote-* headers of this client only.
FRONT_PROXY_CLIENT = "front-proxy-client"


class ControlPlaneError(RuntimeError):
    """A component did not start, or stopped; the message ends with its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def check(self) -> None:
        if self.popen.poll() is not None:
            raise ControlPlaneError(f"{self.name} exited with {self.popen.returncode}:\n"
                                    f"{self.tail()}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def start_process(folder: Path, name: str, argv: list[str],
                  env: dict[str, str] | None = None) -> Process:
    """``argv`` in a session of its own, its output in ``folder/<name>.log``."""
    log = folder / f"{name}.log"
    handle = log.open("wb")
    popen = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=folder,
                             env=None if env is None else {**os.environ, **env},
                             start_new_session=True)
    handle.close()
    return Process(name, popen, log)


def wait_ready(process: Process, ready, seconds: float, interval: float = 0.2) -> None:
    """Until ``ready()``; fails with the process's log when it stops or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        process.check()
        if ready():
            return
        time.sleep(interval)
    raise ControlPlaneError(f"{process.name} not ready after {seconds} s:\n"
                            f"{process.tail(60)}")


class Supervisor:
    """Processes started by ``start`` and ended by ``stop``, as a context: a start that
    fails half-way stops what it had started."""

    processes: dict[str, Process]

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> None:
        """Raise if any of the processes has stopped."""
        for process in self.processes.values():
            process.check()


@dataclass
class ControlPlane(Supervisor):
    bin_dir: Path
    workdir: Path
    processes: dict[str, Process] = field(default_factory=dict)
    # Set by the session fixture: whether OME's CRDs are installed, and the job's
    # ServiceAccount kubeconfig.
    ome_crds: bool = False
    job_kubeconfig: Path | None = None
    # How often KWOK's nodes renew their Leases (a quarter of this) and how long the
    # node controller waits for a renewal: short in the tests, so that a lost node is
    # noticed fast; a benchmark with many nodes takes Kubernetes' defaults (40 s, 50 s).
    node_lease_seconds: int = NODE_LEASE_SECONDS
    node_monitor_grace: str = NODE_MONITOR_GRACE
    # The address pods reach the API server at (a real node's bridge, realnode.py):
    # the API server then answers there too, and advertises it as the ``kubernetes``
    # Service's endpoint. None: loopback only, for KWOK's nodes alone.
    pod_network_gateway: str | None = None
    # kube-controller-manager's controllers each as their own ServiceAccount (kube-system's
    # deployment-controller, replicaset-controller...), so that the audit log, which keeps
    # service accounts' requests, holds theirs: a benchmark sets it to count them.
    controller_credentials: bool = False

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = self.workdir / "pki"
        self.api_port = free_port()
        self.url = f"https://127.0.0.1:{self.api_port}"
        self.admin_token = secrets.token_hex(16)
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self._admin: k8s.ApiClient | None = None
        self._dynamic: DynamicClient | None = None
        # The service accounts' token files kept fresh (service_account_kubeconfig).
        self._rotated: dict[Path, tuple[str, str]] = {}
        self._rotation: threading.Thread | None = None
        self._rotation_lock = threading.Lock()
        self._stopping = threading.Event()

    # -- lifetime -----------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        self._make_pki()
        self._start_etcd()
        self._start_apiserver()
        self._write_kubeconfig(self.admin_kubeconfig, token=self.admin_token, user="admin")
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self._start(name, self._flags(name))
        self._wait_for_default_service_account()
        self.started_in = time.monotonic() - started

    def stop(self) -> None:
        self._stopping.set()
        if self._rotation is not None:
            self._rotation.join(timeout=30)
            self._rotation = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        # The API server's clients first, then the API server, etcd last.
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                     "etcd"):
            process = self.processes.pop(name, None)
            if process is not None:
                process.stop()

    def restart_apiserver(self, down_seconds: float) -> float:
        """Kill kube-apiserver (SIGKILL, as a node failure or an OOM kill does), leave it
        down ``down_seconds``, start it again on the same port, certificates and etcd, and
        wait until it is ready; the seconds it was away. Its clients (the controllers,
        KWOK, a job) find it again by themselves."""
        started = time.monotonic()
        process = self.processes.pop("kube-apiserver")
        process.popen.kill()
        process.popen.wait(10)
        time.sleep(down_seconds)
        self._start_apiserver()
        if self._admin is not None:
            self._admin.close()
            self._admin, self._dynamic = None, None
        return time.monotonic() - started

    # -- components -------------------------------------------------------------------

    def _start(self, name: str, args: list[str]) -> Process:
        process = start_process(self.workdir, name, [str(self.bin_dir / name), *args])
        self.processes[name] = process
        return process

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        process = self._start("etcd", [
            "--name=default", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level=warn",
        ])
        self._wait(process, lambda: _http_ok(f"{self.etcd_url}/health"), 30)

    def _start_apiserver(self) -> None:
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.admin_token},admin,admin,"system:masters"\n')
        # The requests of service accounts (the job's) at Metadata level, once complete:
        # who asked for what, and the answer; the tests read the job's own requests from
        # it. Nothing of the components' own traffic (KWOK's status patches and node
        # leases, all as admin): logged in blocking mode, it loaded the API server.
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\n"
                          "omitStages: [RequestReceived, ResponseStarted]\n"
                          "rules:\n"
                          "  - level: Metadata\n    userGroups: [system:serviceaccounts]\n"
                          "  - level: None\n")
        self.audit_log = self.workdir / "audit.log"
        process = self._start("kube-apiserver", [
            f"--etcd-servers={self.etcd_url}",
            *self._addresses(),
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={self.pki / 'apiserver.crt'}",
            f"--tls-private-key-file={self.pki / 'apiserver.key'}",
            f"--client-ca-file={self.pki / 'ca.crt'}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
            "--audit-log-mode=blocking",
            # Never rotated (a size in MB no run reaches): the tests and benchmarks read
            # it from a byte offset, and the default rotates it at 100 MB, which a fleet's
            # bring-up passes, leaving the offset past the end of a new, short file.
            "--audit-log-maxsize=1000000",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--default-not-ready-toleration-seconds={EVICTION_TOLERATION_SECONDS}",
            f"--default-unreachable-toleration-seconds={EVICTION_TOLERATION_SECONDS}",
            # One API server on two cores: no fairness queues to wait in.
            "--enable-priority-and-fairness=false",
            *self._aggregation_flags(),
        ])
        self._wait(process, self._readyz, 90)

    def _aggregation_flags(self) -> list[str]:
        """The aggregation layer, as kubeadm sets it up: the API server proxies the groups
        an APIService registers (metrics.k8s.io, external.metrics.k8s.io...) to the server
        behind it, presenting the front-proxy client certificate and the requester in
        X-Remote-User / X-Remote-Group / X-Remote-Extra-*. No kube-proxy runs here, so a
        Service's cluster IP leads nowhere, and ``--enable-aggregator-routing`` (dial the
        Service's endpoint) cannot reach loopback either: an EndpointSlice, like an
        Endpoints object, refuses 127.0.0.0/8. Left off, the API server dials an
        ExternalName Service at its name and the APIService's port: ``localhost``, where
        the test's server listens (metricsapi.py). The TLS check is the same either way,
        the serving certificate for ``<service>.<namespace>.svc``."""
        return [f"--requestheader-client-ca-file={self.pki / 'front-proxy-ca.crt'}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-username-headers=X-Remote-User",
                f"--proxy-client-cert-file={self.pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={self.pki / 'front-proxy-client.key'}",
                "--enable-aggregator-routing=false"]

    def _addresses(self) -> list[str]:
        if not self.pod_network_gateway:
            return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
        # One listening address only, or all: all, so that the tests keep loopback and
        # pods reach the gateway (nothing outside this machine routes to either). Logs
        # are fetched from a node at its InternalIP (its name resolves nowhere).
        return ["--bind-address=0.0.0.0", f"--advertise-address={self.pod_network_gateway}",
                "--kubelet-preferred-address-types=InternalIP,Hostname"]

    def _flags(self, name: str) -> list[str]:
        kubeconfig = f"--kubeconfig={self.admin_kubeconfig}"
        if name == "kube-controller-manager":
            return [kubeconfig, "--leader-elect=false", "--secure-port=0",
                    f"--service-account-private-key-file={self.pki / 'sa.key'}",
                    f"--root-ca-file={self.pki / 'ca.crt'}",
                    (f"--use-service-account-credentials="
                    f"{'true' if self.controller_credentials else 'false'}"),
                    f"--node-monitor-grace-period={self.node_monitor_grace}",
                    "--node-monitor-period=2s",
                    # Every default controller, the HPA's among them (named so that a
                    # change of the defaults cannot drop it unseen).
                    "--controllers=*,horizontal-pod-autoscaler-controller",
                    f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
                    ("--horizontal-pod-autoscaler-downscale-stabilization="
                     f"{HPA_DOWNSCALE_STABILIZATION}")]
        if name == "kube-scheduler":
            return [f"--config={self._scheduler_config()}", "--secure-port=0"]
        if name == "kwok":
            return [kubeconfig, f"--config={STAGES}", "--manage-all-nodes=false",
                    f"--manage-nodes-with-label-selector={KWOK_NODE_LABEL}=managed",
                    f"--node-lease-duration-seconds={self.node_lease_seconds}",
                    "--cidr=10.244.0.0/16", "--node-ip=10.0.0.1"]
        raise KeyError(name)

    def _scheduler_config(self) -> Path:
        """The scheduler packs GPUs (NodeResourcesFit, MostAllocated), as GPU clusters are
        set up: spread over every node, one-GPU pods would leave none of the eight-GPU
        nodes a gang's pod needs whole (the examples' deepseek gangs), depending only on
        which pods a run happens to create first."""
        path = self.workdir / "scheduler.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.admin_kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{
                "name": "NodeResourcesFit",
                "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [
                    {"name": "nvidia.com/gpu", "weight": 5}, {"name": "cpu", "weight": 1},
                    {"name": "memory", "weight": 1}]}}}]}],
        }))
        return path

    def _wait(self, process: Process, ready, seconds: float) -> None:
        wait_ready(process, ready, seconds)

    def _readyz(self) -> bool:
        return _http_ok(f"{self.url}/readyz", token=self.admin_token,
                        ca=self.pki / "ca.crt")

    def _wait_for_default_service_account(self) -> None:
        """The controller-manager is up once it has made the ``default`` account."""
        core = k8s.CoreV1Api(self.admin)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.check()
            try:
                core.read_namespaced_service_account("default", "default")
                return
            except k8s.ApiException as err:
                if err.status != 404:
                    raise
            time.sleep(0.3)
        raise ControlPlaneError("kube-controller-manager made no default ServiceAccount:\n"
                                + self.processes["kube-controller-manager"].tail())

    # -- credentials ----------------------------------------------------------------------

    def _make_pki(self) -> None:
        """A CA, the API server's serving certificate, the service-account key pair, and
        the front proxy's CA and client certificate (the aggregation layer's)."""
        self.pki.mkdir(exist_ok=True)
        ssl_cmd = shutil.which("openssl") or "openssl"

        def run(*args: str) -> None:
            subprocess.run([ssl_cmd, *args], cwd=self.pki, check=True, capture_output=True)

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=omegitops-test-ca", "-keyout", "ca.key", "-out", "ca.crt")
        names = ["IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
                 "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
                 f"IP:{SERVICE_IP}"]
        if self.pod_network_gateway:
            names.append(f"IP:{self.pod_network_gateway}")
        (self.pki / "san.cnf").write_text(
            f"subjectAltName={','.join(names)}\nextendedKeyUsage=serverAuth\n")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
            "-keyout", "apiserver.key", "-out", "apiserver.csr")
        run("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "apiserver.crt")
        run("genrsa", "-out", "sa.key", "2048")
        run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        # A CA of its own, as kubeadm makes: a client certificate of the cluster CA
        # must not pass for the front proxy.
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=omegitops-test-front-proxy-ca", "-keyout", "front-proxy-ca.key",
            "-out", "front-proxy-ca.crt")
        (self.pki / "client.cnf").write_text("extendedKeyUsage=clientAuth\n")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={FRONT_PROXY_CLIENT}",
            "-keyout", "front-proxy-client.key", "-out", "front-proxy-client.csr")
        run("x509", "-req", "-in", "front-proxy-client.csr", "-CA", "front-proxy-ca.crt",
            "-CAkey", "front-proxy-ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "client.cnf", "-out", "front-proxy-client.crt")

    def serving_certificate(self, name: str, dns_names: list[str]) -> tuple[Path, Path]:
        """A serving certificate of the cluster CA for ``dns_names`` (an aggregated API
        server's: the API server checks it for ``<service>.<namespace>.svc``); its
        certificate and key files. The CA (``ca_bundle``) goes in the APIService."""
        names = ",".join(f"DNS:{dns}" for dns in dns_names)
        (self.pki / f"{name}.cnf").write_text(
            f"subjectAltName={names},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        for args in (["req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                      "-keyout", f"{name}.key", "-out", f"{name}.csr"],
                     ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey",
                      "ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{name}.cnf",
                      "-out", f"{name}.crt"]):
            subprocess.run([shutil.which("openssl") or "openssl", *args], cwd=self.pki,
                           check=True, capture_output=True)
        return self.pki / f"{name}.crt", self.pki / f"{name}.key"

    @property
    def kubectl(self) -> Path:
        """The kubectl of the same Kubernetes release, built beside the control plane
        (``build.sh``): what a person runs, plugins (``kubectl ome``) included."""
        return self.bin_dir / "kubectl"

    @property
    def ca_bundle(self) -> str:
        """The cluster CA, base64, as an APIService's or a webhook's caBundle."""
        return base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()

    def _write_kubeconfig(self, path: Path, *, user: str, token: str | None = None,
                          token_file: Path | None = None, namespace: str = "default") -> Path:
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        credentials = {"tokenFile": str(token_file)} if token_file else {"token": token}
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                      "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user,
                                                      "namespace": namespace}}],
        }))
        path.chmod(0o600)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig whose ``tokenFile`` holds a token of that ServiceAccount, from the
        TokenRequest API, kept fresh as the kubelet keeps a pod's projected token: a new
        token of an hour every twenty minutes, for as long as the control plane runs (a
        slow suite outlives any one token)."""
        token_file = self.workdir / f"{namespace}-{name}.token"
        self.write_service_account_token(token_file, namespace, name)
        with self._rotation_lock:
            self._rotated[token_file] = (namespace, name)
            if self._rotation is None:
                self._rotation = threading.Thread(target=self._rotate_tokens, daemon=True,
                                                  name="token-rotation")
                self._rotation.start()
        path = self.workdir / f"{namespace}-{name}.kubeconfig"
        return self._write_kubeconfig(path, token_file=token_file,
                                      user=f"system:serviceaccount:{namespace}:{name}",
                                      namespace=namespace)

    def write_service_account_token(self, token_file: Path, namespace: str, name: str, *,
                                    seconds: int = TOKEN_SECONDS,
                                    bound_secret: str | None = None) -> str:
        """Request a token of that ServiceAccount and put it in ``token_file`` whole (a
        reader never sees half a token); bound to a Secret when ``bound_secret`` names
        one, so that deleting the Secret revokes it. The token."""
        bound = k8s.V1BoundObjectReference(api_version="v1", kind="Secret",
                                           name=bound_secret) if bound_secret else None
        request = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(
            audiences=[], expiration_seconds=seconds, bound_object_ref=bound))
        if bound is not None:
            secret = k8s.CoreV1Api(self.admin).read_namespaced_secret(bound_secret, namespace)
            bound.uid = secret.metadata.uid
        answer = k8s.CoreV1Api(self.admin).create_namespaced_service_account_token(
            name, namespace, request)
        partial = token_file.with_name(token_file.name + ".new")
        partial.write_text(answer.status.token)
        partial.chmod(0o600)
        partial.replace(token_file)
        return answer.status.token

    def _rotate_tokens(self) -> None:
        while not self._stopping.wait(TOKEN_ROTATION_SECONDS):
            with self._rotation_lock:
                rotated = dict(self._rotated)
            for token_file, (namespace, name) in rotated.items():
                try:
                    self.write_service_account_token(token_file, namespace, name)
                except Exception as err:  # noqa: BLE001 - the old token still has 40 min
                    print(f"control plane: rotating {token_file.name}: {err}", flush=True)

    @property
    def admin(self) -> k8s.ApiClient:
        if self._admin is None:
            configuration = k8s.Configuration()
            k8s_config.load_kube_config(str(self.admin_kubeconfig),
                                        client_configuration=configuration)
            self._admin = k8s.ApiClient(configuration)
        return self._admin

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.admin)
        return self._dynamic

    # -- objects --------------------------------------------------------------------------

    def add_nodes(self, count: int, *, gpus: int = 8, cpu: str = "64",
                  memory: str = "512Gi", prefix: str = "kwok-node") -> list[str]:
        """Nodes that KWOK runs, each with ``gpus`` nvidia.com/gpu."""
        names = [f"{prefix}-{index}" for index in range(count)]
        for name in names:
            self.add_node(name, gpus=gpus, cpu=cpu, memory=memory, wait=False)
        self.wait_for(lambda: all(self.node_ready(name) for name in names), 60,
                      f"nodes {names} Ready")
        return names

    def add_node(self, name: str, *, gpus: int = 8, cpu: str = "64", memory: str = "512Gi",
                 wait: bool = True) -> None:
        capacity = {"cpu": cpu, "memory": memory, "pods": "110",
                    "nvidia.com/gpu": str(gpus), "ephemeral-storage": "1Ti"}
        k8s.CoreV1Api(self.admin).create_node({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "labels": {"kubernetes.io/hostname": name, KWOK_NODE_LABEL: "managed",
                                    "kubernetes.io/os": "linux", "type": "kwok"}},
            "status": {"capacity": capacity, "allocatable": capacity},
        })
        if wait:
            self.wait_for(lambda: self.node_ready(name), 60, f"node {name} Ready")

    def node_ready(self, name: str) -> bool:
        node = k8s.CoreV1Api(self.admin).read_node(name)
        return any(c.type == "Ready" and c.status == "True"
                   for c in node.status.conditions or [])

    def stop_node(self, name: str) -> None:
        """The node stops reporting, as when its machine dies: KWOK is restarted without
        it (it keeps renewing the Lease of a node it once took), so its Lease and its
        pods' status are no longer updated, and the node lifecycle controller takes over."""
        k8s.CoreV1Api(self.admin).patch_node(
            name, {"metadata": {"labels": {KWOK_NODE_LABEL: "lost"}}})
        self.processes.pop("kwok").stop()
        self._start("kwok", self._flags("kwok"))

    def cordon_all(self, cordoned: bool = True) -> None:
        """Every node unschedulable (``spec.unschedulable``), as ``kubectl cordon`` does."""
        core = k8s.CoreV1Api(self.admin)
        for node in core.list_node().items:
            core.patch_node(node.metadata.name, {"spec": {"unschedulable": cordoned or None}})

    def set_fault(self, namespace: str, pod: str, kind: str | None) -> None:
        """Inject (or with None clear) a fault of ``kwok-stages.yaml`` into a pod."""
        k8s.CoreV1Api(self.admin).patch_namespaced_pod(
            pod, namespace, {"metadata": {"annotations": {FAULT_ANNOTATION: kind}}})

    def create_namespace(self, name: str, wait: bool = False) -> None:
        """Create the namespace (if absent); with ``wait``, until the controller-manager
        has made its default ServiceAccount, which pods need and a cluster in use has."""
        try:
            k8s.CoreV1Api(self.admin).create_namespace({"metadata": {"name": name}})
        except k8s.ApiException as err:
            if err.status != 409:
                raise
        if wait:
            self.wait_for(lambda: self.get("v1", "ServiceAccount", name, "default"), 30,
                          f"the default ServiceAccount of {name}")

    def apply(self, obj: dict, *, dry_run: bool = False, validation: str = "Strict") -> dict:
        """Server-side apply of one object, as ``kubectl apply --server-side``: an unknown
        field is an error. ``validation="Ignore"`` creates or replaces it instead, as a
        client-side ``kubectl apply --validate=false`` does, and the server prunes the
        fields its schema lacks (server-side apply cannot: it refuses them)."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        resource = self._resource(api_version, kind)
        meta = obj.get("metadata") or {}
        where = {"namespace": meta.get("namespace") or "default"} if resource.namespaced else {}
        query = [("fieldValidation", validation)]
        if dry_run:
            query.append(("dryRun", "All"))
        if validation == "Strict":
            return resource.server_side_apply(
                body=obj, name=meta["name"], field_manager="omegitops-tests",
                force_conflicts=True, query_params=query, **where).to_dict()
        try:
            return resource.create(body=obj, query_params=query, **where).to_dict()
        except ConflictError:
            stored = resource.get(name=meta["name"], **where).to_dict()
            body = {**obj, "metadata": {**meta, "resourceVersion":
                                        stored["metadata"]["resourceVersion"]}}
            return resource.replace(body=body, query_params=query, **where).to_dict()

    def apply_file(self, path: Path, *, dry_run: bool = False,
                   validation: str = "Strict") -> list[dict]:
        """Apply every document of a YAML file; CRDs are waited for until Established."""
        return self.apply_files([path], dry_run=dry_run, validation=validation)

    def apply_files(self, paths: Iterable[Path], *, dry_run: bool = False,
                    validation: str = "Strict") -> list[dict]:
        """Apply every document of the files, then wait for their CRDs together (the API
        server takes seconds to publish each large CRD's schema)."""
        applied, crds = [], []
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                applied.append(self.apply(doc, dry_run=dry_run, validation=validation))
                if doc["kind"] == "CustomResourceDefinition" and not dry_run:
                    crds.append(doc["metadata"]["name"])
        for name in crds:
            self.wait_for_crd(name)
        return applied

    def wait_for_crd(self, name: str) -> None:
        api = k8s.ApiextensionsV1Api(self.admin)

        def established() -> bool:
            crd = api.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True"
                       for c in (crd.status.conditions or []))

        self.wait_for(established, 60, f"CRD {name} Established")
        self._dynamic = None  # discovery is cached: see the new kind

    def _resource(self, api_version: str, kind: str):
        """The kind's API resource. A CRD's kind can be missing from discovery for a
        while after the CRD is Established (the API server publishes it on its own
        time), and the client caches discovery: look again, fresh, for up to 30 s."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                if time.monotonic() > deadline:
                    raise
                self.dynamic.resources.invalidate_cache()
                time.sleep(0.5)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        resource = self._resource(api_version, kind)
        try:
            kwargs = {"namespace": namespace} if resource.namespaced else {}
            return resource.get(name=name, **kwargs).to_dict()
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[dict]:
        resource = self._resource(api_version, kind)
        kwargs = {}
        if namespace:
            kwargs["namespace"] = namespace
        if label_selector:
            kwargs["label_selector"] = label_selector
        return resource.get(**kwargs).to_dict().get("items") or []

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str,
               **kwargs) -> None:
        resource = self._resource(api_version, kind)
        if resource.namespaced:
            kwargs["namespace"] = namespace
        try:
            resource.delete(name=name, **kwargs)
        except NotFoundError:
            pass

    def wait_for(self, condition, seconds: float, what: str, interval: float = 0.25):
        """Poll ``condition`` until it returns something true; fail naming ``what``."""
        deadline = time.monotonic() + seconds
        while True:
            self.check()
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {seconds} s waiting for {what}")
            time.sleep(interval)

    def audit_events(self, user: str, since: int = 0) -> list[dict]:
        """The audit events of ``user``'s requests, from byte offset ``since`` of the log."""
        events = []
        with self.audit_log.open("rb") as log:
            # A log shorter than the offset was rotated: its requests would silently be
            # none (the API server runs with rotation off, so this is only a guard).
            if log.seek(0, os.SEEK_END) < since:
                raise AssertionError(f"the audit log is shorter than offset {since}: rotated")
            log.seek(since)
            for line in log:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kube-apiserver killed mid-write
                if event.get("user", {}).get("username") == user:
                    events.append(event)
        return events

    def audit_offset(self) -> int:
        return self.audit_log.stat().st_size

    def env(self, kubeconfig: Path) -> dict[str, str]:
        """The environment of an omegitops run with that kubeconfig (and nothing that
        would point it elsewhere)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KUBERNETES_", "OMEGITOPS_KUBE"))}
        env["KUBECONFIG"] = str(kubeconfig)
        return env


def _http_ok(url: str, token: str | None = None, ca: Path | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as answer:
            body = answer.read()
            if url.endswith("/health"):
                return json.loads(body).get("health") == "true"
            return answer.status == 200
    except (OSError, ValueError):
        return False
