"""Watches under ``--until-idle`` on the real API server (``omegitops.cluster.kube.watches``
and ``omegitops.incremental``).

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
from conftest import JOB_USER
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from test_job import run_job

from omegitops.cluster.base import CONTROLLER_REVISION, INFERENCE_REPLICA, POD, SERVICE
from omegitops.cluster.kube import KubeCluster
from omegitops.cluster.kube.resources import RESOURCES
from omegitops.lifecycle.templates import LABEL_COMPONENT, LABEL_ISVC
from omegitops.reconcile import (
    MANAGED,
    Observation,
    observe,
    observe_keys,
    observed_kinds,
    owner_key,
)
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
