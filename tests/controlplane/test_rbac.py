"""The RBAC of ``pipelines/`` measured on the real API server, in both directions.

One scenario through the command line, as the job's ServiceAccount: the examples
brought up (with their InferenceServices in the API and the PodGroup CRD
installed), a pod taken out of rotation by hand, a Service edited by hand, a gang scaled down and up, an in-place
image change with no revision history kept, a service removed with ``--prune``,
and every read command. The API server's audit log then gives each request the
account made, as RBAC saw it:

* each must be allowed by a ``clusterWide`` rule of ``rbac-requirements.yaml``
  (any namespace) or, in the job's own namespace, by a ``namespaced`` rule,
  honouring ``resourceNames``, and none was refused (403);
* each (rule, verb) of the requirements must be used by some request, or be in
  ``NOT_EXERCISED`` with the reason.

(``tests/project/test_pipelines.py`` holds ``rbac.yaml`` to the requirements.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import JOB_NAMESPACE, JOB_USER, REPO_ROOT
from kubernetes import client as k8s
from test_job import (
    LEASE,
    example_namespaces,
    examples_with_short_windows,
    run_job,
    wait_for_terminating_namespaces,
)

REQUIREMENTS = REPO_ROOT / "schemas" / "rbac-requirements.yaml"

# (scope, apiGroup, resource, verb) granted but not reached by the scenario, with the
# reason. Every entry is a permission no test shows to be needed: keep it empty.
NOT_EXERCISED: dict[tuple[str, str, str, str], str] = {}
READ_ONLY = {"get", "list", "watch"}


@dataclass(frozen=True)
class Call:
    """One resource request, as RBAC sees it."""

    group: str
    resource: str  # with "/subresource" when there is one
    verb: str
    namespace: str | None
    name: str | None  # None for list and create: RBAC has no name to check then


def as_call(event: dict) -> Call | None:
    """The RBAC view of an audit event; None for non-resource URLs (discovery) and
    access reviews, which every authenticated user may make."""
    ref = event.get("objectRef")
    if ref is None or ref.get("resource") in ("selfsubjectaccessreviews",
                                              "selfsubjectrulesreviews"):
        return None
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    name = ref.get("name") if event["verb"] not in ("list", "create") else None
    return Call(ref.get("apiGroup") or "", resource, event["verb"], ref.get("namespace"), name)


def requirements() -> dict:
    return yaml.safe_load(REQUIREMENTS.read_text(encoding="utf-8"))


def matching_rules(call: Call, need: dict) -> list[tuple[str, int]]:
    """(scope, index) of every rule that allows ``call``."""
    found = []
    for scope in ("clusterWide", "namespaced"):
        if scope == "namespaced" and call.namespace != need["serviceAccount"]["namespace"]:
            continue  # a Role grants nothing outside its namespace
        for index, rule in enumerate(need[scope]):
            names = rule.get("resourceNames")
            if (rule["apiGroup"], rule["resource"]) != (call.group, call.resource):
                continue
            if call.verb not in rule["verbs"]:
                continue
            if names is not None and call.name not in names:
                continue
            found.append((scope, index))
    return found


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture
def audited(ome_crds, tmp_path):
    """Run the scenario; returns the audit events of every request the account made."""
    cp = ome_crds
    wait_for_terminating_namespaces(cp)
    for namespace in example_namespaces():
        cp.create_namespace(namespace, wait=True)
    repo = examples_with_short_windows(tmp_path)
    cp.apply_files(sorted((repo / "runtimes").glob("*.yaml"))
                   + sorted((repo / "services").rglob("*.yaml")), validation="Ignore")
    # As on the job's first run ever: the Lease does not exist yet, and is created.
    cp.delete(*LEASE)
    start = cp.audit_offset()

    def run(*args: str) -> str:
        done = run_job(cp, ["omegitops", *args, "--cluster", "kube"], tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def reconcile(*more: str) -> None:
        run("reconcile", "--repo", str(repo), "--until-idle", "--max-seconds", "120", *more)

    reconcile()
    # A pass with nothing to do.
    run("reconcile", "--repo", str(repo))
    # Someone takes a pod out of rotation by hand: one pass (no --until-idle, so no
    # watch) reads the pod and puts it back.
    core = k8s.CoreV1Api(cp.admin)
    pod = next(p for p in core.list_namespaced_pod("qwen3-0-6b").items
               if p.metadata.name.startswith("qwen3-0-6b-engine-"))
    core.patch_namespaced_pod_status(pod.metadata.name, "qwen3-0-6b", {"status": {
        "conditions": [{"type": "ome.io/serving", "status": "False", "reason": "ByHand"}]}})
    run("reconcile", "--repo", str(repo))
    serving = [c for c in core.read_namespaced_pod(pod.metadata.name, "qwen3-0-6b")
               .status.conditions if c.type == "ome.io/serving"]
    assert serving and serving[0].status == "True"
    # Someone edits a Service omegitops owns: the owned fields are put back.
    k8s.CoreV1Api(cp.admin).patch_namespaced_service(
        "qwen3-0-6b-engine", "qwen3-0-6b",
        [{"op": "replace", "path": "/spec/selector", "value": {"app": "hijacked"}}])
    reconcile()
    assert cp.get("v1", "Service", "qwen3-0-6b", "qwen3-0-6b-engine")["spec"]["selector"] \
        != {"app": "hijacked"}
    # A gang scaled down (unrouted, its pods and PodGroup deleted), then up again (the
    # same Instance is created again, so its events repeat).
    deepseek = repo / "services" / "deepseek-r1" / "deepseek-r1.yaml"
    edit(deepseek, "minReplicas: 2\n    maxReplicas: 2", "minReplicas: 1\n    maxReplicas: 1")
    reconcile()
    assert not [p for p in cp.list("v1", "Pod", "deepseek-r1")
                if p["metadata"]["name"].startswith("deepseek-r1-engine-1-")]
    edit(deepseek, "minReplicas: 1\n    maxReplicas: 1", "minReplicas: 2\n    maxReplicas: 2")
    reconcile()
    # An image-only change in place, with no revision history kept: the pods are patched
    # and the old ControllerRevision goes once nothing uses it. Migrations turned off in
    # the same change: the component's PodDisruptionBudget is updated to let a drain
    # evict (maxUnavailable) instead of waiting for them.
    qwen = repo / "services" / "qwen3-0-6b" / "qwen3-0-6b.yaml"
    edit(qwen, "    maxReplicas: 2\n",
         "    maxReplicas: 2\n    lifecycle:\n      updateStrategy:\n"
         "        type: InPlaceIfPossible\n        rollingUpdate:\n          maxUnavailable: 1\n"
         "      migrationPolicy:\n        mode: Never\n")
    edit(repo / "ome-values.yaml", "revisionHistoryLimit: 10", "revisionHistoryLimit: 0")
    edit(repo / "runtimes" / "srt-qwen3-0-6b.yaml",
         "image: docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64",
         "image: docker.io/lmsysorg/sglang:v0.5.6-cu129-amd64")
    reconcile()
    # A stranger's pod (not labelled as omegitops') holds the name of the Instance a
    # scale-up creates: the create is refused, the pod read by name and named, never
    # taken over. Then it goes, and the Instance is made.
    stranger = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "qwen3-0-6b-engine-2-default-0", "namespace": "qwen3-0-6b"},
                "spec": {"containers": [{"name": "main", "image": "busybox:1"}],
                         "schedulingGates": [{"name": "omegitops.test/hold"}]}}
    cp.apply(stranger)
    edit(qwen, "minReplicas: 2\n    maxReplicas: 2", "minReplicas: 3\n    maxReplicas: 3")
    refused = run_job(cp, ["omegitops", "reconcile", "--repo", str(repo), "--cluster", "kube"],
                      tmp_path)
    assert "NameTaken" in refused.stderr or "is held by" in refused.stderr or \
        "not omegitops" in refused.stderr, refused.stderr[-2000:]
    core.delete_namespaced_pod("qwen3-0-6b-engine-2-default-0", "qwen3-0-6b",
                               grace_period_seconds=0)
    cp.wait_for(lambda: cp.get("v1", "Pod", "qwen3-0-6b", "qwen3-0-6b-engine-2-default-0")
                is None, 60, "the stranger's pod gone")
    edit(qwen, "minReplicas: 3\n    maxReplicas: 3", "minReplicas: 2\n    maxReplicas: 2")
    reconcile()
    # A service removed from the repository, torn down with --prune.
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    reconcile("--prune")
    assert cp.get("ome.io/v1beta1", "InferenceReplica", "llama-demo", "llama-chat-engine") \
        is None
    # The read commands, and the report.
    run("get", "irep")
    run("instance", "list", "qwen3-0-6b", "-n", "qwen3-0-6b")
    run("instance", "status", "qwen3-0-6b", "-n", "qwen3-0-6b", "0")
    run("events")
    run("reconcile", "--repo", str(repo), "--report-dir", str(tmp_path / "status"))
    yield cp.audit_events(JOB_USER, since=start)
    for namespace in example_namespaces():
        cp.delete("v1", "Namespace", None, namespace)


def test_requests_and_requirements_match_on_the_real_server(audited):
    need = requirements()
    refused = sorted({(e["verb"], e["requestURI"]) for e in audited
                      if e.get("responseStatus", {}).get("code") == 403})
    assert refused == [], "requests the real API server refused"
    calls = {call for event in audited if (call := as_call(event)) is not None}
    beyond = sorted({(c.group, c.resource, c.verb, c.namespace, c.name)
                     for c in calls if not matching_rules(c, need)})
    assert beyond == [], "requests that rbac-requirements.yaml does not grant"

    used = {(scope, index, call.verb) for call in calls
            for scope, index in matching_rules(call, need)}
    unused = [(scope, rule["apiGroup"], rule["resource"], verb)
              for scope in ("clusterWide", "namespaced")
              for index, rule in enumerate(need[scope]) for verb in rule["verbs"]
              if (scope, index, verb) not in used]
    unexplained = [key for key in unused if key not in NOT_EXERCISED]
    assert unexplained == [], "granted but never requested: drop them, or explain them"
    assert sorted(NOT_EXERCISED) == sorted(unused), "NOT_EXERCISED lists requests that happen"

    # The run asked about its permissions before its first write.
    reviews = [i for i, e in enumerate(audited)
               if (e.get("objectRef") or {}).get("resource") in (
                   "selfsubjectaccessreviews", "selfsubjectrulesreviews")]
    first_write = next(i for i, e in enumerate(audited)
                       if e["verb"] not in READ_ONLY and as_call(e) is not None
                       and as_call(e).resource != "leases")
    assert reviews and reviews[0] < first_write


def test_the_audit_mapping_names_what_rbac_checks():
    event = {"verb": "patch", "objectRef": {"resource": "pods", "subresource": "status",
                                            "namespace": "a", "name": "p", "apiVersion": "v1"}}
    assert as_call(event) == Call("", "pods/status", "patch", "a", "p")
    assert as_call({"verb": "get", "requestURI": "/apis"}) is None
    need = requirements()
    lease = Call("coordination.k8s.io", "leases", "update", JOB_NAMESPACE, "omegitops")
    assert matching_rules(lease, need)
    assert not matching_rules(Call("coordination.k8s.io", "leases", "update", JOB_NAMESPACE,
                                   "other"), need), "resourceNames"
    assert not matching_rules(Call("coordination.k8s.io", "leases", "get", "elsewhere",
                                   "omegitops"), need), "a Role grants in its namespace only"
