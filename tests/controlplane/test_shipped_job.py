"""The job as users install it: the image built from the Dockerfile, run by a real
kubelet (realnode.py) as the CronJob's pod, with in-cluster credentials, the shipped
security context, emptyDir scratch space and a git remote over the network.

Slow (a control plane and a node of their own, and the images' builds when they are
not cached): marked ``node``; the README's test command runs them with the rest.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import test_job
import yaml
from conftest import JOB_NAMESPACE, PIPELINES, REPO_ROOT
from kubernetes import client as k8s
from realnode import NODE_NAME
from test_job import git

pytestmark = pytest.mark.node

EXAMPLES = REPO_ROOT / "examples"
ON_THE_NODE = {"kubernetes.io/hostname": NODE_NAME}


def pod_story(cp, namespace: str, pod: str) -> str:
    """What ``kubectl describe`` and ``kubectl logs`` would show of a pod: its phase,
    its containers' states, its events and its log (fetched from the kubelet through
    the API server)."""
    core = k8s.CoreV1Api(cp.admin)
    lines = []
    try:
        live = core.read_namespaced_pod(pod, namespace)
        lines.append(f"pod {namespace}/{pod}: {live.status.phase} on {live.spec.node_name}")
        for status in live.status.container_statuses or []:
            lines.append(f"  container {status.name}: {status.state}")
    except k8s.ApiException as err:
        lines.append(f"pod {namespace}/{pod}: {err.status} {err.reason}")
    events = core.list_namespaced_event(namespace,
                                        field_selector=f"involvedObject.name={pod}").items
    lines += [f"  event {e.type} {e.reason}: {e.message}" for e in events]
    try:
        lines.append("--- kubectl logs ---")
        lines.append(core.read_namespaced_pod_log(pod, namespace, container=None))
    except k8s.ApiException as err:
        lines.append(f"(no log: {err.status} {err.reason} {err.body})")
    return "\n".join(lines)


def wait_for_pod(cp, namespace: str, name: str, seconds: float) -> str:
    core = k8s.CoreV1Api(cp.admin)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        cp.check()
        cp.node.check()
        phase = core.read_namespaced_pod(name, namespace).status.phase
        if phase in ("Succeeded", "Failed"):
            return phase
        time.sleep(0.5)
    raise AssertionError(f"pod {name} still running after {seconds} s:\n"
                         + pod_story(cp, namespace, name))


# -- the image ----------------------------------------------------------------------------


def shipped_image_pod(name: str, namespace: str, **container) -> dict:
    """A pod of one container of the shipped image, under the CronJob's own security
    contexts, on the node; ``container`` adds to (or replaces) the container's fields."""
    cronjob = yaml.safe_load((PIPELINES / "cronjob" / "cronjob.yaml").read_text())
    template = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    shipped = template["containers"][0]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never", "nodeSelector": ON_THE_NODE,
            "securityContext": template["securityContext"],
            "automountServiceAccountToken": False,
            "containers": [{
                "name": "omegitops", "image": shipped["image"],
                "imagePullPolicy": shipped["imagePullPolicy"],
                "securityContext": shipped["securityContext"],
                **container,
            }],
        },
    }


def test_the_image_validates_the_examples_on_a_real_node(node_cluster, tmp_path):
    """``omegitops validate --repo examples`` in the image, started by the kubelet under
    the CronJob's own security context. Before the schemas were package data it died
    with FileNotFoundError on the first schema."""
    cp = node_cluster
    # The examples reach the pod as a read-only host folder the job's user can read.
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES, examples)
    subprocess.run(["chmod", "-R", "a+rX", str(tmp_path)], check=True)
    # Not in the job's namespace, which enforces Pod Security `restricted`: that
    # refuses the host folder the examples come in.
    namespace = "default"
    pod = shipped_image_pod(
        "validate-examples", namespace, args=["validate", "--repo", "/examples"],
        volumeMounts=[{"name": "examples", "mountPath": "/examples", "readOnly": True},
                      {"name": "tmp", "mountPath": "/tmp"}])
    pod["spec"]["volumes"] = [{"name": "examples", "hostPath": {"path": str(examples),
                                                                "type": "Directory"}},
                              {"name": "tmp", "emptyDir": {}}]
    k8s.CoreV1Api(cp.admin).create_namespaced_pod(namespace, pod)
    try:
        phase = wait_for_pod(cp, namespace, "validate-examples", 120)
        story = pod_story(cp, namespace, "validate-examples")
        assert phase == "Succeeded", story
        assert "0 errors" in story, story
    finally:
        cp.delete("v1", "Pod", namespace, "validate-examples", grace_period_seconds=0)


# Run in the image: every module of omegitops and of what it imports from site-packages
# has its bytecode beside it. The image sets PYTHONDONTWRITEBYTECODE, so a module without
# it is compiled again at the start of every run; pip compiles what it installs, unless
# told --no-compile.
BYTECODE_CHECK = """
import importlib, importlib.util, pathlib, sys, sysconfig
import omegitops
root = pathlib.Path(omegitops.__file__).parent
for path in sorted(root.rglob("*.py")):
    parts = ("omegitops", *path.relative_to(root).with_suffix("").parts)
    if parts[-1] != "__main__":
        importlib.import_module(".".join(parts).removesuffix(".__init__"))
installed = (str(root), sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))
sources = sorted({m.__file__ for m in list(sys.modules.values())
                  if (getattr(m, "__file__", None) or "").endswith(".py")
                  and m.__file__.startswith(installed)})
missing = [s for s in sources if not pathlib.Path(importlib.util.cache_from_source(s)).is_file()]
print(f"bytecode for {len(sources) - len(missing)} of {len(sources)} installed modules")
print("\\n".join(missing))
sys.exit(1 if missing or len(sources) < 100 else 0)
"""


def test_the_image_holds_its_modules_as_bytecode(node_cluster):
    """Each shipped run is a fresh process: the modules it imports are read as
    bytecode, as pip compiled them when the image was built, not compiled from source
    at every start (a fifth of a second of CPU for omegitops' own)."""
    cp = node_cluster
    namespace, name = "default", "bytecode"
    pod = shipped_image_pod(name, namespace, command=["python3", "-c", BYTECODE_CHECK])
    k8s.CoreV1Api(cp.admin).create_namespaced_pod(namespace, pod)
    try:
        phase = wait_for_pod(cp, namespace, name, 120)
        story = pod_story(cp, namespace, name)
        assert phase == "Succeeded", story
        assert "installed modules" in story, story
    finally:
        cp.delete("v1", "Pod", namespace, name, grace_period_seconds=0)


# -- the CronJob --------------------------------------------------------------------------


def examples_remote(cp, name: str) -> tuple[str, Path]:
    """The examples as the main branch of a repository the git daemon serves, with the
    warm-up windows cut to seconds (test_job's remote, moved under the daemon's root)."""
    made = test_job.examples_remote(cp.git.root.parent / name)
    bare = cp.git.root / f"{name}.git"
    shutil.move(made, bare)
    # The daemon runs as root and the pushes come from it: no permission to fix.
    return cp.git.url(f"{name}.git"), bare


def shipped_cronjob(cp, repo_url: str, max_seconds: str, folder: Path) -> dict:
    """The Kustomize base pipelines/cronjob installed as a user installs it: a
    kustomization of their own over the base that patches the settings ConfigMap (the
    repository's URL, the run's budget), here also putting the pod on the real node,
    applied by the real kubectl (``kubectl apply -k``). Returns the CronJob."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(PIPELINES / "cronjob", folder)],
        "patches": [
            {"patch": yaml.safe_dump({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "omegitops-settings", "namespace": JOB_NAMESPACE},
                "data": {"REPO_URL": repo_url, "MAX_SECONDS": max_seconds}})},
            {"patch": yaml.safe_dump({
                "apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "omegitops-reconcile", "namespace": JOB_NAMESPACE},
                "spec": {"jobTemplate": {"spec": {"template": {"spec": {
                    "nodeSelector": ON_THE_NODE}}}}}})},
        ],
    }))
    kubectl = [str(cp.kubectl), f"--kubeconfig={cp.admin_kubeconfig}"]
    done = subprocess.run([*kubectl, "apply", "-k", str(folder)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    built = subprocess.run([*kubectl, "kustomize", str(folder)], capture_output=True,
                           text=True, check=True).stdout
    (cronjob,) = [d for d in yaml.safe_load_all(built) if d and d["kind"] == "CronJob"]
    return cronjob


def job_from_cronjob(cronjob: dict, name: str) -> dict:
    """A Job made from the CronJob's template, as ``kubectl create job --from=cronjob/``
    makes one (no waiting for the schedule)."""
    template = copy.deepcopy(cronjob["spec"]["jobTemplate"])
    metadata = template.get("metadata") or {}
    metadata.update({"name": name, "namespace": cronjob["metadata"]["namespace"],
                     "annotations": {"cronjob.kubernetes.io/instantiate": "manual"}})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": template["spec"]}


def run_job(cp, job: dict, seconds: float) -> str:
    """Create the Job, wait until it finishes; returns its pod's story."""
    k8s.BatchV1Api(cp.admin).create_namespaced_job(JOB_NAMESPACE, job)
    return wait_for_job(cp, job["metadata"]["name"], seconds)


def wait_for_job(cp, name: str, seconds: float) -> str:
    """Wait until the Job ``name`` finishes, assert it Complete and its pod on the real
    node; returns its pod's story."""
    batch = k8s.BatchV1Api(cp.admin)
    deadline = time.monotonic() + seconds
    while True:
        cp.check()
        cp.node.check()
        status = batch.read_namespaced_job(name, JOB_NAMESPACE).status
        conditions = {c.type: c.status for c in status.conditions or []}
        if conditions.get("Complete") == "True" or conditions.get("Failed") == "True":
            break
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    pods = k8s.CoreV1Api(cp.admin).list_namespaced_pod(
        JOB_NAMESPACE, label_selector=f"job-name={name}").items
    story = "\n".join(pod_story(cp, JOB_NAMESPACE, p.metadata.name) for p in pods)
    assert conditions.get("Complete") == "True", (
        f"job {name}: {conditions or 'still running'}\n{story}")
    (pod,) = pods
    assert pod.spec.node_name == NODE_NAME
    return story


@pytest.fixture
def examples_in_node_cluster(node_cluster):
    """The examples in the node cluster's API (test_job's), and the Secret the shipped
    jobs read git credentials from (the git daemon needs none)."""
    cp = node_cluster
    if not cp.ome_crds:
        pytest.skip("OME's CRDs are not here (../shared/ome/crds is absent)")
    test_job.put_examples(cp)
    cp.apply({"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "omegitops-git", "namespace": JOB_NAMESPACE},
              "stringData": {"username": "omegitops", "token": "unused-by-git-daemon"}})
    yield cp, test_job.example_namespaces()
    remove_scheduled_runs(cp)
    test_job.remove_examples(cp)


CRONJOB = "omegitops-reconcile"
FOREGROUND = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}


def remove_scheduled_runs(cp) -> None:
    """The shipped CronJob goes, with the Jobs it started and their pods, and then the
    Lease: the tests after this one share the cluster, and a run the schedule started
    (every 5 minutes) held the Lease when an Argo workflow's began, which then did
    nothing."""
    cp.delete("batch/v1", "CronJob", JOB_NAMESPACE, CRONJOB, body=FOREGROUND)
    started = [job["metadata"]["name"] for job in cp.list("batch/v1", "Job", JOB_NAMESPACE)
               if any(owner["kind"] == "CronJob" and owner["name"] == CRONJOB
                      for owner in job["metadata"].get("ownerReferences") or [])]
    for name in started:
        cp.delete("batch/v1", "Job", JOB_NAMESPACE, name, body=FOREGROUND)
    cp.wait_for(lambda: not any(cp.get("batch/v1", "Job", JOB_NAMESPACE, name)
                                for name in started), 180, "the scheduled runs to go")
    cp.delete("coordination.k8s.io/v1", "Lease", JOB_NAMESPACE, "omegitops")


def test_the_shipped_cronjob_brings_the_examples_to_ready_and_pushes_its_report(
        examples_in_node_cluster, tmp_path):
    """The Kustomize base as shipped (its Namespace, CRD, RBAC, settings and CronJob),
    configured by one patch of its settings ConfigMap."""
    cp, namespaces = examples_in_node_cluster
    url, remote = examples_remote(cp, "examples")
    cronjob = shipped_cronjob(cp, url, max_seconds="240", folder=tmp_path / "overlay")

    story = run_job(cp, job_from_cronjob(cronjob, "omegitops-manual-1"), seconds=420)

    replicas = cp.list("ome.io/v1beta1", "InferenceReplica")
    assert replicas, f"no InferenceReplica was written\n{story}"
    for replica in replicas:
        status, spec = replica["status"], replica["spec"]
        assert status["readyReplicas"] == spec["replicas"], (
            f"{replica['metadata']['name']}: {status}\n{story}")
    pods = [p for ns in namespaces for p in cp.list("v1", "Pod", ns)]
    assert pods and all(p["spec"]["nodeName"] != NODE_NAME for p in pods), \
        "the fleet's pods belong on KWOK's GPU nodes"
    assert all(any(c["type"] == "Ready" and c["status"] == "True"
                   for c in p["status"]["conditions"]) for p in pods)
    # main is protected (test_job.protect_main): the report went to its own branch.
    assert len(git("log", "--format=%s", "main", cwd=remote).splitlines()) == 1
    log = git("log", "--format=%s", test_job.REPORT_BRANCH, cwd=remote).splitlines()
    assert len(log) == 1, log
    assert git("show", f"{test_job.REPORT_BRANCH}:status/status.json", cwd=remote)

    # The next scheduled run finds nothing to do and writes nothing.
    run_job(cp, job_from_cronjob(cronjob, "omegitops-manual-2"), seconds=300)
    assert git("log", "--format=%s", test_job.REPORT_BRANCH, cwd=remote).splitlines() == log
