"""A name omegitops would create held by a pod it does not manage: kubectl's way to
quarantine a pod is to remove its labels, and another controller may own a pod of that
name. The 409 it answers is never taken for omegitops' own earlier create: the pod is
named, in a FailedCreate warning on the InferenceService (as a StatefulSet reports a pod
it cannot create) and in the component's error, and the run stops without spinning."""

from __future__ import annotations

from omegitops.cluster.sim import SimCluster
from tests.fleet import write_service

POD = "svc-engine-0-default-0"


def test_a_quarantined_pods_name_is_a_named_error_not_a_spin(tmp_path, cli):
    repo = write_service(tmp_path / "repo", replicas=1)
    sim = f"sim:{tmp_path / 'cluster.json'}"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle")
    assert code == 0, err
    with SimCluster(tmp_path / "cluster.json") as cluster:
        pod = cluster.get_object("Pod", "demo", POD)
        pod["metadata"]["labels"] = {"quarantine": "true"}  # kubectl label ... -
        cluster.replace_object(pod)
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle",
                         "--max-seconds", "600")
    assert code == 1, err
    assert f'pods "{POD}" already exists and is not omegitops\'' in err, err
    assert "no app.kubernetes.io/managed-by" in err
    assert "pass limit" not in err
    passes = err.count(" writes, ")
    assert passes < 20, f"{passes} passes: the run spun on the name"
    with SimCluster(tmp_path / "cluster.json") as cluster:
        events = [e for e in cluster.list_objects("Event") if e["reason"] == "FailedCreate"]
        kept = cluster.get_object("Pod", "demo", POD)
    assert events and POD in events[0]["message"] and events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["kind"] == "InferenceService"
    assert kept["metadata"]["labels"] == {"quarantine": "true"}, "the stranger is left alone"


def test_garbage_in_a_replicas_status_is_named_and_rebuilt_from_the_pods(tmp_path, cli):
    """status.instances edited by hand (a string, a row of the wrong width, an index of
    0.5, an unknown encoding): the component's Warning names the InferenceReplica and
    the field, its rows are rebuilt from the pods, no pod is made for a garbage row,
    and the report is written."""
    repo = write_service(tmp_path / "repo", replicas=2)
    sim = f"sim:{tmp_path / 'cluster.json'}"
    assert cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle")[0] == 0
    for garbage, field in [
        ("not rows", "status.instances: str is not a list of rows"),
        ({"encoding": "ColumnarV9", "rows": []}, "unknown encoding 'ColumnarV9'"),
        ([{"index": 0.5, "incarnation": 1, "phase": "Ready", "revision": "r"}],
         "status.instances[0].index: 0.5 is not a whole number >= 0"),
        ({"encoding": "ColumnarV2", "columns": ["index", "phase"], "rows": [[0]]},
         "status.instances.rows[0]: not a list of 2 values"),
    ]:
        with SimCluster(tmp_path / "cluster.json") as cluster:
            (replica,) = cluster.list_objects("InferenceReplica")
            replica["status"]["instances"] = garbage
            cluster.replace_status(replica)
        report = tmp_path / f"report-{len(field)}"
        code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim,
                             "--until-idle", "--report-dir", str(report))
        assert code == 0, err
        assert "Traceback" not in err and (report / "status.json").is_file()
        with SimCluster(tmp_path / "cluster.json") as cluster:
            events = [e["message"] for e in cluster.list_objects("Event")
                      if e["reason"] == "StatusUnreadable"]
            pods = sorted(p["metadata"]["name"] for p in cluster.list_pods())
            (replica,) = cluster.list_objects("InferenceReplica")
        assert any("InferenceReplica demo/svc-engine" in m and field in m for m in events), \
            events
        assert pods == ["svc-engine-0-default-0", "svc-engine-1-default-0"], pods
        assert replica["status"]["readyReplicas"] == 2


def test_a_row_at_a_step_its_operation_never_takes_is_rebuilt_from_the_pods(tmp_path, cli):
    """A status edited by hand to hold a Create at HandOver (a Surge's step): every name
    is known, but no operation stands there, and the Instance would sit in Creating for
    good. The row is refused (StatusUnreadable, naming the field) and rebuilt from the
    pods: the Instance is Ready again, and no pod is made or deleted for it."""
    from omegitops.model.replica import decode_rows, encode_rows

    repo = write_service(tmp_path / "repo", replicas=2)
    sim = f"sim:{tmp_path / 'cluster.json'}"
    assert cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle")[0] == 0
    with SimCluster(tmp_path / "cluster.json") as cluster:
        (replica,) = cluster.list_objects("InferenceReplica")
        rows = decode_rows(replica["status"]["instances"])
        rows[1].update(phase="Creating", operation={
            "type": "Create", "step": "HandOver", "startedAt": "2026-01-01T00:00:00Z"})
        replica["status"]["instances"] = encode_rows(rows)
        cluster.replace_status(replica)
        before = sorted(p["metadata"]["uid"] for p in cluster.list_pods())
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle",
                       "--max-seconds", "600")
    assert code == 0, err
    with SimCluster(tmp_path / "cluster.json") as cluster:
        events = [e["message"] for e in cluster.list_objects("Event")
                  if e["reason"] == "StatusUnreadable"]
        after = sorted(p["metadata"]["uid"] for p in cluster.list_pods())
        (replica,) = cluster.list_objects("InferenceReplica")
    assert any("status.instances[1].operation.step: 'HandOver' is not a step of "
               "operation Create" in m for m in events), events
    assert after == before
    assert replica["status"]["readyReplicas"] == 2
    assert [r["phase"] for r in decode_rows(replica["status"]["instances"])] == \
        ["Ready", "Ready"]


QUOTA = ('pods "svc-engine-0-default-1" is forbidden: exceeded quota: pods, requested: '
         'pods=1, used: pods=1, limited: pods=1')


def test_a_quota_that_refuses_the_surge_pod_is_named_and_fails_the_attempt_at_its_deadline(
        tmp_path, cli, monkeypatch):
    """The API server refuses the surge pod (a ResourceQuota): its own words reach a
    FailedCreate warning and the operation's waiting, never 'not granted to this
    account'; at instanceReadyTimeout the attempt fails (UpdateFailed, FailedCreate), and
    the old pod serves throughout."""
    from omegitops.cluster.errors import AdmissionRefused
    from tests.fleet import strategy

    lifecycle = {**strategy(maxSurge=1, maxUnavailable=0), "instanceReadyTimeout": "5m"}
    repo = write_service(tmp_path / "repo", replicas=1, lifecycle=lifecycle)
    sim = f"sim:{tmp_path / 'cluster.json'}"
    assert cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle")[0] == 0
    real = SimCluster.create_pod

    def quota(self, pod):
        if pod["metadata"]["name"].endswith("-1"):
            raise AdmissionRefused(f"Pod/demo/{pod['metadata']['name']}: {QUOTA}")
        return real(self, pod)

    monkeypatch.setattr(SimCluster, "create_pod", quota)
    write_service(repo, replicas=1, lifecycle=lifecycle, image="sglang:v2")
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim)
    assert code == 1 and "exceeded quota" in err and "not granted" not in err, err
    with SimCluster(tmp_path / "cluster.json") as cluster:
        (replica,) = cluster.list_objects("InferenceReplica")
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim)
    with SimCluster(tmp_path / "cluster.json") as cluster:
        (replica,) = cluster.list_objects("InferenceReplica")
        events = [e for e in cluster.list_objects("Event") if e["reason"] == "FailedCreate"]
    from omegitops.model.replica import decode_rows

    (row,) = decode_rows(replica["status"]["instances"])
    assert row["operation"]["waiting"].startswith("FailedCreate: ") and \
        "exceeded quota" in row["operation"]["waiting"]
    assert events and "exceeded quota" in events[0]["message"]
    # Past the deadline the attempt fails; the old pod never left rotation.
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", sim, "--until-idle",
                       "--max-seconds", "600")
    with SimCluster(tmp_path / "cluster.json") as cluster:
        failed = [e["message"] for e in cluster.list_objects("Event")
                  if e["reason"] == "UpdateFailed"]
        old = cluster.get_object("Pod", "demo", "svc-engine-0-default-0")
    assert any("FailedCreate" in m and "exceeded quota" in m for m in failed), failed
    assert any(c["type"] == "Ready" and c["status"] == "True"
               for c in old["status"]["conditions"])
