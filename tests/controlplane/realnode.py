"""A real node beside KWOK's: containerd and runc from Debian, the kubelet and
kube-proxy built from the same ``k8s.io/kubernetes`` as the control plane, a CNI
bridge from ``containernetworking-plugins``. It runs the images
``node/images.sh`` builds (the project's, from its Dockerfile) as a user's
cluster runs them: the kubelet starts the job's pod with in-cluster credentials,
the ``kubernetes`` Service reaches the API server through kube-proxy's iptables
rules, and a ``git daemon`` on the bridge is the repository's remote.

Everything is local: the bridge's network is this machine's only (no masquerade,
no route out), the API server answers on the bridge's address, the git daemon
listens on it alone. The node is tainted ``PreferNoSchedule`` so that the fleet's
pods go to KWOK's GPU nodes (it has no GPU anyway) while a pod asking for it by
name (a node selector) still lands.

Needs root on Linux, and the packages ``install.sh`` installs from Debian.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import yaml
from controlplane import (
    ControlPlane,
    ControlPlaneError,
    Process,
    Supervisor,
    free_port,
    start_process,
    wait_ready,
)
from kubernetes import client as k8s

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "node"
NODE_NAME = "omegitops-node"
NODE_LABEL = "omegitops.test/node"
TAINT_KEY = "omegitops.test/real-node"


@dataclass(frozen=True)
class PodNetwork:
    """The bridge the node's pods live on; the host is its gateway."""

    bridge: str = "omegitops0"
    gateway: str = "10.222.0.1"
    prefix: int = 16
    subnet: str = "10.222.0.0/16"
    range_start: str = "10.222.1.1"

    def create(self) -> None:
        """The bridge with the gateway's address, made before the API server starts so
        that it can answer there (the CNI plugin takes the bridge as it finds it)."""
        self.delete()
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.gateway}/{self.prefix}", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def delete(self) -> None:
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)

    def cni_config(self, ipam_dir: Path) -> dict:
        return {
            "cniVersion": "0.4.0",
            "name": "omegitops-test",
            "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": True,
                "isDefaultGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                         "ranges": [[{"subnet": self.subnet, "rangeStart": self.range_start,
                                      "gateway": self.gateway}]]},
            }],
        }


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        raise ControlPlaneError(f"{' '.join(argv)}: exit {done.returncode}\n"
                                f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done


def build_images() -> dict[str, str]:
    """Build (or find cached) the node's images; returns images.env as a dict plus the
    folder of their archives under ``DIR``."""
    done = subprocess.run(["bash", str(NODE_DIR / "images.sh")], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"building the node's images failed:\n{done.stderr[-4000:]}")
    folder = Path(done.stdout.strip().splitlines()[-1])
    names = dict(line.split("=", 1) for line in (folder / "images.env").read_text().split())
    return {**names, "DIR": str(folder)}


@dataclass
class RealNode(Supervisor):
    cp: ControlPlane
    network: PodNetwork
    images: dict[str, str]
    name: str = NODE_NAME
    processes: dict[str, Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dir = self.cp.workdir / "node"
        self.dir.mkdir(parents=True, exist_ok=True)
        # A unix socket's path must stay under 108 bytes: a short one of its own.
        self.run_dir = Path(f"/run/omegitops-node-{os.getpid()}")
        self.socket = self.run_dir / "containerd.sock"

    # -- lifetime ---------------------------------------------------------------------

    def start(self) -> None:
        self._start_containerd()
        for archive in ("pause.tar", "omegitops.tar"):
            self.ctr("images", "import", str(Path(self.images["DIR"]) / archive))
        self._start_kubelet()
        self._start_kube_proxy()

    def stop(self) -> None:
        # The node's pods first, while the kubelet can still stop them through CRI,
        # so that no sandbox, network namespace or mount outlives the test.
        if "kubelet" in self.processes and self.processes["kubelet"].popen.poll() is None:
            self._drain()
        for name in ("kube-proxy", "kubelet"):
            process = self.processes.pop(name, None)
            if process is not None:
                process.stop()
        if "containerd" in self.processes:
            self._remove_containers()
            self.processes.pop("containerd").stop()
        self._kill_shims()
        self._unmount()
        kube_proxy = self.cp.bin_dir / "kube-proxy"
        if kube_proxy.exists():
            subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False)
        _drop_kubelet_chains()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    # -- containerd -------------------------------------------------------------------

    def _start_containerd(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-omegitops.conflist").write_text(
            json.dumps(self.network.cni_config(cni / "ipam"), indent=2))
        config = self.dir / "containerd.toml"
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        # restrict_oom_score_adj: the machine's own score is below what containerd
        # would give a pod, which it may not lower without it.
        config.write_text(f"""version = 2
root = "{self.dir / 'containerd'}"
state = "{self.run_dir / 'state'}"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.dir / 'opt'}"
[{cri}]
  sandbox_image = "{self.images['PAUSE']}"
  restrict_oom_score_adj = true
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni / 'net.d'}"
""")
        process = self._start("containerd", ["/usr/bin/containerd", f"--config={config}"])
        self._wait(process, lambda: self.ctr_ok("version"), 30)

    def ctr(self, *args: str) -> str:
        return run("ctr", f"--address={self.socket}", "--namespace=k8s.io", *args).stdout

    def ctr_ok(self, *args: str) -> bool:
        return subprocess.run(["ctr", f"--address={self.socket}", *args],
                              capture_output=True, check=False).returncode == 0

    def _remove_containers(self) -> None:
        """Whatever the kubelet left: its tasks killed, its containers removed."""
        try:
            tasks = self.ctr("tasks", "ls", "-q").split()
            for task in tasks:
                subprocess.run(["ctr", f"--address={self.socket}", "-n", "k8s.io", "tasks",
                                "kill", "-s", "SIGKILL", task], capture_output=True, check=False)
            time.sleep(0.5 if tasks else 0)
            for task in tasks:
                subprocess.run(["ctr", f"--address={self.socket}", "-n", "k8s.io", "tasks",
                                "delete", "-f", task], capture_output=True, check=False)
            containers = self.ctr("containers", "ls", "-q").split()
            if containers:
                subprocess.run(["ctr", f"--address={self.socket}", "-n", "k8s.io",
                                "containers", "rm", *containers], capture_output=True,
                               check=False)
        except ControlPlaneError:
            pass

    def _kill_shims(self) -> None:
        """A shim outlives containerd by design; ours go with the node."""
        subprocess.run(["pkill", "-KILL", "-f", f"containerd-shim.*-address {self.socket}"],
                       capture_output=True, check=False)

    def _unmount(self) -> None:
        """Mounts the kubelet and containerd made under the node's folders (token
        volumes, overlay roots, shared memory), innermost first."""
        roots = (str(self.dir), str(self.run_dir), "/run/netns/cni-")
        with open("/proc/self/mounts") as mounts:
            points = [line.split()[1] for line in mounts]
        for point in sorted(points, key=len, reverse=True):
            if point.startswith(roots):
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    # -- kubelet and kube-proxy -----------------------------------------------------

    def _start_kubelet(self) -> None:
        kubeconfig = self.cp.admin_kubeconfig
        self.kubelet_port, healthz = free_port(), free_port()
        config = self.dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.network.gateway,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            # The API server fetches logs from the node over the bridge, on a port
            # only this machine reaches.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            # This machine's cgroups are v1, which Kubernetes still runs when asked.
            "failCgroupV1": False,
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            # No cluster DNS: the pods reach the API server by the Service address in
            # their environment and the git daemon by its address.
            "resolvConf": "",
            "clusterDomain": "cluster.local",
            "podLogsDir": str(self.dir / "pod-logs"),
            "maxPods": 30,
            "registerWithTaints": [{"key": TAINT_KEY, "effect": "PreferNoSchedule"}],
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 99,
            "imageGCLowThresholdPercent": 98,
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "localStorageCapacityIsolation": True,
        }))
        process = self._start("kubelet", [
            str(self.cp.bin_dir / "kubelet"), f"--config={config}",
            f"--kubeconfig={kubeconfig}", f"--hostname-override={self.name}",
            f"--node-ip={self.network.gateway}", f"--root-dir={self.dir / 'kubelet'}",
            f"--node-labels={NODE_LABEL}=real", "--v=1",
        ])
        self._wait(process, lambda: self._node_ready(), 120)

    def _node_ready(self) -> bool:
        try:
            return self.cp.node_ready(self.name)
        except k8s.ApiException:
            return False

    def _start_kube_proxy(self) -> None:
        config = self.dir / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.cp.admin_kubeconfig)},
            "hostnameOverride": self.name,
            "clusterCIDR": self.network.subnet,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # Zero: leave the machine's conntrack settings as they are.
            "conntrack": {"maxPerCore": 0, "min": 0},
            "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
        }))
        process = self._start("kube-proxy", [str(self.cp.bin_dir / "kube-proxy"),
                                             f"--config={config}", "--v=1"])
        self._wait(process, self._service_rules, 60)

    def _service_rules(self) -> bool:
        """kube-proxy has written the ``kubernetes`` Service's rule."""
        done = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                              check=False)
        return "default/kubernetes:https" in done.stdout

    def _drain(self) -> None:
        core = k8s.CoreV1Api(self.cp.admin)
        try:
            pods = core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.name}").items
            for pod in pods:
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                           grace_period_seconds=0)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.ctr("tasks", "ls", "-q").split():
                time.sleep(0.5)
        except (k8s.ApiException, ControlPlaneError, OSError):
            pass

    # -- processes ------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> Process:
        process = start_process(self.dir, name, argv)
        self.processes[name] = process
        return process

    def _wait(self, process: Process, ready, seconds: float) -> None:
        wait_ready(process, ready, seconds, interval=0.3)


@dataclass
class GitDaemon:
    """``git daemon`` serving ``root`` on the bridge's address alone, pushes allowed:
    the remote a job's pod clones from and pushes its report to."""

    root: Path
    address: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    def url(self, name: str) -> str:
        return f"git://{self.address}:{self.port}/{name}"

    def __enter__(self) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        self.log = self.root.parent / "git-daemon.log"
        handle = self.log.open("wb")
        self.process = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", f"--listen={self.address}", f"--port={self.port}",
             f"--base-path={self.root}", "--export-all", "--enable=receive-pack",
             "--informative-errors", str(self.root)],
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        handle.close()
        deadline = time.monotonic() + 10
        while not _listening(self.address, self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ControlPlaneError(f"git daemon did not start:\n{self.log.read_text()}")
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _drop_kubelet_chains() -> None:
    """The chains the kubelet keeps in every table (KUBE-FIREWALL, its canaries), gone
    with it; kube-proxy's own are gone by ``kube-proxy --cleanup`` already."""
    for save, restore in (("iptables-save", "iptables-restore"),
                          ("ip6tables-save", "ip6tables-restore")):
        rules = subprocess.run([save], capture_output=True, text=True, check=False)
        if rules.returncode != 0 or "KUBE-" not in rules.stdout:
            continue
        kept = "\n".join(line for line in rules.stdout.splitlines() if "KUBE-" not in line)
        subprocess.run([restore], input=kept + "\n", text=True, capture_output=True,
                       check=False)
