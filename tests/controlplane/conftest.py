"""Fixtures of the control-plane tests: the real control plane, and omegitops run on it
as the scheduled job runs, with the ``omegitops`` ServiceAccount's token.

The control plane is built once per machine by ``build.sh`` (several minutes cold,
nothing when cached) and started once per test session: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager and KWOK with eight 8-GPU nodes; OME's
CRDs from ``../shared/ome/crds`` (skipped, with a message, when that folder is
absent), the InferenceReplica CRD and the RBAC of ``pipelines/``.

The session's ``control_plane`` fixture is in ``tests/conftest.py``, with the
``backend`` fixture whose ``controlplane`` parameter runs the scenarios of
``tests/backends.py`` on it; it starts the control plane with the functions here.

``OMEGITOPS_CONTROLPLANE=skip`` skips these tests (for a quick run of the rest).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client as k8s

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from controlplane import ControlPlane

REPO_ROOT = HERE.parents[1]
PIPELINES = REPO_ROOT / "pipelines"
OME_CRDS = REPO_ROOT.parent / "shared" / "ome" / "crds"
JOB_NAMESPACE = "omegitops"
JOB_USER = f"system:serviceaccount:{JOB_NAMESPACE}:omegitops"
# The gang scheduler's PodGroup CRD, from the scheduler-plugins module: with it
# installed, omegitops creates a PodGroup per gang, as on a cluster that has it.
SCHEDULER_PLUGINS = "sigs.k8s.io/scheduler-plugins@v0.33.5"
NODES = 8
GPUS = 8


def module_dir(module: str) -> Path:
    """Where the Go module proxy's copy of ``module`` (path@version) is, downloaded once."""
    done = subprocess.run(["go", "mod", "download", "-json", module], cwd=HERE,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"go mod download {module}: {done.stdout}{done.stderr}")
    return Path(json.loads(done.stdout)["Dir"])


def build_control_plane() -> Path:
    """The bin folder of the built control plane (``build.sh`` builds it when missing)."""
    done = subprocess.run(["bash", str(HERE / "build.sh")], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the control plane failed:\n{done.stderr[-4000:]}")
    sys.stderr.write(done.stderr)
    return Path(done.stdout.strip().splitlines()[-1])


def build_helm() -> Path:
    """Helm, built from its own Go module by ``build.sh helm`` when it is not cached."""
    done = subprocess.run(["bash", str(HERE / "build.sh"), "helm"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building helm failed:\n{done.stderr[-4000:]}")
    sys.stderr.write(done.stderr)
    return Path(done.stdout.strip().splitlines()[-1]) / "helm"


def install_omegitops(cp: ControlPlane, nodes: int = NODES) -> None:
    """KWOK's GPU nodes, OME's CRDs (when ../shared has them), the InferenceReplica and
    PodGroup CRDs, the job's namespace and the RBAC of ``pipelines/``."""
    install_prerequisites(cp, nodes)
    cp.apply_files([PIPELINES / "crds" / "inferencereplica-crd.yaml",
                    module_dir(SCHEDULER_PLUGINS) / "config" / "crd" / "bases"
                    / "scheduling.x-k8s.io_podgroups.yaml"])
    cp.create_namespace(JOB_NAMESPACE)
    cp.apply_file(PIPELINES / "common" / "rbac.yaml")
    cp.job_kubeconfig = cp.service_account_kubeconfig(JOB_NAMESPACE, "omegitops")


def install_prerequisites(cp: ControlPlane, nodes: int = NODES) -> None:
    """What a cluster has before omegitops is installed: KWOK's GPU nodes and OME's
    CRDs (when ../shared has them); no InferenceReplica CRD, no namespace, no RBAC."""
    cp.add_nodes(nodes, gpus=GPUS)
    if OME_CRDS.is_dir():
        cp.apply_files(sorted(OME_CRDS.glob("*.yaml")))
        cp.ome_crds = True


@contextmanager
def running_node_cluster(workdir: Path, *, installed: bool = True):
    """A control plane of its own with a real node beside KWOK's nodes (realnode.py),
    the git daemon ``cp.git`` on the pods' bridge. ``installed``: with omegitops'
    CRD, namespace (Pod Security ``restricted`` enforced) and RBAC, as the tests'
    clusters have them; otherwise empty of omegitops, as a user's cluster before the
    install. Needs root; one at a time on a machine (the bridge has a fixed name)."""
    from realnode import GitDaemon, PodNetwork, RealNode, build_images

    installed_packages = subprocess.run(["bash", str(HERE / "node" / "install.sh")],
                                        check=False, capture_output=True, text=True)
    assert installed_packages.returncode == 0, installed_packages.stderr[-3000:]
    bin_dir = build_control_plane()
    images = build_images()
    network = PodNetwork()
    network.create()
    try:
        with ControlPlane(bin_dir, workdir, pod_network_gateway=network.gateway) as cp:
            if installed:
                install_omegitops(cp)
                # The job's namespace as a careful cluster keeps it: every pod there
                # must meet the restricted Pod Security Standard (the CronJob's, Argo's).
                k8s.CoreV1Api(cp.admin).patch_namespace(JOB_NAMESPACE, {"metadata": {
                    "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"}}})
            else:
                install_prerequisites(cp)
            with RealNode(cp, network, images) as node, \
                    GitDaemon(workdir / "git", network.gateway) as daemon:
                cp.node, cp.git, cp.images = node, daemon, images
                yield cp
    finally:
        network.delete()


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory):
    """The cluster of ``running_node_cluster``, omegitops installed: the images the
    Dockerfile and node/images.sh build, run by a kubelet. Its pods reach the API
    server at the ``kubernetes`` Service and ``cp.git`` (a git daemon) by address.
    Needs root (skipped otherwise, with the reason); installs what it needs from
    Debian when missing. ``OMEGITOPS_NODE=skip`` leaves it out."""
    if os.environ.get("OMEGITOPS_CONTROLPLANE") == "skip":
        pytest.skip("OMEGITOPS_CONTROLPLANE=skip")
    if os.environ.get("OMEGITOPS_NODE") == "skip":
        pytest.skip("OMEGITOPS_NODE=skip")
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("a real node needs root on Linux (containerd, iptables, a bridge)")
    with running_node_cluster(tmp_path_factory.mktemp("nodecluster")) as cp:
        yield cp


_namespaces = itertools.count()


@pytest.fixture
def namespace(control_plane):
    """A namespace of the test's own, with its default ServiceAccount (which pods need),
    deleted after the test; each test gets a new name, as a deleted one takes a while
    to go."""
    name = f"cp-ns-{next(_namespaces)}"
    control_plane.create_namespace(name, wait=True)
    yield name
    control_plane.delete("v1", "Namespace", None, name)


@pytest.fixture
def ome_crds(control_plane):
    """Tests that need OME's own CRDs in the API (InferenceServices present)."""
    if not control_plane.ome_crds:
        pytest.skip(f"OME's CRDs are not here ({OME_CRDS} is absent)")
    return control_plane


@pytest.fixture(scope="session")
def argo_cluster(node_cluster):
    """The node's cluster with Argo Workflows running (argoworkflows.py): its CRDs, its
    controller, its executor's image on the node and an S3 artifact repository."""
    from argoworkflows import ARGO_MODULE, ArgoWorkflows, build_argo

    cp = node_cluster
    bin_dir, images = build_argo()
    crds = sorted((module_dir(ARGO_MODULE) / "manifests" / "base" / "crds" / "full")
                  .glob("argoproj.io_*.yaml"))
    with ArgoWorkflows(cp, cp.node, bin_dir, images["EXECUTOR"], crds,
                       address=cp.node.network.gateway) as argo:
        cp.argo = argo
        yield cp
