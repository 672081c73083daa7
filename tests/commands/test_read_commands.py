"""``instance list|status`` and ``events`` on a simulated cluster reconciled from examples/."""

from __future__ import annotations

import json

import pytest

from omegitops.cluster.sim import SimCluster
from tests.conftest import EXAMPLES


def instance_json(cli, cluster, *args):
    code, out, err = cli("instance", *args, "--cluster", cluster, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def record_warning(cluster_spec: str, namespace: str, isvc: str, message: str,
                   reason: str = "InstanceFailed") -> None:
    """A Warning Event as the reconciler records it (labels, involved object, source)."""
    with SimCluster(cluster_spec.removeprefix("sim:")) as sim:
        sim.record_event({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "omegitops"}},
            "involvedObject": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                               "namespace": namespace, "name": isvc},
            "type": "Warning", "reason": reason, "message": message,
            "source": {"component": "omegitops"},
        })


# -- instance list ------------------------------------------------------------


def test_instance_list_json_rows(cli, settled):
    rows = instance_json(cli, settled, "list", "qwen3-0-6b", "-n", "qwen3-0-6b")
    assert [r["index"] for r in rows] == [0, 1]
    for row in rows:
        assert row["incarnation"] == 1
        assert row["phase"] == "Ready"
        assert row["revision"].startswith("qwen3-0-6b-engine-")
        assert row["operation"] is None and row["lastFailure"] is None
        (pod,) = row["pods"]
        assert pod["name"] == f"qwen3-0-6b-engine-{row['index']}-default-0"
        assert {k: pod[k] for k in ("runner", "ordinal", "ready", "serving", "restarts")} == {
            "runner": "default", "ordinal": 0, "ready": True, "serving": True, "restarts": 0}


def test_instance_list_table(cli, settled):
    code, out, _ = cli("instance", "list", "qwen3-0-6b", "-n", "qwen3-0-6b", "--cluster", settled)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["IDX/INC", "PHASE", "REVISION", "PODS", "SERVING", "OPERATION"]
    assert len(lines) == 2
    assert lines[0].split()[:2] == ["0/1", "Ready"]
    assert lines[0].split()[3:] == ["1/1", "1", "-"]


def test_instance_list_other_component(cli, settled):
    rows = instance_json(cli, settled, "list", "llama-pd", "-n", "llama-demo",
                         "--component", "decoder")
    assert [p["name"] for r in rows for p in r["pods"]] == ["llama-pd-decoder-0-default-0"]


def test_instance_list_in_flight_shows_the_operation(cli, tmp_path):
    spec = f"sim:{tmp_path / 'cluster.json'}"
    assert cli("reconcile", "--repo", str(EXAMPLES), "--cluster", spec)[0] == 0
    rows = instance_json(cli, spec, "list", "qwen3-0-6b", "-n", "qwen3-0-6b")
    assert {r["phase"] for r in rows} == {"Creating"}
    operation = rows[0]["operation"]
    assert operation["type"] == "Create"
    assert set(operation) >= {"type", "step", "strategy", "startedAt", "deadline", "waiting"}
    code, out, _ = cli("instance", "list", "qwen3-0-6b", "-n", "qwen3-0-6b", "--cluster", spec)
    assert code == 0
    assert f"Create/{operation['step']}" in out


def test_instance_list_shows_the_pods_the_cluster_has(cli, tmp_path):
    """The pass that starts a surge writes the Instance's row before it creates the
    surge pod; the listing shows the cluster's pods, the new one included, and a pod
    being deleted as terminating."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    spec = f"sim:{tmp_path / 'cluster.json'}"
    assert cli("reconcile", "--repo", str(repo), "--cluster", spec, "--until-idle")[0] == 0
    runtime = repo / "runtimes" / "srt-qwen3-0-6b.yaml"
    runtime.write_text(runtime.read_text().replace("sglang:v0.5.5.post3", "sglang:v0.5.6"))
    assert cli("reconcile", "--repo", str(repo), "--cluster", spec)[0] == 0
    with SimCluster(spec.removeprefix("sim:")) as sim:
        live = {p["metadata"]["name"] for p in sim.list_pods()
                if p["metadata"]["name"].startswith("qwen3-0-6b-engine-")}
    rows = instance_json(cli, spec, "list", "qwen3-0-6b", "-n", "qwen3-0-6b")
    listed = {p["name"] for r in rows for p in r["pods"]}
    assert listed == live and len(live) > 2, (listed, live)
    surging = [r for r in rows if len(r["pods"]) == 2]
    assert surging and surging[0]["operation"]["type"] == "Update"
    assert all(p["terminating"] is False for r in rows for p in r["pods"])


# -- instance status ----------------------------------------------------------


def test_instance_status_of_a_gang(cli, settled):
    status = instance_json(cli, settled, "status", "deepseek-r1", "0", "-n", "deepseek-r1")
    assert status["index"] == 0 and status["phase"] == "Ready"
    runners = {p["runner"]: p for p in status["pods"]}
    assert set(runners) == {"leader", "worker"}
    assert runners["leader"]["name"] == "deepseek-r1-engine-0-leader-0"
    assert runners["worker"]["name"] == "deepseek-r1-engine-0-worker-0"
    assert all(p["node"] for p in status["pods"])
    assert status["events"] == []

    code, out, _ = cli("instance", "status", "deepseek-r1", "0", "-n", "deepseek-r1",
                       "--cluster", settled)
    assert code == 0
    assert "deepseek-r1-engine-0-leader-0   leader" in out
    assert "deepseek-r1-engine-0-worker-0   worker" in out
    assert "Pods:          2/2 ready, 2 serving" in out


def test_instance_status_shows_only_that_instances_warnings(cli, settled):
    record_warning(settled, "qwen3-0-6b", "qwen3-0-6b",
                   "OMENative component=engine instance=1 failed: CrashLoopBackOff")
    record_warning(settled, "qwen3-0-6b", "qwen3-0-6b",
                   "OMENative component=engine instance=10 failed: CrashLoopBackOff")
    record_warning(settled, "qwen3-0-6b", "qwen3-0-6b",
                   "OMENative component=engine instance=0 failed: ImagePullBackOff")
    one = instance_json(cli, settled, "status", "qwen3-0-6b", "1", "-n", "qwen3-0-6b")
    assert [e["message"] for e in one["events"]] == [
        "OMENative component=engine instance=1 failed: CrashLoopBackOff"]
    assert one["events"][0]["object"] == {"kind": "InferenceService", "name": "qwen3-0-6b"}
    code, out, _ = cli("instance", "status", "qwen3-0-6b", "0", "-n", "qwen3-0-6b",
                       "--cluster", settled)
    assert code == 0
    assert "ImagePullBackOff" in out and "CrashLoopBackOff" not in out


def test_missing_replica_is_a_clear_error(cli, settled):
    code, out, err = cli("instance", "list", "nope", "-n", "qwen3-0-6b", "--cluster", settled)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        ("omegitops: error: InferenceReplica qwen3-0-6b/nope-engine not found: nope has no "
         "OMENative engine in namespace qwen3-0-6b, or reconcile has not run yet")]
    code, _, err = cli("instance", "status", "qwen3-0-6b", "0", "-n", "qwen3-0-6b",
                       "--component", "router", "--cluster", settled)
    assert code == 1 and "qwen3-0-6b/qwen3-0-6b-router not found" in err


def test_missing_instance_is_a_clear_error(cli, settled):
    code, _, err = cli("instance", "status", "qwen3-0-6b", "7", "-n", "qwen3-0-6b",
                       "--cluster", settled)
    assert code == 1
    assert "has no Instance 7 (Instances: 0, 1)" in err


def test_namespace_is_required(cli, settled):
    code, _, err = cli("instance", "list", "qwen3-0-6b", "--cluster", settled)
    assert code == 2 and "-n/--namespace" in err


# -- events -------------------------------------------------------------------


def test_events_filter_by_reason(cli, settled):
    code, out, _ = cli("events", "--reason", "InstanceReady", "--cluster", settled, "-o", "json")
    assert code == 0
    events = json.loads(out)
    assert events and {e["reason"] for e in events} == {"InstanceReady"}
    # One per Instance: qwen3 2, llama-3-2-3b 2, llama-chat 1, llama-pd 2+1(+router), deepseek 2.
    assert len(events) >= 10
    assert [e["lastTimestamp"] for e in events] == sorted(e["lastTimestamp"] for e in events)
    assert set(events[0]) == {"namespace", "type", "reason", "object", "count",
                              "firstTimestamp", "lastTimestamp", "message"}


def test_events_filter_by_namespace_and_table(cli, settled):
    code, out, _ = cli("events", "-n", "qwen3-0-6b", "--cluster", settled)
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]
    assert len(lines) == 4  # InstanceCreating and InstanceReady for Instances 0 and 1
    assert all("inferenceservice/qwen3-0-6b" in line for line in lines)


def test_events_none_found(cli, settled):
    code, out, _ = cli("events", "--reason", "NoSuchReason", "--cluster", settled)
    assert code == 0 and out.strip() == "No events found."
    code, out, _ = cli("events", "--reason", "NoSuchReason", "--cluster", settled, "-o", "json")
    assert json.loads(out) == []


def test_events_aggregate_repeats(cli, settled):
    message = "OMENative component=engine instance=0 recycled a terminal pod"
    for _ in range(3):
        record_warning(settled, "qwen3-0-6b", "qwen3-0-6b", message, reason="TerminalPodRecycled")
    code, out, _ = cli("events", "--reason", "TerminalPodRecycled", "--cluster", settled,
                       "-o", "json")
    assert code == 0
    (event,) = json.loads(out)
    assert event["count"] == 3 and event["type"] == "Warning"


def test_no_abbreviated_flags_and_verbose_anywhere(cli, tmp_path):
    """kubectl habits: ``--pru`` is not ``--prune`` (a usage error, exit 2), and ``-v``
    works after the command as before it."""
    code, _, err = cli("reconcile", "--repo", str(tmp_path), "--pru")
    assert code == 2 and "unrecognized arguments: --pru" in err
    code, _, err = cli("get", "irep", "--clu", "sim:x")
    assert code == 2
    assert cli("-v", "validate", "--repo", str(EXAMPLES))[0] == 0
    assert cli("validate", "--repo", str(EXAMPLES), "-v")[0] == 0
    assert cli("instance", "list", "x", "-n", "y", "-v", "--cluster",
               f"sim:{tmp_path / 'c.json'}")[0] in (0, 1)


@pytest.mark.parametrize("command", [("get", "irep"), ("events",),
                                     ("instance", "list", "x", "-n", "y")])
def test_read_commands_never_create_a_cluster(cli, tmp_path, command):
    """A mistyped sim: path is an error, not an empty cluster, and nothing is written."""
    code, _, err = cli(*command, "--cluster", f"sim:{tmp_path / 'typo.json'}")
    assert code == 1 and "no simulated cluster there" in err
    assert list(tmp_path.iterdir()) == []


def test_reconcile_of_a_missing_repository_stops_before_any_pass(cli, tmp_path):
    code, _, err = cli("reconcile", "--repo", str(tmp_path / "nothing"),
                       "--cluster", f"sim:{tmp_path / 'c.json'}")
    assert code == 1 and "the repository folder does not exist" in err
    assert list(tmp_path.iterdir()) == []
