"""Instances on the simulated cluster: create, serve, scale, report (instances.txt,
min-ready-seconds.txt). Every scenario checks the invariants after every pass."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from omegitops.cluster.sim import SimCluster
from omegitops.render import pods as P
from tests.conftest import EXAMPLES
from tests.scenario import Scenario


def small_repo(root: Path, replicas: int = 2, min_ready: int | None = None,
               workers: int | None = None, image: str = "sglang:v1",
               history: int | None = None, annotations: str = "",
               auto_sync: bool | None = None, runtime_image: str | None = None) -> Path:
    """A one-service repository; rewriting it is how a test changes the desired state."""
    runner = textwrap.indent(textwrap.dedent(f"""\
        runner:
          name: ome-container
          image: {runtime_image or "sglang:v1"}
          readinessProbe:
            httpGet: {{path: /health, port: 8080}}
            initialDelaySeconds: 10
            periodSeconds: 5
          resources:
            limits: {{nvidia.com/gpu: 1}}
        """), "    ")
    tolerations = "    tolerations:\n    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
    if workers is None:
        config = tolerations + runner
    else:
        config = (tolerations + "    leader:\n" + textwrap.indent(runner, "  ") + "    worker:\n"
                  f"      size: {workers}\n" + textwrap.indent(runner, "  "))
    runtime = ("apiVersion: ome.io/v1beta1\nkind: ClusterServingRuntime\nmetadata:\n"
               "  name: srt-small\nspec:\n  engineConfig:\n" + config)
    lifecycle = f"    lifecycle:\n      minReadySeconds: {min_ready}\n" if min_ready is not None \
        else ""
    runner_override = (f"    runner:\n      image: {image}\n"
                       if workers is None and image != "sglang:v1" else "")
    sync = f"    autoSync: {str(auto_sync).lower()}\n" if auto_sync is not None else ""
    meta_extra = ""
    if history is not None or annotations:
        meta_extra = "  annotations:\n"
        if history is not None:
            meta_extra += f"    ome.io/revision-history-limit: \"{history}\"\n"
        meta_extra += annotations
    service = (
        "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata:\n  name: small\n"
        f"  namespace: demo\n{meta_extra}spec:\n  deploymentMode: OMENative\n"
        f"  model:\n    name: m\n  runtime:\n    name: srt-small\n{sync}"
        f"  engine:\n    minReplicas: {replicas}\n    maxReplicas: {replicas}\n"
        f"{runner_override}{lifecycle}"
    )
    (root / "runtimes").mkdir(parents=True, exist_ok=True)
    (root / "services").mkdir(parents=True, exist_ok=True)
    (root / "runtimes" / "small.yaml").write_text(runtime)
    (root / "services" / "small.yaml").write_text(service)
    return root


def phases(scenario, name="small-engine"):
    return {row["index"]: row["phase"] for row in scenario.rows(name)}


def test_examples_come_up_from_nothing(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    for name, desired in [("qwen3-0-6b-engine", 2), ("llama-3-2-3b-instruct-engine", 2),
                          ("llama-chat-engine", 1), ("llama-pd-engine", 2),
                          ("llama-pd-decoder", 1), ("llama-pd-router", 1),
                          ("deepseek-r1-engine", 2)]:
        status = scenario.replica(name)["status"]
        assert (status["replicas"], status["readyReplicas"], status["availableReplicas"]) == (
            desired, desired, desired), name
        assert all(row["phase"] == "Ready" for row in scenario.rows(name))
    names = sorted(p["metadata"]["name"] for p in scenario.pods("qwen3-0-6b"))
    # instances.txt: the two Instances run ...-engine-0-default-0 and ...-engine-1-default-0.
    assert names == ["qwen3-0-6b-engine-0-default-0", "qwen3-0-6b-engine-1-default-0"]
    # A further pass on a converged fleet changes nothing (it may record the converged
    # fingerprints, lifecycle/converged.py), and the one after it writes nothing.
    assert all(plan.is_noop for _, plan in scenario.run_pass().plans)
    assert scenario.run_pass().applied == 0


def test_create_is_recorded_before_pods_and_moves_one_step_per_pass(tmp_path):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=1))
    scenario.run_pass()
    (row,) = scenario.rows("small-engine")
    assert row["operation"]["type"] == "Create" and row["operation"]["step"] == "CreatePods"
    assert row["incarnation"] == 1 and row["phase"] == "Creating"
    assert [p["metadata"]["name"] for p in scenario.pods()] == ["small-engine-0-default-0"]
    steps = []
    for _ in range(12):
        result = scenario.run_pass()
        (row,) = scenario.rows("small-engine")
        steps.append((row["operation"] or {}).get("step", row["phase"]))
        scenario.settle(result)
    # Each step appears, in order, and none is skipped.
    order = [s for i, s in enumerate(steps) if i == 0 or steps[i - 1] != s]
    assert order == ["WaitReady", "WaitAvailable", "Ready"]


def test_operation_deadline_from_instance_ready_timeout(tmp_path):
    repo = small_repo(tmp_path / "repo", replicas=1)
    (repo / "ome-values.yaml").write_text(
        "ome:\n  controller:\n    lifecycle:\n      instanceReadyTimeout: 30m\n")
    scenario = Scenario(tmp_path, repo)
    scenario.run_pass()
    operation = scenario.rows("small-engine")[0]["operation"]
    assert operation["startedAt"] == "2026-09-27T08:00:00Z"
    assert operation["deadline"] == "2026-09-27T08:30:00Z"
    conditions = {c["type"]: c for c in scenario.replica("small-engine")["status"]["conditions"]}
    assert conditions["InstanceReadyTimeoutUnconfigured"]["status"] == "False"


def test_no_deadline_without_timeout_sets_the_condition(tmp_path):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=1))
    scenario.run_pass()
    assert scenario.rows("small-engine")[0]["operation"]["deadline"] is None
    conditions = {c["type"]: c for c in scenario.replica("small-engine")["status"]["conditions"]}
    assert conditions["InstanceReadyTimeoutUnconfigured"]["status"] == "True"


def test_gang_is_created_together_and_enters_rotation_together(tmp_path):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=1, workers=2),
                        podgroups=True)
    scenario.run_pass()
    names = sorted(p["metadata"]["name"] for p in scenario.pods())
    assert names == ["small-engine-0-leader-0", "small-engine-0-worker-0",
                     "small-engine-0-worker-1"]
    leader = next(p for p in scenario.pods() if "leader" in p["metadata"]["name"])
    env = {e["name"]: e.get("value") for e in leader["spec"]["containers"][0]["env"]}
    assert env["OME_INSTANCE_INDEX"] == "0" and env["OME_RANK"] == "0"
    assert env["OME_POD_COUNT"] == "3" and env["OME_RUNNER"] == "leader"
    assert env["OME_LEADER_ADDRESS"] == (
        "small-engine-0-leader-0.small-engine-pods.demo.svc.cluster.local")
    with SimCluster(scenario.path) as cluster:
        groups = cluster.list_objects("PodGroup")
        services = {s["metadata"]["name"]: s for s in cluster.list_objects("Service")}
    assert [g["spec"]["minMember"] for g in groups] == [3]
    # The routing Service selects entry pods only; the headless one lists every pod early.
    assert services["small-engine"]["spec"]["selector"]["ome.io/entry"] == "true"
    assert services["small-engine-pods"]["spec"]["publishNotReadyAddresses"] is True
    seen_serving = False
    for _ in range(40):
        result = scenario.run_pass()  # the invariant check asserts all-or-none gating
        gated = [P.gate_set(p) for p in scenario.pods()]
        seen_serving |= all(gated)
        if phases(scenario) == {0: "Ready"}:
            break
        scenario.settle(result)
    assert seen_serving and phases(scenario) == {0: "Ready"}
    status = scenario.replica("small-engine")["status"]
    assert status["servingReplicas"] == 1


def test_gang_without_its_leader_serves_nothing(tmp_path):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=1, workers=1))
    scenario.until_idle()
    assert scenario.replica("small-engine")["status"]["servingReplicas"] == 1
    scenario.fault("hang", pod="small-engine-0-leader-0")
    scenario.advance(1)
    scenario.run_pass()
    status = scenario.replica("small-engine")["status"]
    (row,) = scenario.rows("small-engine")
    assert status["servingReplicas"] == 0
    worker = next(p for p in row["pods"] if p["runner"] == "worker")
    assert worker["serving"] is True  # the worker still serves, its Instance does not


def test_min_ready_window_restarts_after_a_readiness_flap(tmp_path):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=1, min_ready=900))
    scenario.until(lambda s: P.is_ready(s.pods()[0]))
    ready_at = scenario.now()
    status = scenario.replica("small-engine")["status"]
    # min-ready-seconds.txt: during the window READY is 1 and AVAILABLE 0.
    scenario.run_pass()
    status = scenario.replica("small-engine")["status"]
    assert (status["readyReplicas"], status["availableReplicas"]) == (1, 0)
    assert phases(scenario) == {0: "Creating"}
    scenario.advance(300)
    scenario.fault("hang", pod="small-engine-0-default-0")
    scenario.advance(60)
    scenario.fault("hang", pod="small-engine-0-default-0", clear=True)
    scenario.until(lambda s: P.is_ready(s.pods()[0]))
    back_at = scenario.now()
    assert (back_at - ready_at).total_seconds() > 360
    # The first window would have ended 900 s after ready_at; the flap restarted it.
    scenario.advance((ready_at - scenario.now()).total_seconds() + 905)
    scenario.run_pass()
    assert phases(scenario) == {0: "Creating"}
    scenario.until(lambda s: phases(s) == {0: "Ready"})
    assert (scenario.now() - back_at).total_seconds() >= 900


def test_scale_up_takes_the_lowest_free_index_and_down_keeps_ready_ones(tmp_path):
    repo = small_repo(tmp_path / "repo", replicas=1)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    small_repo(repo, replicas=3)
    scenario.run_pass()
    assert phases(scenario) == {0: "Ready", 1: "Creating", 2: "Creating"}
    # Scale down before the new ones are Ready: keep the Ready Instance first,
    # then the lowest index; remove the rest.
    small_repo(repo, replicas=2)
    scenario.run_pass()
    assert phases(scenario) == {0: "Ready", 1: "Creating", 2: "Deleting"}
    scenario.until_idle()
    assert phases(scenario) == {0: "Ready", 1: "Ready"}
    assert sorted(p["metadata"]["name"] for p in scenario.pods()) == [
        "small-engine-0-default-0", "small-engine-1-default-0"]
    # Indices are kept for life and gaps are allowed; a new Instance fills the lowest gap.
    small_repo(repo, replicas=1)
    scenario.until_idle()
    assert phases(scenario) == {0: "Ready"}
    small_repo(repo, replicas=2)
    scenario.until_idle()
    assert phases(scenario) == {0: "Ready", 1: "Ready"}


def test_scale_down_removes_non_ready_before_ready(tmp_path):
    repo = small_repo(tmp_path / "repo", replicas=2)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    small_repo(repo, replicas=3)
    scenario.run_pass()
    small_repo(repo, replicas=1)
    scenario.run_pass()
    # Ready Instances 0 and 1 beat the Creating 2; then the lowest index wins.
    assert phases(scenario) == {0: "Ready", 1: "Deleting", 2: "Deleting"}


@pytest.mark.parametrize("kill_after", [0, 1, 2, 3])
def test_a_pass_killed_between_two_writes_is_carried_on(tmp_path, kill_after):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=2, workers=1))
    result = scenario.run_pass(kill_after=kill_after)
    assert result.errors  # the failure is reported, not swallowed
    scenario.until_idle()
    assert phases(scenario) == {0: "Ready", 1: "Ready"}
    names = sorted(p["metadata"]["name"] for p in scenario.pods())
    assert names == ["small-engine-0-leader-0", "small-engine-0-worker-0",
                     "small-engine-1-leader-0", "small-engine-1-worker-0"]
    assert all(p["metadata"]["labels"]["ome.io/instance-incarnation"] == "1"
               for p in scenario.pods())


def test_lost_status_is_rebuilt_from_the_pods(tmp_path):
    scenario = Scenario(tmp_path, small_repo(tmp_path / "repo", replicas=2))
    scenario.until_idle()
    with SimCluster(scenario.path) as cluster:
        cluster.delete_object("InferenceReplica", "demo", "small-engine")
    scenario.until_idle()
    assert phases(scenario) == {0: "Ready", 1: "Ready"}
    assert len(scenario.pods()) == 2


def test_corrupt_state_file_is_reported_and_left_alone(tmp_path, cli):
    path = tmp_path / "cluster.json"
    path.write_text('{"version": 1, "objects": ')
    before = path.read_bytes()
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{path}")
    assert code == 1
    assert "not a valid simulated cluster state" in err and "refusing to overwrite" in err
    assert path.read_bytes() == before


def test_a_second_run_says_who_holds_the_cluster(tmp_path, cli):
    path = tmp_path / "cluster.json"
    with SimCluster(path):
        code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{path}")
    assert code == 0
    assert "not running" in err and "pid" in err


def test_get_irep_after_the_readme_command(tmp_path, cli):
    cluster = f"sim:{tmp_path / 'c.json'}"
    code, out, _ = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", cluster, "--until-idle")
    assert code == 0
    # Across namespaces, as kubectl get -A: a NAMESPACE column first.
    assert out.splitlines()[0].split() == ["NAMESPACE", "NAME", "COMPONENT", "DESIRED",
                                           "CURRENT", "READY", "AVAILABLE", "COUNT-FROM",
                                           "AGE"]
    code, out, _ = cli("get", "irep", "--cluster", cluster, "-o", "json")
    listed = json.loads(out)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert len(listed["items"]) == 7
    for replica in listed["items"]:
        assert replica["kind"] == "InferenceReplica"
        status = replica["status"]
        assert replica["spec"]["replicas"] == status["replicas"] == status["readyReplicas"] \
            == status["availableReplicas"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"


def test_get_irep_as_kubectl_does(tmp_path, cli):
    cluster = f"sim:{tmp_path / 'c.json'}"
    assert cli("reconcile", "--repo", str(EXAMPLES), "--cluster", cluster, "--until-idle")[0] == 0
    code, out, _ = cli("get", "irep", "qwen3-0-6b-engine", "--cluster", cluster, "-o", "json")
    assert code == 0 and json.loads(out)["metadata"]["name"] == "qwen3-0-6b-engine"
    code, out, _ = cli("get", "irep", "-n", "qwen3-0-6b", "--cluster", cluster)
    assert out.splitlines()[0].split()[0] == "NAME"  # one namespace: no NAMESPACE column
    code, out, _ = cli("get", "irep", "-A", "--cluster", cluster, "-o", "name")
    assert "inferencereplica.ome.io/qwen3-0-6b-engine" in out.splitlines()
    code, out, _ = cli("get", "irep", "-A", "--cluster", cluster, "-o", "wide")
    assert out.splitlines()[0].split()[-4:] == ["SERVING", "REVISION", "HOLD", "CANARY"]
    code, out, _ = cli("get", "irep", "-A", "--cluster", cluster, "-o", "yaml")
    assert out.startswith("apiVersion: v1\nitems:") or "kind: List" in out
    code, _, err = cli("get", "irep", "nothing-engine", "--cluster", cluster)
    assert code == 1 and 'inferencereplicas "nothing-engine" not found' in err
    code, _, err = cli("get", "irep", "-n", "a", "-A", "--cluster", cluster)
    assert code == 2  # a usage error
