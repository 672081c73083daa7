"""Argo Workflows for real: ``pipelines/argo/`` applied unchanged to a cluster whose
workflow-controller and executor are built from Argo's own module, each step a pod
the real node's kubelet runs from the project's image (argoworkflows.py).

A Workflow made from the CronWorkflow's spec (no waiting for the schedule) runs the
one-job template; a sharded run over the examples' three namespaces runs N shard
pods, each under its own Lease, passes their reports through the S3 artifact
repository, and merges them into one commit.
"""

from __future__ import annotations

import copy
import json
import re
import time

import pytest
import test_shipped_job
import yaml
from argoworkflows import wait_for_workflow, workflow_story
from conftest import JOB_NAMESPACE, PIPELINES
from kubernetes import client as k8s
from kubernetes.dynamic.exceptions import DynamicApiError
from realnode import NODE_NAME
from test_shipped_job import ON_THE_NODE, examples_remote, git

pytestmark = pytest.mark.node

ARGO = PIPELINES / "argo"
# The examples in the node cluster's API (test_shipped_job's fixture).
examples_in_node_cluster = test_shipped_job.examples_in_node_cluster
REPORT_BRANCH = test_shipped_job.test_job.REPORT_BRANCH
# Argo's message for a template its controller's cache does not hold (yet).
UNSEEN_TEMPLATE = re.compile(r'workflowtemplates\.argoproj\.io "[^"]+" not found')
TEMPLATE_SEEN_SECONDS = 120


def document(path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.fixture
def argo_fleet(argo_cluster, examples_in_node_cluster):
    """The examples in the API, and pipelines/argo/ (the executor's RBAC included) and
    the settings ConfigMap applied as shipped."""
    cp, namespaces = examples_in_node_cluster
    # The settings ConfigMap the CronWorkflow's parameters are read from, and the
    # executor's RBAC, templates and CronWorkflow of pipelines/argo/.
    cron = ARGO / "cronworkflow.yaml"
    cp.apply_files([PIPELINES / "common" / "settings.yaml",
                    *sorted(set(ARGO.glob("*.yaml")) - {cron})])
    # The CronWorkflow suspended, as `argo cron suspend` leaves it: a run it
    # scheduled on a five-minute mark would clone the settings' placeholder URL
    # and hold the mutex both templates share while the tests' own runs wait.
    suspended = document(cron)
    suspended["spec"]["suspend"] = True
    cp.apply(suspended)
    cp.argo.s3_secret(JOB_NAMESPACE)
    return cp, namespaces


def submit(cp, spec: dict, name: str, parameters: dict[str, str]) -> dict:
    """Create a Workflow of ``spec`` with its parameters set, its pods on the real
    node (the Workflow's own nodeSelector: the templates stay as shipped); its status
    once the controller has given it a phase."""
    spec = copy.deepcopy(spec)
    arguments = spec.setdefault("arguments", {}).setdefault("parameters", [])
    given = dict(parameters)
    for parameter in arguments:
        if parameter["name"] in given:
            parameter.pop("valueFrom", None)  # in place of the settings ConfigMap's
            parameter["value"] = given.pop(parameter["name"])
    arguments += [{"name": k, "value": v} for k, v in given.items()]
    spec["nodeSelector"] = ON_THE_NODE
    workflow = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"name": name, "namespace": JOB_NAMESPACE}, "spec": spec}
    # The controller resolves a workflowTemplateRef from its informer's cache, which
    # may not hold the template applied a moment ago on a loaded machine: the
    # Workflow then errors at once, before any pod. Submit again until it is seen.
    deadline = time.monotonic() + TEMPLATE_SEEN_SECONDS
    while True:
        cp.apply(workflow)
        status = cp.wait_for(lambda: started(cp, name), 120, f"workflow {name} to start")
        if not UNSEEN_TEMPLATE.search(status.get("message", "")) \
                or time.monotonic() > deadline:
            return status
        cp.delete("argoproj.io/v1alpha1", "Workflow", JOB_NAMESPACE, name)
        cp.wait_for(lambda: cp.get("argoproj.io/v1alpha1", "Workflow", JOB_NAMESPACE,
                                   name) is None, 60, f"workflow {name} to go")
        time.sleep(2)


def started(cp, name: str) -> dict | None:
    """The Workflow's status once the controller has given it a phase."""
    workflow = cp.get("argoproj.io/v1alpha1", "Workflow", JOB_NAMESPACE, name) or {}
    status = workflow.get("status") or {}
    return status if status.get("phase") else None


def finished(cp, name: str, seconds: float) -> dict:
    workflow = wait_for_workflow(cp, JOB_NAMESPACE, name, seconds,
                                 checks=(cp.node.check, cp.argo.check))
    assert workflow["status"].get("phase") == "Succeeded", \
        workflow_story(cp, workflow) + others(cp, name)
    return workflow


def others(cp, name: str) -> str:
    """The namespace's other Workflows and their phases: which one holds the mutex."""
    lines = []
    for workflow in cp.list("argoproj.io/v1alpha1", "Workflow", JOB_NAMESPACE):
        status = workflow.get("status") or {}
        if workflow["metadata"]["name"] != name:
            lines.append(f"\n{workflow['metadata']['name']}: {status.get('phase')} "
                         f"{status.get('message', '')}")
    return "".join(lines) or "\n(no other workflow)"


def step_pods(cp, workflow: str) -> dict[str, list]:
    """The workflow's pods by template name."""
    pods = k8s.CoreV1Api(cp.admin).list_namespaced_pod(
        JOB_NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={workflow}").items
    by_template: dict[str, list] = {}
    for pod in pods:
        template = pod.metadata.annotations.get("workflows.argoproj.io/node-name", "")
        name = next((c.name for c in pod.spec.containers if c.name == "main"), None)
        assert name, pod.metadata.name
        kind = "merge" if ".merge" in template else "shard" if ".shard" in template else template
        by_template.setdefault(kind, []).append(pod)
    return by_template


def test_a_workflow_from_the_cronworkflow_reconciles_and_pushes(argo_fleet):
    cp, _ = argo_fleet
    url, remote = examples_remote(cp, "argo-one")
    cron = document(ARGO / "cronworkflow.yaml")
    submit(cp, cron["spec"]["workflowSpec"], "omegitops-reconcile-manual",
           {"repo-url": url, "max-seconds": "240"})
    workflow = finished(cp, "omegitops-reconcile-manual", 420)

    pods = k8s.CoreV1Api(cp.admin).list_namespaced_pod(
        JOB_NAMESPACE, label_selector="workflows.argoproj.io/workflow="
        "omegitops-reconcile-manual").items
    assert pods and all(p.spec.node_name == NODE_NAME for p in pods)
    for replica in cp.list("ome.io/v1beta1", "InferenceReplica"):
        assert replica["status"]["readyReplicas"] == replica["spec"]["replicas"], replica
    pushed = git("for-each-ref", "--format=%(refname)", f"refs/heads/{REPORT_BRANCH}",
                 cwd=remote)
    assert pushed, "no report branch was pushed\n" + workflow_story(cp, workflow) + \
        "".join(f"\n--- {pod.metadata.name}:\n{main_log(cp, pod)}" for pod in pods)
    assert len(git("log", "--format=%s", REPORT_BRANCH, cwd=remote).splitlines()) == 1
    assert git("show", f"{REPORT_BRANCH}:status/status.json", cwd=remote)
    # The job's namespace enforces Pod Security `restricted`: Argo's pod was admitted
    # with the executor pipelines/README.md documents, and is refused without it.
    assert_restricted_needs_the_documented_executor(cp, pods[0])


def main_log(cp, pod) -> str:
    """The last lines its main container wrote (what a failure needs to be read)."""
    try:
        return k8s.CoreV1Api(cp.admin).read_namespaced_pod_log(
            pod.metadata.name, JOB_NAMESPACE, container="main", tail_lines=40)
    except k8s.ApiException as err:
        return f"(no log: {err.reason})"


def assert_restricted_needs_the_documented_executor(cp, pod) -> None:
    labels = cp.get("v1", "Namespace", None, JOB_NAMESPACE)["metadata"]["labels"]
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"
    built = cp.get("v1", "Pod", JOB_NAMESPACE, pod.metadata.name)
    spec = copy.deepcopy(built["spec"])
    spec.pop("nodeName", None)
    executors = [c for c in spec.get("initContainers", []) + spec["containers"]
                 if c["name"] in ("init", "wait")]
    assert {c["name"] for c in executors} == {"init", "wait"}, spec
    for container in executors:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        del container["securityContext"]
    bare = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": f"{pod.metadata.name}-bare", "namespace": JOB_NAMESPACE}}
    with pytest.raises(DynamicApiError) as refused:
        cp.apply(bare, dry_run=True, validation="Ignore")
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403, message
    assert 'violates PodSecurity "restricted:latest"' in message, message
    assert 'allowPrivilegeEscalation != false (containers "init", "wait"' in message, message
    assert 'unrestricted capabilities (containers "init", "wait"' in message, message


def test_a_sharded_run_fans_out_passes_reports_through_s3_and_commits_once(argo_fleet):
    cp, namespaces = argo_fleet
    url, remote = examples_remote(cp, "argo-sharded")
    shards = len(namespaces)
    template = document(ARGO / "workflowtemplate-sharded.yaml")
    spec = {"workflowTemplateRef": {"name": template["metadata"]["name"]}}
    submit(cp, spec, "omegitops-sharded-manual",
           {"repo-url": url, "max-seconds": "240", "shards": str(shards)})
    workflow = finished(cp, "omegitops-sharded-manual", 600)

    pods = step_pods(cp, "omegitops-sharded-manual")
    story = workflow_story(cp, workflow)
    assert len(pods.get("shard", [])) == shards, (sorted(pods), story)
    assert len(pods.get("merge", [])) == 1, (sorted(pods), story)
    assert all(p.spec.node_name == NODE_NAME for group in pods.values() for p in group)
    # Each shard under its own Lease, released at its exit.
    for index in range(shards):
        lease = cp.get("coordination.k8s.io/v1", "Lease", JOB_NAMESPACE,
                       f"omegitops-shard-{index}")
        assert lease is not None, f"shard {index} took no Lease"
        assert not lease["spec"].get("holderIdentity"), lease["spec"]
    # The reports went through the artifact repository, one folder a shard.
    keys = cp.argo.objects()
    for index in range(shards):
        prefix = f"omegitops/omegitops-sharded-manual/reports/shard-{index}/"
        assert any(k.startswith(prefix) and k.endswith("status.json") for k in keys), keys
    # One commit: the merged report.
    log = git("log", "--format=%s", REPORT_BRANCH, cwd=remote).splitlines()
    assert len(log) == 1, log
    report = git("show", f"{REPORT_BRANCH}:status/status.json", cwd=remote)
    assert all(namespace in report for namespace in namespaces)
