"""Argo Workflows on the real node's cluster: the workflow-controller built from
Argo's Go module (``argo/build.sh``), started beside the control plane as its
Deployment would run it, its CRDs, an S3 artifact repository (Versity's S3
gateway over a folder, answering on the pod network's gateway) as the controller's
default, and the executor's image on the node, so that each workflow step is a pod
the kubelet runs with Argo's init and wait containers around the step's own.

Usage (the ``argo_cluster`` fixture)::

    argo = ArgoWorkflows(cp, node, bin_dir)
    with argo:
        ...  # Workflows in the cp's namespaces run
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

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
PIPELINES_README = HERE.parents[1] / "pipelines" / "README.md"
ARGO_NAMESPACE = "argo"
ARGO_VERSION = "v3.7.3"
ARGO_MODULE = f"github.com/argoproj/argo-workflows/v3@{ARGO_VERSION}"
BUCKET = "omegitops-artifacts"
# The artifact repository's keys: a Secret in each namespace whose workflows store
# artifacts, as Argo's quick start makes one.
S3_SECRET = "omegitops-artifacts-s3"


def documented_executor() -> dict[str, str]:
    """The controller's ``executor`` setting as pipelines/README.md gives it (the block
    after its ``<!-- argo-executor -->`` marker): what Argo's own containers need to be
    admitted under Pod Security ``restricted``."""
    text = (PIPELINES_README).read_text()
    block = text.split("<!-- argo-executor -->", 1)[1].split("```yaml\n", 1)[1]
    return yaml.safe_load(block.split("```", 1)[0])


def build_argo() -> tuple[Path, dict[str, str]]:
    """The bin folder of Argo's controller, executor and the S3 server, and the
    executor image's name (built when missing)."""
    done = subprocess.run(["bash", str(HERE / "argo" / "build.sh")], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"building Argo Workflows failed:\n{done.stderr[-4000:]}")
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    names = dict(line.split("=", 1) for line in (bin_dir / "images.env").read_text().split())
    return bin_dir, names


@dataclass
class ArgoWorkflows(Supervisor):
    cp: ControlPlane
    node: object  # realnode.RealNode
    bin_dir: Path
    executor_image: str
    crds: list[Path]
    address: str
    processes: dict[str, Process] = field(default_factory=dict)
    access_key: str = "omegitops-test"
    secret_key: str = "omegitops-test-secret"

    def __post_init__(self) -> None:
        self.dir = self.cp.workdir / "argo"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.s3_port = free_port()
        self.metrics_port = free_port()
        self.s3_endpoint = f"{self.address}:{self.s3_port}"

    def start(self) -> None:
        self.cp.apply_files(self.crds)
        self.node.ctr("images", "import", str(self.bin_dir / "argoexec.tar"))
        self._start_s3()
        self.cp.create_namespace(ARGO_NAMESPACE)
        self.cp.apply({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "workflow-controller-configmap", "namespace": ARGO_NAMESPACE},
            # Metrics on a port of their own (the default 9090 may be taken on a
            # machine that runs other things), plain HTTP on loopback.
            "data": {**documented_executor(),
                     "metricsConfig": yaml.safe_dump({"port": self.metrics_port,
                                                      "secure": False}),
                     "artifactRepository": yaml.safe_dump({"s3": {
                "bucket": BUCKET, "endpoint": self.s3_endpoint, "insecure": True,
                "accessKeySecret": {"name": S3_SECRET, "key": "accesskey"},
                "secretKeySecret": {"name": S3_SECRET, "key": "secretkey"},
            }})},
        })
        self._start_controller()

    def stop(self) -> None:
        for name in ("workflow-controller", "versitygw"):
            process = self.processes.pop(name, None)
            if process is not None:
                process.stop()

    def s3_secret(self, namespace: str) -> None:
        """The artifact repository's keys in ``namespace``, where its pods read them."""
        self.cp.apply({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": S3_SECRET, "namespace": namespace},
                       "stringData": {"accesskey": self.access_key,
                                      "secretkey": self.secret_key}})

    def objects(self) -> list[str]:
        """Every object key in the artifact bucket (the gateway keeps them as files)."""
        root = self.dir / "s3" / BUCKET
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                      and not p.name.startswith(".sgwtmp"))

    # -- processes ------------------------------------------------------------------

    def _start_s3(self) -> None:
        # The posix backend serves each top folder as a bucket.
        (self.dir / "s3" / BUCKET).mkdir(parents=True, exist_ok=True)
        process = self._start("versitygw", [
            str(self.bin_dir / "versitygw"), "--access", self.access_key,
            "--secret", self.secret_key, "--port", self.s3_endpoint,
            "posix", str(self.dir / "s3")], env={})
        self._wait(process, self._s3_up, 30)

    def _s3_up(self) -> bool:
        try:
            with socket.create_connection((self.address, self.s3_port), timeout=1):
                return True
        except OSError:
            return False

    def _start_controller(self) -> None:
        # As its Deployment runs it, but as a process beside the control plane (like
        # kube-controller-manager here): one replica, no leader election.
        process = self._start("workflow-controller", [
            str(self.bin_dir / "workflow-controller"),
            f"--kubeconfig={self.cp.admin_kubeconfig}", f"--namespace={ARGO_NAMESPACE}",
            f"--executor-image={self.executor_image}",
            "--executor-image-pull-policy=IfNotPresent", "--loglevel=info"],
            env={"LEADER_ELECTION_DISABLE": "true"})
        self._wait(process, self._controller_ready, 60)

    def _controller_ready(self) -> bool:
        """The controller has read its config and started its informers."""
        text = self.processes["workflow-controller"].log.read_text(errors="replace")
        return "Starting Workflow Controller" in text or "Started Workflow" in text \
            or "Starting workflow TTL controller" in text

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> Process:
        process = start_process(self.dir, name, argv, env)
        self.processes[name] = process
        return process

    def _wait(self, process: Process, ready, seconds: float) -> None:
        wait_ready(process, ready, seconds, interval=0.3)


def wait_for_workflow(cp: ControlPlane, namespace: str, name: str, seconds: float,
                      checks=()) -> dict:
    """The Workflow once it has finished (Succeeded, Failed or Error)."""
    deadline = time.monotonic() + seconds
    while True:
        cp.check()
        for check in checks:
            check()
        workflow = cp.get("argoproj.io/v1alpha1", "Workflow", namespace, name)
        phase = (workflow or {}).get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error") or time.monotonic() > deadline:
            return workflow
        time.sleep(1)


def workflow_story(cp: ControlPlane, workflow: dict) -> str:
    """The workflow's phase and message, and each node's: what ``argo get`` shows."""
    status = workflow.get("status", {})
    name = workflow["metadata"]["name"]
    lines = [f"workflow {name}: {status.get('phase')} {status.get('message', '')}"]
    for node in sorted((status.get("nodes") or {}).values(),
                       key=lambda n: n.get("startedAt") or ""):
        lines.append(f"  {node.get('type')} {node.get('displayName')}: {node.get('phase')} "
                     f"{node.get('message', '')}")
    core = k8s.CoreV1Api(cp.admin)
    namespace = workflow["metadata"]["namespace"]
    for pod in core.list_namespaced_pod(
            namespace, label_selector=f"workflows.argoproj.io/workflow={name}").items:
        if pod.status.phase == "Succeeded":
            continue
        for container in ("main", "wait", "init"):
            try:
                log = core.read_namespaced_pod_log(pod.metadata.name, namespace,
                                                   container=container, tail_lines=40)
            except k8s.ApiException as err:
                log = f"(no log: {err.status})"
            lines.append(f"--- {pod.metadata.name} {container} ---\n{log}")
    return "\n".join(lines)
