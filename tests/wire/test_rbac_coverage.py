"""Every API request omegitops makes is granted by ``pipelines/rbac-requirements.yaml``,
and every permission there is used.

One scenario on the HTTP double, through the CLI as the job runs it: reconcile the
examples (twice), then let pods start (the double has no kubelet: ``_kubelet`` below
plays its part), have a Service drift, scale a gang down, update a single-pod
service's image in place, and run every read command (``get irep``, ``instance
list|status``, ``events``, ``reconcile --report-dir``). The request log then gives
the (apiGroup, resource, verb, namespace, name) of each request:

* each must be allowed by a ``clusterWide`` rule (any namespace) or, in the job's
  own namespace only, by a ``namespaced`` rule, honouring ``resourceNames``;
* each (rule, verb) of the requirements must be used by at least one request, or
  be in ``NOT_EXERCISED`` below with the reason.

The double serves InferenceServices (under OME's own CRD when ``../shared/ome`` is
there) holding the examples' services, as a cluster with OME installed: Events then
carry the service's uid (one GET each) and its status gets the totals (a patch the
released CRD drops, so it is tried once per run).

Discovery (``GET /api``, ``/apis``, ``/apis/{group}/{version}``) is a non-resource
URL that every authenticated user may read (``system:discovery``), and
SelfSubjectAccessReviews may be created by every authenticated user
(``system:basic-user``): no rule needed for either.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from apiserver import POD_GROUPS, Request
from wire_helpers import EXAMPLES, REPO_ROOT, serve_inference_services

from omegitops.cluster.kube.access import (
    INFERENCE_SERVICES,
    PASS,
    PODGROUPS,
    PRUNE,
    REVIEW_PATH,
    Permission,
)
from omegitops.cluster.times import format_time
from omegitops.lifecycle.templates import SERVING_GATE

REQUIREMENTS = REPO_ROOT / "pipelines" / "rbac-requirements.yaml"

# (scope, apiGroup, resource, verb) of requirements that the scenario cannot reach,
# with the reason. Keep it empty unless a path truly cannot run against the double;
# every entry is a permission that no test shows to be needed.
NOT_EXERCISED: dict[tuple[str, str, str, str], str] = {}


@dataclass(frozen=True)
class Call:
    """One resource request, as RBAC sees it."""

    group: str
    resource: str  # with "/subresource" when there is one
    verb: str
    namespace: str | None
    name: str | None  # None for list and create: RBAC has no name to check then


# /api/v1/... or /apis/{group}/{version}/..., then [namespaces/{ns}/]{plural}[/{name}[/{sub}]]
PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/(?P<namespace>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def as_call(request: Request) -> Call | None:
    """The RBAC view of a logged request; None for discovery (non-resource URLs) and
    access reviews, which every authenticated user may make."""
    if request.verb == "discovery" or request.path == REVIEW_PATH:
        return None
    match = PATH.match(request.path)
    assert match and request.verb != "unknown", f"unroutable request {request}"
    resource = match["plural"] + (f"/{match['sub']}" if match["sub"] else "")
    name = match["name"] if request.verb not in ("list", "create") else None
    return Call(match["group"] or "", resource, request.verb, match["namespace"], name)


def requirements() -> dict:
    return yaml.safe_load(REQUIREMENTS.read_text(encoding="utf-8"))


def matching_rules(call: Call, need: dict) -> list[tuple[str, int]]:
    """(scope, index) of every rule that allows ``call``."""
    own_namespace = need["serviceAccount"]["namespace"]
    found = []
    for scope in ("clusterWide", "namespaced"):
        if scope == "namespaced" and call.namespace != own_namespace:
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


# -- the stand-in kubelet, and editing the repository copy ------------------------------


def _kubelet(api) -> None:
    """Run every pod: phase Running, containers ready on the images they ask for, and
    Ready when every readiness gate is True, as the kubelet reports it."""
    stamp = format_time(int(time.time()) - 1)
    for pod in api.objects("Pod"):
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue

        def run(obj: dict) -> None:
            status = obj.setdefault("status", {})
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            gates = [g["conditionType"] for g in obj["spec"].get("readinessGates") or []]
            gated = all(conditions.get(g, {}).get("status") == "True" for g in gates)
            for kind, ok in (("PodScheduled", True), ("Initialized", True),
                             ("ContainersReady", True), ("Ready", gated)):
                want = "True" if ok else "False"
                if conditions.get(kind, {}).get("status") != want:
                    conditions[kind] = {"type": kind, "status": want,
                                        "lastTransitionTime": stamp}
            status.update(phase="Running", conditions=list(conditions.values()),
                          containerStatuses=[
                              {"name": c["name"], "image": c["image"], "ready": True,
                               "started": True, "restartCount": 0,
                               "state": {"running": {"startedAt": stamp}}}
                              for c in obj["spec"]["containers"]])

        api.modify("Pod", meta["namespace"], meta["name"], run)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new), encoding="utf-8")


# -- the scenario ---------------------------------------------------------------------


@pytest.fixture
def scenario(api, cli, monkeypatch, tmp_path) -> list[Request]:
    """Run the scenario; returns every request it made."""
    need = requirements()
    monkeypatch.setenv("OMEGITOPS_KUBE_API", api.url)
    # The Lease lives in the job's own namespace, where the Role is.
    monkeypatch.setenv("OMEGITOPS_NAMESPACE", need["serviceAccount"]["namespace"])
    api.serve(POD_GROUPS)  # so that gangs get PodGroups
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    serve_inference_services(api, repo)
    log: list[Request] = []

    def run(*args: str) -> str:
        code, out, err = cli(*args, "--cluster", "kube")
        assert code == 0, err
        log.extend(api.requests)
        api.clear_log()
        return out

    def reconcile(passes: int = 1) -> None:
        for _ in range(passes):
            _kubelet(api)
            run("reconcile", "--repo", str(repo))

    # Create everything, then a pass that has nothing to do.
    run("reconcile", "--repo", str(repo))
    run("reconcile", "--repo", str(repo))
    # Pods start: omegitops puts them in rotation (the serving gate) and they become Ready.
    reconcile(passes=3)
    assert any(c.get("type") == SERVING_GATE and c["status"] == "True"
               for p in api.objects("Pod") for c in p["status"]["conditions"])
    # Someone edits a Service omegitops owns: the owned fields are put back.
    api.modify("Service", "qwen3-0-6b", "qwen3-0-6b-engine",
               lambda svc: svc["spec"].update(selector={"app": "hijacked"}))
    reconcile()
    assert api.get("Service", "qwen3-0-6b", "qwen3-0-6b-engine")["spec"]["selector"] != {
        "app": "hijacked"}
    # Scale a gang down: unroute, delete its pods, then its PodGroup.
    deepseek = repo / "services" / "deepseek-r1" / "deepseek-r1.yaml"
    _edit(deepseek, "minReplicas: 2\n    maxReplicas: 2", "minReplicas: 1\n    maxReplicas: 1")
    reconcile(passes=4)
    assert not [p for p in api.objects("Pod")
                if p["metadata"]["name"].startswith("deepseek-r1-engine-1-")]
    # ...and up again: the same Instance is created again, so its events repeat.
    _edit(deepseek, "minReplicas: 1\n    maxReplicas: 1", "minReplicas: 2\n    maxReplicas: 2")
    reconcile(passes=4)
    # An image-only change, in place, with no revision history kept: the pods are
    # patched and the old ControllerRevision goes once nothing uses it.
    qwen = repo / "services" / "qwen3-0-6b" / "qwen3-0-6b.yaml"
    _edit(qwen, "    maxReplicas: 2\n",
          "    maxReplicas: 2\n    lifecycle:\n      updateStrategy:\n"
          "        type: InPlaceIfPossible\n")
    _edit(repo / "ome-values.yaml", "revisionHistoryLimit: 10", "revisionHistoryLimit: 0")
    _edit(repo / "runtimes" / "srt-qwen3-0-6b.yaml",
          "image: docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64",
          "image: docker.io/lmsysorg/sglang:v0.5.6-cu129-amd64")
    reconcile(passes=6)
    # A service removed from the repository, torn down with --prune: its pods go,
    # then its Services, revisions and InferenceReplica.
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    for _ in range(6):
        _kubelet(api)
        api.finish_terminating()
        run("reconcile", "--repo", str(repo), "--prune")
    assert not [r for r in api.objects("InferenceReplica")
                if r["metadata"]["name"] == "llama-chat-engine"]
    # The read commands, and the report.
    run("get", "irep")
    run("instance", "list", "qwen3-0-6b", "-n", "qwen3-0-6b")
    run("instance", "status", "qwen3-0-6b", "-n", "qwen3-0-6b", "0")
    run("events")
    run("reconcile", "--repo", str(repo), "--report-dir", str(tmp_path / "status"))
    assert (tmp_path / "status").is_dir()
    return log


def _rules(need: dict):
    """(scope, index, rule) of every rule the job's own ServiceAccount is bound to."""
    for scope in ("clusterWide", "namespaced"):
        for index, rule in enumerate(need[scope]):
            yield scope, index, rule


def test_requests_and_requirements_match(scenario):
    """One scenario, both directions: nothing refused, nothing granted for nothing."""
    need = requirements()
    calls = {call for request in scenario if (call := as_call(request)) is not None}
    refused = sorted({(c.group, c.resource, c.verb, c.namespace, c.name)
                      for c in calls if not matching_rules(c, need)})
    assert refused == [], "requests that rbac-requirements.yaml does not grant"

    used = {(scope, index, call.verb) for call in calls
            for scope, index in matching_rules(call, need)}
    unused = [(scope, rule["apiGroup"], rule["resource"], verb)
              for scope, index, rule in _rules(need) for verb in rule["verbs"]
              if (scope, index, verb) not in used]
    unexplained = [key for key in unused if key not in NOT_EXERCISED]
    assert unexplained == [], (
        "granted but never requested: drop them, or explain them in NOT_EXERCISED")
    # An explanation that no longer applies goes, so that the list stays true.
    assert sorted(NOT_EXERCISED) == sorted(unused), "NOT_EXERCISED lists requests that happen"
    # The scenario did what it is for: the paths this file exists to cover.
    verbs = {(c.group, c.resource, c.verb) for c in calls}
    assert {("", "pods", "delete"), ("", "pods", "patch"), ("", "pods/status", "patch"),
            ("", "services", "update"), ("", "events", "patch"),
            ("apps", "controllerrevisions", "delete"),
            ("scheduling.x-k8s.io", "podgroups", "delete"), ("", "services", "delete"),
            ("ome.io", "inferencereplicas", "delete"), ("ome.io", "inferenceservices", "get"),
            ("ome.io", "inferenceservices/status", "patch")} <= verbs
    # The run asked about its permissions once, before its first write.
    reviews = [i for i, r in enumerate(scenario) if r.path == REVIEW_PATH]
    first_write = next(i for i, r in enumerate(scenario)
                       if r.verb in ("create", "update", "patch", "delete")
                       and r.path != REVIEW_PATH and "/leases" not in r.path)
    assert reviews and reviews[0] < first_write


def test_the_permissions_a_run_asks_about_are_granted():
    """What the backend checks before writing is what the requirements grant."""
    need = requirements()
    for permission in (*PASS, *PODGROUPS, *INFERENCE_SERVICES, *PRUNE):
        assert isinstance(permission, Permission)
        resource = permission.resource + (
            f"/{permission.subresource}" if permission.subresource else "")
        call = Call(permission.group, resource, permission.verb, "any", "any")
        assert [scope for scope, _ in matching_rules(call, need)] == ["clusterWide"], call


def test_the_path_mapping():
    def call(method: str, path: str, verb: str) -> Call | None:
        return as_call(Request(method, path, {}, verb))

    assert call("GET", "/apis/scheduling.x-k8s.io/v1alpha1", "discovery") is None
    assert call("GET", "/api/v1/pods", "list") == Call("", "pods", "list", None, None)
    assert call("PATCH", "/api/v1/namespaces/a/pods/p/status", "patch") == Call(
        "", "pods/status", "patch", "a", "p")
    assert call("POST", "/apis/coordination.k8s.io/v1/namespaces/omegitops/leases",
                "create") == Call("coordination.k8s.io", "leases", "create", "omegitops", None)
    need = requirements()
    lease = Call("coordination.k8s.io", "leases", "update", "omegitops", "omegitops")
    assert matching_rules(lease, need)
    other = Call("coordination.k8s.io", "leases", "update", "omegitops", "other")
    assert not matching_rules(other, need), "resourceNames"
    assert not matching_rules(Call("coordination.k8s.io", "leases", "get", "elsewhere",
                                   "omegitops"), need), "a Role grants in its namespace only"
