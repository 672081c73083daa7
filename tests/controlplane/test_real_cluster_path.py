"""The defects the real-cluster path had, each shown on the real control plane: what a
user of the scheduled job met, run as the job runs, as the ``omegitops`` ServiceAccount."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml
from conftest import JOB_NAMESPACE, PIPELINES
from kubernetes import client as k8s
from kubescenario import KubeScenario
from test_job import LEASE, put_lease, reconcile_argv, run_job

from omegitops.cluster.base import CONTROLLER_REVISION, INFERENCE_REPLICA
from omegitops.render import pods as P
from tests.fleet import strategy, write_service

NAME = "svc-engine"
def pods_of(cp, namespace: str) -> list[dict]:
    return sorted(cp.list("v1", "Pod", namespace), key=lambda p: p["metadata"]["name"])


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


# -- --until-idle on the wall clock -------------------------------------------------------


def test_until_idle_looks_again_before_the_deadline_and_ends_healthy(control_plane,
                                                                     namespace, tmp_path):
    """With a 20 s readiness deadline the containers are ready after about a second: the
    run must look again long before the deadline, not sleep to it and fail the fleet."""
    cp = control_plane
    repo = tmp_path / "repo"
    values = {"lifecycle": {"instanceReadyTimeout": "20s"}}
    write_service(repo, namespace=namespace, replicas=2, grace=1, values=values)
    started = time.monotonic()
    done = run_job(cp, reconcile_argv(repo), tmp_path)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    replica = cp.get("ome.io/v1beta1", "InferenceReplica", namespace, NAME)
    rows = replica["status"]["instances"]
    assert replica["status"]["readyReplicas"] == 2, rows
    assert "DeadlineExceeded" not in json.dumps(rows)
    assert all(ready(p) for p in pods_of(cp, namespace))
    assert took < 20, f"the run took {took:.0f} s: it slept toward the deadline"


# -- names the API server refuses ----------------------------------------------------------


def test_names_kube_apiserver_would_refuse_are_validation_errors(control_plane, namespace,
                                                                 tmp_path):
    cp = control_plane
    repo = tmp_path / "repo"
    long_gang = "a" * 47
    write_service(repo, namespace=namespace, name=long_gang, replicas=1, workers=1, grace=1)
    runtime = (repo / "runtimes" / "test.yaml").read_text()
    write_service(repo, namespace=namespace, name="3b-chat", replicas=1, grace=1)
    write_service(repo, namespace=namespace, name="good", replicas=1, grace=1)
    # The gang's runtime was overwritten by the single-pod one: keep one of each.
    gang_runtime = yaml.safe_load(runtime)
    gang_runtime["metadata"]["name"] = "srt-gang"
    (repo / "runtimes" / "gang.yaml").write_text(yaml.safe_dump(gang_runtime))
    gang = yaml.safe_load((repo / "services" / f"{long_gang}.yaml").read_text())
    gang["spec"]["runtime"]["name"] = "srt-gang"
    (repo / "services" / f"{long_gang}.yaml").write_text(yaml.safe_dump(gang))

    # What the rule is about: the real API server refuses the gang's pod hostname. (This
    # server takes 3b-chat-engine as a Service name: Kubernetes 1.34 relaxed Service names
    # to DNS-1123 labels behind RelaxedServiceNameValidation; older servers refuse it,
    # and validate keeps to what every server accepts.)
    core = k8s.CoreV1Api(cp.admin)
    with pytest.raises(k8s.ApiException) as refused:
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": "p"},
            "spec": {"hostname": f"{long_gang}-engine-0-leader-0" + "x" * 8,
                     "containers": [{"name": "c", "image": "i"}]}})
    assert refused.value.status == 422

    done = run_job(cp, reconcile_argv(repo), tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"services/{long_gang}.yaml:" in done.stderr and "metadata.name" in done.stderr
    assert "services/3b-chat.yaml:" in done.stderr and "DNS-1035" in done.stderr
    # Nothing of the two was sent to the API server; the good service was reconciled.
    assert "422" not in done.stderr and "Invalid" not in done.stderr.replace("invalid", "")
    names = {p["metadata"]["name"] for p in pods_of(cp, namespace)}
    assert names == {"good-engine-0-default-0"}
    assert all(ready(p) for p in pods_of(cp, namespace))


# -- RBAC -------------------------------------------------------------------------------


def test_a_missing_grant_is_named_in_one_line_before_any_write(control_plane, namespace,
                                                              tmp_path):
    """A ServiceAccount bound to the shipped ClusterRole less one rule: the run names the
    missing permission and writes nothing, rather than failing half-way."""
    cp = control_plane
    docs = [d for d in yaml.safe_load_all((PIPELINES / "common" / "rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    role["metadata"]["name"] = "omegitops-less"
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["pods/status"]]
    cp.apply(role)
    cp.apply({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "less", "namespace": JOB_NAMESPACE}})
    cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": {"name": "omegitops-less", "namespace": JOB_NAMESPACE},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                          "name": "omegitops"},
              "subjects": [{"kind": "ServiceAccount", "name": "less",
                            "namespace": JOB_NAMESPACE}]})
    cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": "omegitops-less"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "omegitops-less"},
              "subjects": [{"kind": "ServiceAccount", "name": "less",
                            "namespace": JOB_NAMESPACE}]})
    try:
        repo = tmp_path / "repo"
        write_service(repo, namespace=namespace, replicas=1, grace=1)
        kubeconfig = cp.service_account_kubeconfig(JOB_NAMESPACE, "less")
        env = cp.env(kubeconfig)
        env["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
        done = subprocess.run([sys.executable, "-m", "omegitops", "reconcile", "--repo",
                               str(repo), "--cluster", "kube"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 1, done.stderr
        lines = [line for line in done.stderr.splitlines() if "not permitted" in line]
        assert len(lines) == 1 and "patch core/pods/status" in lines[0], done.stderr
        assert cp.get("ome.io/v1beta1", "InferenceReplica", namespace, NAME) is None
        assert pods_of(cp, namespace) == []
    finally:
        cp.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, "omegitops-less")
        cp.delete("rbac.authorization.k8s.io/v1", "ClusterRole", None, "omegitops-less")


# -- LISTs in pages -------------------------------------------------------------------------


def test_lists_are_read_in_pages_with_the_servers_continue_tokens(control_plane, namespace,
                                                                 tmp_path):
    cp = control_plane
    repo = tmp_path / "repo"
    write_service(repo, namespace=namespace, replicas=5, grace=1)
    s = KubeScenario(cp, repo, {namespace})
    try:
        s.job.page_size = 2  # five pods: three pages, two continue tokens
        s.until(lambda s: s.status(NAME)["readyReplicas"] == 5)
        pods = s.job.list_pods({"ome.io/inferenceservice": "svc"})
        assert len([p for p in pods if p["metadata"]["namespace"] == namespace]) == 5
    finally:
        s.close()


# -- the Lease lost while the run goes on --------------------------------------------------


def test_a_lease_lost_during_until_idle_reports_and_fails(control_plane, namespace, tmp_path):
    cp = control_plane
    repo = tmp_path / "repo"
    # An image no node can pull: the run keeps working until its budget is spent.
    write_service(repo, namespace=namespace, replicas=1, grace=1, image="sglang:unpullable")
    env = cp.env(cp.job_kubeconfig)
    env["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
    report = tmp_path / "status"
    job = subprocess.Popen([sys.executable, "-m", "omegitops", *reconcile_argv(repo)[1:],
                            "--report-dir", str(report)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cp.wait_for(lambda: pods_of(cp, namespace), 60, "the run's first pod")
        put_lease(cp, "other-job/9", renewed_seconds_ago=0)
        _, err = job.communicate(timeout=120)
    finally:
        job.kill()
        cp.delete(*LEASE)
    assert job.returncode == 1, err[-3000:]
    lost = [line for line in err.splitlines() if "other-job/9" in line]
    assert len(lost) == 1 and "lost" in lost[0], err[-3000:]
    assert (report / "status.json").is_file()


# -- Events where kubectl describe finds them -----------------------------------------------


def test_events_are_on_the_inference_service_and_kubectl_describe_finds_them(ome_crds,
                                                                            namespace,
                                                                            tmp_path):
    cp = ome_crds
    repo = tmp_path / "repo"
    write_service(repo, namespace=namespace, replicas=1, grace=1,
                  lifecycle={"restartPolicy": "RecreateInstanceOnPodRestart"})
    cp.apply_files(sorted((repo / "services").glob("*.yaml")), validation="Ignore")
    isvc = cp.get("ome.io/v1beta1", "InferenceService", namespace, "svc")
    s = KubeScenario(cp, repo, {namespace})
    try:
        s.until(lambda s: s.status(NAME)["readyReplicas"] == 1)
        s.fault("oom", "svc-engine-0-default-0")
        s.until(lambda s: s.events("RestartTriggered"))
    finally:
        s.close()
    # kubectl describe lists the Events whose involvedObject matches by name, namespace,
    # kind and uid.
    selector = ",".join([f"involvedObject.name={isvc['metadata']['name']}",
                         f"involvedObject.namespace={namespace}",
                         "involvedObject.kind=InferenceService",
                         f"involvedObject.uid={isvc['metadata']['uid']}"])
    found = k8s.CoreV1Api(cp.admin).list_namespaced_event(namespace, field_selector=selector)
    reasons = [e.reason for e in found.items]
    assert "RestartTriggered" in reasons, reasons
    every = k8s.CoreV1Api(cp.admin).list_namespaced_event(namespace).items
    assert len(found.items) == len([e for e in every if e.involved_object.kind ==
                                    "InferenceService"])


def test_a_status_the_installed_crd_drops_is_warned_about_once(ome_crds, namespace, tmp_path):
    cp = ome_crds
    repo = tmp_path / "repo"
    write_service(repo, namespace=namespace, replicas=1, grace=1)
    cp.apply_files(sorted((repo / "services").glob("*.yaml")), validation="Ignore")
    done = run_job(cp, reconcile_argv(repo), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "InferenceService CRD" in line]
    assert len(warnings) == 1, done.stderr[-3000:]
    isvc = cp.get("ome.io/v1beta1", "InferenceService", namespace, "svc")
    assert "lifecycle" not in json.dumps(isvc.get("status") or {})


# -- revisions and rows changed by hand -----------------------------------------------------


def test_a_prior_revision_deleted_by_hand_under_a_partition(control_plane, namespace,
                                                           tmp_path):
    """Two Instances, partition 1: one moves, one is held. Its ControllerRevision is then
    deleted by hand, and its pod lost: it is rebuilt at the current revision, labelled
    as what it runs, and the Ready condition does not count it as held."""
    cp = control_plane
    repo = tmp_path / "repo"
    life = strategy("RecreatePod", partition=1, maxUnavailable=1)
    write_service(repo, namespace=namespace, replicas=2, grace=1, lifecycle=life)
    s = KubeScenario(cp, repo, {namespace})
    try:
        s.until(lambda s: s.status(NAME)["readyReplicas"] == 2)
        old = s.replica(NAME)["spec"]["revision"]
        write_service(repo, namespace=namespace, replicas=2, grace=1, lifecycle=life,
                      image="sglang:v2")
        s.until(lambda s: "Staged" in json.dumps(s.replica(NAME)["status"]["conditions"]))
        new = s.replica(NAME)["spec"]["revision"]
        held = next(r for r in s.rows(NAME) if r["revision"] == old)
        cp.delete("apps/v1", "ControllerRevision", namespace, old)
        held_pod = f"svc-engine-{held['index']}-default-0"
        cp.delete("v1", "Pod", namespace, held_pod, grace_period_seconds=0)
        s.until(lambda s: s.status(NAME)["readyReplicas"] == 2
                and all(not r.get("operation") for r in s.rows(NAME))
                and len(s.pods()) == 2, seconds=90)
        for pod in s.pods():
            assert pod["spec"]["containers"][0]["image"] == "sglang:v2"
            assert P.revision_of(pod) == new
        assert s.events("RevisionMissing")
        assert old not in {r["metadata"]["name"] for r in
                           s.admin.list_objects(CONTROLLER_REVISION)}
    finally:
        s.close()


def test_an_inference_replica_deleted_by_hand_after_an_in_place_update(control_plane,
                                                                      namespace, tmp_path):
    """Rows rebuilt from the pods take the revision their labels carry, which an in-place
    update moved: no Instance goes through the update a second time."""
    cp = control_plane
    repo = tmp_path / "repo"
    life = strategy("InPlaceIfPossible", maxUnavailable=1)
    write_service(repo, namespace=namespace, replicas=2, grace=1, lifecycle=life)
    s = KubeScenario(cp, repo, {namespace})
    try:
        s.until(lambda s: s.status(NAME)["readyReplicas"] == 2)
        write_service(repo, namespace=namespace, replicas=2, grace=1, lifecycle=life,
                      image="sglang:v2")
        s.until(lambda s: s.status(NAME)["updatedReplicas"] == 2
                and s.status(NAME)["readyReplicas"] == 2
                and all(not r.get("operation") for r in s.rows(NAME)))
        restarts = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
                    for p in s.pods()}
        cp.delete("ome.io/v1beta1", INFERENCE_REPLICA, namespace, NAME)
        s.until(lambda s: s.status(NAME)["readyReplicas"] == 2)
        for _ in range(5):
            s.run_pass()
        revision = s.replica(NAME)["spec"]["revision"]
        assert {r["revision"] for r in s.rows(NAME)} == {revision}
        assert all(not r.get("operation") for r in s.rows(NAME))
        assert {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
                for p in s.pods()} == restarts
    finally:
        s.close()

