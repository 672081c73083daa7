"""Watches under ``--until-idle`` on the real API server (``omegitops.cluster.kube.watches``
and ``omegitops.app.incremental``).

The job's account lists each observed kind once and watches from there: a change
made by someone else reaches the run's store and names its component; the run's
own writes are in the store before their events come back; and a rollout
under ``--until-idle`` lists each kind once in the whole run, however many passes
it makes, and plans only what changed.
"""

from __future__ import annotations

import itertools
import re
import time
from urllib.parse import parse_qsl, urlsplit

import pytest
from conftest import JOB_NAMESPACE, JOB_USER, PIPELINES
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from test_job import run_job, small_repo

from omegitops.app.passes import (
    MANAGED,
    Observation,
    observe,
    observe_keys,
    observed_kinds,
    owner_key,
)
from omegitops.cluster.base import CONTROLLER_REVISION, INFERENCE_REPLICA, POD, SERVICE
from omegitops.cluster.kube import KubeCluster
from omegitops.cluster.kube.resources import RESOURCES
from omegitops.render.templates import LABEL_COMPONENT, LABEL_ISVC
from tests.fleet import write_service

_names = itertools.count()


@pytest.fixture
def job(control_plane):
    client = k8s_config.new_client_from_config(str(control_plane.job_kubeconfig))
    cluster = KubeCluster(api_client=client, lease=False)
    yield cluster
    if cluster.watches is not None:
        cluster.watches.stop()
    client.close()


def _pod(namespace: str, name: str, component: str = "engine") -> dict:
    labels = {**MANAGED, LABEL_ISVC: "svc", LABEL_COMPONENT: component}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "main", "image": "busybox:1"}],
                     "schedulingGates": [{"name": "omegitops.test/hold"}]}}


def _names_in(cluster: KubeCluster, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.list_objects(POD, MANAGED)
            if p["metadata"]["namespace"] == namespace}


def test_a_change_by_someone_else_reaches_the_store_and_names_its_component(
        control_plane, namespace, job):
    assert job.watch(POD, MANAGED, owner_key)
    job.changed_keys()
    core = k8s.CoreV1Api(control_plane.admin)
    started = time.monotonic()
    core.create_namespaced_pod(namespace, _pod(namespace, "made-by-hand", "worker"))
    assert job.wait_for_change(20), "no watch event within 20 s"
    woke_after = time.monotonic() - started
    deadline = time.monotonic() + 10
    while "made-by-hand" not in _names_in(job, namespace) and time.monotonic() < deadline:
        job.wait_for_change(1)
    assert "made-by-hand" in _names_in(job, namespace)
    assert (namespace, "svc", "worker") in job.changed_keys()
    # Stored without server-side apply's bookkeeping, which nothing reads.
    assert all("managedFields" not in p["metadata"] for p in job.list_objects(POD, MANAGED))
    assert woke_after < 5, "waiting for a change took as long as a poll"
    # A delete by someone else leaves the store too.
    core.delete_namespaced_pod("made-by-hand", namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 20
    while "made-by-hand" in _names_in(job, namespace) and time.monotonic() < deadline:
        job.wait_for_change(1)
    assert "made-by-hand" not in _names_in(job, namespace)
    # Objects without the managed-by label are not watched.
    unlabelled = _pod(namespace, "not-managed")
    unlabelled["metadata"]["labels"] = {}
    core.create_namespaced_pod(namespace, unlabelled)
    time.sleep(1)
    assert "not-managed" not in _names_in(job, namespace)


def test_a_watched_list_is_read_as_a_pass_keeps_it_and_its_store_stays_whole(
        namespace, job):
    """A pass reads a watched kind cut as it keeps it (observe and observe_keys), while
    the store, and plain reads of it, keep each object whole."""
    assert all(job.watch(kind, MANAGED, owner_key) for kind in observed_kinds(job))
    job.create_pod(_pod(namespace, "kept"))
    key = (namespace, "svc", "engine")
    whole = [p for p in job.list_objects(POD, MANAGED) if p["metadata"]["name"] == "kept"]
    assert whole[0]["spec"]["containers"][0]["image"] == "busybox:1"
    assert "dnsPolicy" in whole[0]["spec"]  # defaulted by the API server, never read
    for seen in (observe(job), _observed_keys(job, key)):
        (pod,) = seen.pods[key]
        assert "dnsPolicy" not in pod["spec"]
        assert pod["spec"]["containers"] == [{"name": "main", "image": "busybox:1"}]
    assert "dnsPolicy" in job.list_keyed(POD, MANAGED, [key])[0]["spec"]


def _observed_keys(cluster: KubeCluster, key) -> Observation:
    seen = Observation()
    observe_keys(cluster, seen, {key})
    return seen


def test_the_runs_own_writes_are_in_the_store_before_their_events(namespace, job):
    assert job.watch(POD, MANAGED, owner_key)
    # Stop the watch so that nothing but the write's answer can put the pod in the store.
    watched = job.watches.get(POD, MANAGED)
    watched.stop()
    job.create_pod(_pod(namespace, "own-write"))
    assert "own-write" in _names_in(job, namespace)
    job.delete_pod(namespace, "own-write", grace_seconds=0)
    # Graceful deletion answers with the pod (deletionTimestamp set) or a Status: either
    # way the store agrees with the server's answer.
    stored = [p for p in job.list_objects(POD, MANAGED) if p["metadata"]["name"] == "own-write"]
    assert not stored or stored[0]["metadata"].get("deletionTimestamp")


def _job_requests(cp, since: int) -> list[tuple[str, str, dict]]:
    seen = []
    for event in cp.audit_events(JOB_USER, since):
        uri = urlsplit(event["requestURI"])
        seen.append((event["verb"], uri.path, dict(parse_qsl(uri.query))))
    return seen


def test_until_idle_lists_each_kind_once_and_plans_what_changed(control_plane, namespace,
                                                               tmp_path):
    """A rollout of 4 Instances, one at a time, as the job runs it: many passes, one LIST
    of each observed kind, watches for the rest, and passes that plan one component."""
    cp = control_plane
    repo = tmp_path / "repo"
    surge = {"updateStrategy": {"type": "SurgeThenDrain", "rollingUpdate": {
        "maxSurge": 1, "maxUnavailable": 0}}}
    write_service(repo, replicas=4, namespace=namespace, name="watched", lifecycle=surge,
                  env={"MODEL_REVISION": "1"})
    write_service(repo, replicas=1, namespace=namespace, name="quiet")

    def reconcile() -> str:
        done = run_job(cp, ["omegitops", "reconcile", "--repo", str(repo), "--cluster", "kube",
                            "--until-idle", "--max-seconds", "240"], tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    reconcile()
    write_service(repo, replicas=4, namespace=namespace, name="watched", lifecycle=surge,
                  env={"MODEL_REVISION": "2"})
    since = cp.audit_offset()
    log = reconcile()
    requests = _job_requests(cp, since)
    lists: dict[str, int] = {}
    watches: dict[str, int] = {}
    for verb, url, query in requests:
        plural = url.rstrip("/").split("/")[-1]
        if verb == "list":
            lists[plural] = lists.get(plural, 0) + 1
        elif verb == "watch":
            watches[plural] = watches.get(plural, 0) + 1
    for kind in (POD, INFERENCE_REPLICA, CONTROLLER_REVISION, SERVICE):
        plural = RESOURCES[kind].plural
        assert lists.get(plural) == 1, (plural, lists)
        assert watches.get(plural, 0) >= 1, (plural, watches)
    passes = re.findall(r"pass (\d+) at .*?(\d+) of (\d+) components busy(, (\d+) planned)?",
                        log)
    assert len(passes) >= 8, log[-2000:]
    # After the first pass, the quiet service is not planned again: one of two.
    assert all(planned == "1" for *_, planned in passes[1:] if planned), passes
    pods = [p for p in cp.list("v1", "Pod", namespace)
            if p["metadata"]["labels"].get(LABEL_ISVC) == "watched"
            and not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 4
    assert {e["value"] for p in pods for c in p["spec"]["containers"] for e in c.get("env", [])
            if e["name"] == "MODEL_REVISION"} == {"2"}


def _account_without_watch(cp, name: str) -> tuple[str, object]:
    """A ServiceAccount granted what pipelines/common/rbac.yaml grants, but no ``watch``: the
    README's documented fallback (a warning, and a LIST of each kind on every pass)."""
    import yaml

    documents = [d for d in yaml.safe_load_all((PIPELINES / "common" / "rbac.yaml").read_text()) if d]
    cp.apply({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": name, "namespace": JOB_NAMESPACE}})
    for doc in documents:
        if doc["kind"] in ("ClusterRole", "Role"):
            doc["metadata"]["name"] = name
            for rule in doc["rules"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "watch"] or ["get"]
            cp.apply(doc)
        elif doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            doc["metadata"]["name"] = name
            doc["roleRef"]["name"] = name
            doc["subjects"] = [{"kind": "ServiceAccount", "name": name,
                                "namespace": JOB_NAMESPACE}]
            cp.apply(doc)
    return (f"system:serviceaccount:{JOB_NAMESPACE}:{name}",
            cp.service_account_kubeconfig(JOB_NAMESPACE, name))


def test_an_account_without_watch_runs_paced_passes_and_keeps_its_lease(
        control_plane, namespace, tmp_path):
    """Every watch refused: each kind is listed on every pass, but the passes keep their
    pace (a look at least every 5 s, not back to back: 2,992 LISTs in 48 s before), the
    watch is tried again with backoff, and the Lease is renewed on its timer."""
    import subprocess
    import sys

    cp = control_plane
    user, kubeconfig = _account_without_watch(cp, "no-watch")
    repo = small_repo(tmp_path, namespace)
    # A window that keeps the run busy for a while: the Instance is available at 20 s.
    write_service(repo, name="svc", namespace=namespace, replicas=1, grace=1,
                  lifecycle={"minReadySeconds": 20})
    since = cp.audit_offset()
    env = cp.env(kubeconfig)
    env["OMEGITOPS_NAMESPACE"] = "omegitops"
    done = subprocess.run([sys.executable, "-m", "omegitops", "reconcile", "--repo",
                           str(repo), "--cluster", "kube", "--until-idle", "--max-seconds",
                           "90"], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # Said once per kind: pods, InferenceReplicas, revisions, Services, PodGroups,
    # PodDisruptionBudgets and nodes.
    assert done.stderr.count("watch:") <= 7, done.stderr
    events = cp.audit_events(user, since)
    started = min(e["requestReceivedTimestamp"] for e in events)
    ended = max(e["requestReceivedTimestamp"] for e in events)
    from datetime import datetime

    seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds()
    pod_lists = [e for e in events if e["verb"] == "list"
                 and urlsplit(e["requestURI"]).path.endswith("/pods")]
    assert seconds >= 15, "the run ended before the window: nothing was measured"
    # Paced: about one pass per 5 s, and one per write's reaction, never back to back.
    assert len(pod_lists) <= seconds / 2 + 10, (len(pod_lists), seconds)
