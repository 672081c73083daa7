"""``kubectl ome`` on the real control plane, through the real kubectl's plugin
mechanism: kubectl (built from the control plane's own Kubernetes module, build.sh)
finds ``kubectl-ome`` on PATH and runs it with the rest of the line, and the plugin
reads the cluster and the namespace of the kubeconfig's current context, as the
documents' ``kubectl ome instance list NAME`` does (instances.txt "Instance status",
restart-policy.txt) and as ``kubectl ome rollout pause`` (min-ready-seconds.txt).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.backends import NAME, ControlPlaneBackend, settled

REPO_ROOT = Path(__file__).resolve().parents[2]


def _plugin_folder(folder: Path) -> Path:
    """A folder holding ``kubectl-ome`` as ``pip install`` makes it: an executable that
    runs the console script's function (this checkout's)."""
    folder.mkdir()
    script = folder / "kubectl-ome"
    script.write_text(f"#!{sys.executable}\n"
                      "import sys\n"
                      f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
                      "from omegitops.kubectl_plugin import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    return folder


def _kubeconfig(cp, path: Path, namespace: str) -> Path:
    """The admin's kubeconfig with its context's namespace set, as `kubectl config
    set-context --current --namespace` leaves it."""
    config = yaml.safe_load(cp.admin_kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture
def kubectl(control_plane, tmp_path):
    """A converged service ``svc`` (two Instances) and ``kubectl(*args)``: the real kubectl
    with the plugin on PATH and KUBECONFIG's context in the service's namespace."""
    backend = ControlPlaneBackend(control_plane, tmp_path)
    scenario, change = backend.converged(replicas=2, grace=2)
    env = control_plane.env(_kubeconfig(control_plane, tmp_path / "kubeconfig",
                                        scenario.namespace))
    # Only this checkout's plugin: another kubectl-ome on PATH (the one `pip install -e`
    # put beside python) would be "overshadowed", which `kubectl plugin list` reports.
    others = [p for p in env.get("PATH", "").split(os.pathsep)
              if p and not (Path(p) / "kubectl-ome").exists()]
    env["PATH"] = os.pathsep.join([str(_plugin_folder(tmp_path / "plugins")), *others])

    def run(*args: str, code: int = 0) -> str:
        done = subprocess.run([str(control_plane.kubectl), *args], env=env, text=True,
                              capture_output=True, timeout=120, check=False)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        return done.stdout

    run.scenario, run.change = scenario, change
    yield run
    backend.close()


def test_kubectl_finds_the_plugin(kubectl):
    assert "kubectl-ome" in kubectl("plugin", "list")


def test_instance_list_and_status_in_the_contexts_namespace(kubectl):
    lines = kubectl("ome", "instance", "list", "svc").splitlines()
    assert lines[0].split() == ["IDX/INC", "PHASE", "REVISION", "PODS", "SERVING",
                                "OPERATION"]
    assert [line.split()[:2] for line in lines[1:]] == [["0/1", "Ready"], ["1/1", "Ready"]]
    namespace = kubectl.scenario.namespace
    status = kubectl("ome", "instance", "status", "svc", "1")
    assert "Instance:      1" in status
    assert f"Replica:       {namespace}/{NAME}" in status
    assert f"{NAME}-1-default-0" in status
    across = kubectl("ome", "instance", "list", "-A").splitlines()
    assert across[0].split()[:3] == ["NAMESPACE", "SERVICE", "COMPONENT"]
    assert [namespace, "svc", "engine", "0/1", "Ready"] in [line.split()[:5]
                                                             for line in across[1:]]
    # -n wins over the context's: the default namespace has no such service.
    kubectl("ome", "instance", "list", "svc", "-n", "default", code=1)


def test_rollout_pause_status_resume(kubectl):
    """Paused, a new image waits: status says how far and what holds it, without
    waiting (--watch=false) or until its timeout (exit 1); resumed, the rollout ends
    and status exits 0."""
    namespace = kubectl.scenario.namespace
    assert f"svc (engine) in {namespace} paused by oncall" in kubectl(
        "ome", "rollout", "pause", "svc", "--by", "oncall")
    kubectl.change(image="sglang:v2", grace=2)
    kubectl.scenario.run_pass()
    waiting = kubectl("ome", "rollout", "status", "svc", "--watch=false")
    assert "0 out of 2 new Instances have been updated" in waiting, waiting
    assert "held (Paused by oncall since" in waiting, waiting
    kubectl("ome", "rollout", "status", "svc", "--timeout", "2s", code=1)
    assert kubectl("ome", "rollout", "resume", "svc").strip().endswith("resumed")
    kubectl.scenario.until(settled, seconds=300)
    assert kubectl("ome", "rollout", "status", "svc", "--timeout", "30s").splitlines()[-1] == (
        f"rollout of svc (engine) in {namespace} successfully rolled out")


def test_a_role_in_the_namespace_is_all_it_needs(kubectl, control_plane, tmp_path):
    """A person whose Role grants the namespace alone (no ClusterRole): the lists read
    that namespace, not the cluster's."""
    namespace = kubectl.scenario.namespace
    control_plane.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "oncall", "namespace": namespace}})
    control_plane.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "ome-oncall", "namespace": namespace},
        "rules": [{"apiGroups": ["ome.io"], "resources": ["inferencereplicas"],
                   "verbs": ["get", "list", "update"]},
                  {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]}]})
    control_plane.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "ome-oncall", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "ome-oncall"},
        "subjects": [{"kind": "ServiceAccount", "name": "oncall", "namespace": namespace}]})
    config = control_plane.service_account_kubeconfig(namespace, "oncall")
    env = {**control_plane.env(config),
           "PATH": f"{_plugin_folder(tmp_path / 'own-plugins')}:/usr/bin:/bin"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(control_plane.kubectl), "ome", *args], env=env, text=True,
                              capture_output=True, timeout=120, check=False)

    listed = run("instance", "list", "svc")
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 3
    shown = run("instance", "status", "svc", "0")
    assert shown.returncode == 0 and "Instance:      0" in shown.stdout, shown.stderr
    paused = run("rollout", "pause", "svc", "--by", "oncall")
    assert paused.returncode == 0 and "paused by oncall" in paused.stdout, paused.stderr
    assert run("rollout", "resume", "svc").returncode == 0
    # Across namespaces is the cluster's to grant: the API server's refusal, exit 1.
    across = run("instance", "list", "-A")
    assert across.returncode == 1 and "forbidden" in across.stderr.lower(), across.stderr
