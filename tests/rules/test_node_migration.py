"""instances.txt: "Readiness deadlines, restart policies, migration off a node ... act on
whole Instances"; "A migration ... starts the replacement at a new index and then
removes the old Instance"; "A new Instance starts at incarnation 1, and so does the
replacement in a migration". min-ready-seconds.txt: an Instance migration drains the
source, "which keeps serving until then", once the replacement is available.

A Ready Instance whose pods run on a cordoned node, or one tainted NoSchedule or
NoExecute beyond what its pods tolerate, migrates make-before-break
(docs/behaviour.md "Migration off a node"); a node that stops reporting is a restart.
A drain waits for the migration: the component's PodDisruptionBudget refuses its
evictions of serving pods.

These run on ``sim:`` (they take ``tmp_path``, not ``backend``): the simulator's
cordon, taint and drain node faults. The real ``kubectl drain`` on the real control
plane: tests/controlplane/test_drain.py.
"""

from __future__ import annotations

import json

import yaml

from omegitops.cluster.sim import SimCluster
from omegitops.commands.instance import list_table, status_text
from omegitops.manifests.load import load
from omegitops.model.state import Mode, Operation, OperationType, Step
from omegitops.preview.forecast import span_label
from omegitops.preview.planview import operation_label
from omegitops.render import pods as P
from omegitops.report.status import build_report, validate_report
from tests.backends import NAME, SimDriver, messages, rows, serving_gangs, settled, step
from tests.fleet import strategy
from tests.scenario import converged

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


def _scenario(tmp_path, **service):
    scenario, change = converged(tmp_path, **service)
    return SimDriver(scenario, "demo"), change


def _serving(s) -> int:
    """Instances the Service routes to (a single pod's, a gang's leader)."""
    return sum(1 for p in s.pods(f"{NAME}-")
               if P.runner_of(p) != "worker" and P.is_ready(p)
               and P.gate_set(p) and not P.has_ended(p) and not P.is_terminating(p))


def _node(s, index: int) -> str:
    [pod] = [p for p in s.pods(f"{NAME}-{index}-") if P.runner_of(p) != "worker"]
    return pod["spec"]["nodeName"]


def _watch_serving(s, desired: int, gang: bool = False) -> None:
    """After every pass: never fewer serving Instances than desired."""
    def check(d):
        count = serving_gangs(d) if gang else _serving(d)
        assert count >= desired, f"{count} Instances serve, {desired} wanted"
    s.watches.append(check)


def _mark(s, kind: str, pod: str) -> None:
    """A cordon or a taint of the pod's node: unlike the faults that break pods, it
    breaks no gang, so gangs stay held whole after every pass."""
    s.fault(kind, pod=pod)
    s.inner.strict_gangs = True


def _count(s, reason: str) -> int:
    """How many times ``reason`` was recorded (a repeated message is one counted event)."""
    return sum(e.get("count") or 1 for e in s.events(reason))


def _migrated(s) -> bool:
    return bool(messages(s, "InstanceMigrated")) and settled(s)


def test_a_single_pod_on_a_cordoned_node_migrates_make_before_break(tmp_path):
    s, _ = _scenario(tmp_path, replicas=2, lifecycle=SURGE)
    node = _node(s, 0)
    _watch_serving(s, 2)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.run_pass()
    row = rows(s)[0]
    assert row["phase"] == "Migrating", row
    operation = row["operation"]
    assert (operation["type"], operation["leavingNode"], operation["leavingWhy"]) == (
        "Migrate", node, "cordoned"), operation
    started = messages(s, "InstanceMigrating")
    assert started == [(f"OMENative component=engine instance=0 migrating off node {node} "
                        "(cordoned): a replacement Instance starts on other nodes; this one "
                        "serves until it hands over")], started
    s.until(lambda d: _migrated(d) and all(_node(d, i) != node for i in rows(d)))
    found = rows(s)
    # The first replacement took the lowest free index, 2, at incarnation 1; a second
    # Instance on the node moves to the index the first one freed.
    assert 2 in found and found[2]["incarnation"] == 1, found
    assert messages(s, "InstanceMigrated")[0] == (
        f"OMENative component=engine instance=0 migrated off node {node}: Instance 2 "
        "(incarnation 1) serves in its place")
    assert len(found) == 2


def test_a_gang_on_a_cordoned_node_migrates_whole(tmp_path):
    s, _ = _scenario(tmp_path, replicas=1, workers=1, lifecycle=SURGE)
    _watch_serving(s, 1, gang=True)
    leader = f"{NAME}-0-leader-0"
    node = _node(s, 0)
    _mark(s, "cordon", leader)
    s.until(_migrated)
    found = rows(s)
    assert sorted(found) == [1] and found[1]["incarnation"] == 1, found
    new_nodes = {p["spec"]["nodeName"] for p in s.pods(f"{NAME}-1-")}
    assert node not in new_nodes, new_nodes


def test_a_no_execute_taint_tolerated_for_a_while_migrates(tmp_path):
    """Pods that tolerate the taint for tolerationSeconds are evicted later: the
    Instance moves before then."""
    s, _ = _scenario(tmp_path, replicas=1, lifecycle=SURGE)
    runtime = s.repo / "runtimes" / "test.yaml"
    doc = yaml.safe_load(runtime.read_text())
    doc["spec"]["engineConfig"]["tolerations"].append(
        {"key": "omegitops.io/maintenance", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 3600})
    runtime.write_text(yaml.safe_dump(doc, sort_keys=False))
    s.until(settled)
    [index] = rows(s)
    node = _node(s, index)
    _watch_serving(s, 1)
    _mark(s, "taint", s.pods(f"{NAME}-{index}-")[0]["metadata"]["name"])
    s.run_pass()
    operation = rows(s)[index]["operation"]
    assert operation["type"] == "Migrate", operation
    assert operation["leavingWhy"] == "taint omegitops.io/maintenance=true:NoExecute"
    s.until(_migrated)
    [moved] = rows(s)
    assert _node(s, moved) != node


def test_a_node_that_stops_reporting_is_a_restart_not_a_migration(tmp_path):
    s, _ = _scenario(tmp_path, replicas=1, grace=5, lifecycle=SURGE)
    s.fault("node-down", pod=f"{NAME}-0-default-0")
    s.until(lambda d: rows(d)[0]["phase"] == "Restarting")
    assert not messages(s, "InstanceMigrating")


def test_migration_policy_never_leaves_the_instance_on_a_cordoned_node(tmp_path):
    s, _ = _scenario(tmp_path, replicas=1, lifecycle={**SURGE,
                                                      "migrationPolicy": {"mode": "Never"}})
    _mark(s, "cordon", f"{NAME}-0-default-0")
    for _ in range(3):
        s.run_pass()
        s.advance(60)
    assert sorted(rows(s)) == [0] and rows(s)[0]["phase"] == "Ready"
    assert not messages(s, "InstanceMigrating")


def test_nothing_migrates_while_every_node_is_cordoned(tmp_path):
    """Nowhere to go: the Instance stays and serves (the unschedulable fault)."""
    s, _ = _scenario(tmp_path, replicas=1, lifecycle=SURGE)
    s.fault("unschedulable")
    s.run_pass()
    assert rows(s)[0]["phase"] == "Ready"
    assert not messages(s, "InstanceMigrating")


def test_a_failing_replacement_is_deleted_retried_and_bounded(tmp_path):
    """A replacement that crashes past its deadline is deleted, the source keeps
    serving, lastFailure and a MigrationFailed event say so; attempts stop at
    autoMigrate.maxAttempts (three by default)."""
    s, _ = _scenario(tmp_path, replicas=1, lifecycle={
        **SURGE, "instanceReadyTimeout": "2m"})
    _watch_serving(s, 1)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.run_pass()
    # Every replacement crashes.
    for attempt in range(1, 4):
        s.until(lambda d: any(i != 0 for i in rows(d)))
        replacement = max(i for i in rows(s) if i != 0)
        for pod in s.pods(f"{NAME}-{replacement}-"):
            s.fault("crash", pod=pod["metadata"]["name"])
        s.until(lambda d, n=attempt: len(messages(d, "MigrationFailed")) == n)
        row = rows(s)[0]
        assert row["phase"] == "Ready" and row["lastFailure"], row
    assert "no further attempt" in messages(s, "MigrationFailed")[-1]
    s.until(lambda d: sorted(rows(d)) == [0] and not d.results[-1].busy)
    assert _count(s, "InstanceMigrating") == 3
    s.advance(1800)
    s.run_pass()
    assert sorted(rows(s)) == [0] and rows(s)[0]["phase"] == "Ready"
    assert _count(s, "InstanceMigrating") == 3


def test_a_migration_cut_short_resumes_where_it_stood(tmp_path):
    """A pass killed after its first write: the next carries the migration on from the
    steps status.instances records."""
    s, _ = _scenario(tmp_path, replicas=1, lifecycle=SURGE)
    _watch_serving(s, 1)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.run_pass()
    for _ in range(6):
        s.run_pass(kill_after=1)
    assert rows(s)[0]["operation"]["type"] == "Migrate"
    s.until(_migrated)
    assert sorted(rows(s)) == [1] and rows(s)[1]["incarnation"] == 1


def _migrating(s) -> set[int]:
    return {i for i, row in rows(s).items()
            if (row.get("operation") or {}).get("type") == "Migrate"}


def test_without_max_surge_one_migration_runs_at_a_time(tmp_path):
    """RecreatePod reads no maxSurge: a component moves one Instance at a time."""
    s, _ = _scenario(tmp_path, replicas=3, lifecycle=strategy("RecreatePod"))
    node = _node(s, 0)
    on_node = {i for i in rows(s) if _node(s, i) == node}
    assert len(on_node) >= 2, "the simulator packs the Instances onto one node"
    s.watches.append(lambda d: _check(len(_migrating(d)) <= 1, _migrating(d)))
    _watch_serving(s, 3)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.until(lambda d: _count(d, "InstanceMigrated") == len(on_node) and settled(d))
    assert all(_node(s, i) != node for i in rows(s))


def test_a_migration_takes_a_surge_slot_from_the_rollout(tmp_path):
    """maxSurge 1: while a replacement stands, no update surges beside it; the Instance
    on the leaving node migrates first and the update reaches its replacement after."""
    s, change = _scenario(tmp_path, replicas=2, lifecycle=SURGE)
    node = _node(s, 0)
    s.watches.append(lambda d: _check(
        len(_migrating(d)) + sum(1 for r in rows(d).values()
                                 if (r.get("operation") or {}).get("mode") == "Surge"
                                 and r["operation"]["type"] == "Update") <= 1, rows(d)))
    _watch_serving(s, 2)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    change(image="sglang:v2")
    s.run_pass()
    assert 0 in _migrating(s)
    s.until(settled)
    assert all(_node(s, i) != node for i in rows(s))
    assert all(p["spec"]["containers"][0]["image"] == "sglang:v2"
               for p in s.pods(f"{NAME}-"))


def _check(ok: bool, what) -> None:
    assert ok, what


def test_instance_list_status_and_the_report_say_what_migrates_and_why(tmp_path):
    s, _ = _scenario(tmp_path, replicas=1, lifecycle=SURGE)
    node = _node(s, 0)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.run_pass()
    found = s.rows(NAME)
    listed = list_table(found)
    assert "Migrating" in listed and f"Migrate/SurgeWaitReady off {node} (cordoned)" in listed
    shown = status_text(s.replica(NAME), rows(s)[0], [], s.now())
    assert f"leaving:     node {node} (cordoned)" in shown, shown
    assert "replacement: Instance 1" in shown, shown
    report = build_report(load(s.repo), [s.replica(NAME)], s.events(), s.now())
    validate_report(report)
    (engine,) = report["services"][0]["components"]
    assert f"Instance 0 migrating off node {node} (cordoned)" in engine["healthReason"], engine


def test_the_plan_names_the_node_a_migration_leaves_and_why():
    operation = Operation(OperationType.MIGRATE, Step.SURGE_CREATE, mode=Mode.SURGE,
                          leaving="node-3", leaving_why="cordoned")
    assert operation_label(operation) == "Migrate/Surge SurgeCreate off node-3 (cordoned)"
    assert span_label(0, operation) == "Instance 0 Migrate (Surge) off node-3"


def test_a_scale_down_keeps_the_instance_a_migration_hands_over(tmp_path):
    """instances.txt: "On scale-down, OME first keeps the Instances that a migration ...
    is handing over, with their replacements"."""
    s, change = _scenario(tmp_path, replicas=2, lifecycle=SURGE)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.run_pass()
    s.until(lambda d: step(d, 0) == "SurgeWaitAvailable")
    replacement = rows(s)[0]["operation"]["replacement"]
    others = set(rows(s)) - {0, replacement}
    change(replicas=1, lifecycle=SURGE)
    s.run_pass()
    found = rows(s)
    assert found[0]["phase"] == "Migrating", found
    assert all(found[i]["phase"] == "Deleting" for i in others), found
    s.until(lambda d: _migrated(d))
    assert sorted(rows(s)) == [replacement]


def test_plan_against_a_cluster_with_a_cordoned_node_says_what_will_move(tmp_path, cli):
    s, _ = _scenario(tmp_path, replicas=1, lifecycle=SURGE)
    node = _node(s, 0)
    _mark(s, "cordon", f"{NAME}-0-default-0")
    code, out, err = cli("plan", "--repo", str(s.repo), "--cluster", f"sim:{s.inner.path}",
                         "-o", "json")
    assert code in (0, 2), err
    (engine,) = json.loads(out)["components"]
    (instance,) = [i for i in engine["instances"] if i["index"] == 0]
    assert instance["phase"] == "Migrating"
    assert instance["operation"] == f"Migrate/Surge SurgeWaitReady off {node} (cordoned)"
    assert any(f"migrating off node {node} (cordoned)" in line for line in engine["nextStep"])


# -- drains wait for the migration (a PodDisruptionBudget per component) --------------------


def _drained(s, node: str) -> bool:
    with SimCluster(s.inner.path) as cluster:
        record = cluster._sim["nodes"][node]
    return record.get("drained") is not None


def _budget(s) -> dict:
    with SimCluster(s.inner.path) as cluster:
        [budget] = cluster.list_objects("PodDisruptionBudget")
    return budget


def _on(s, node: str) -> list[str]:
    return [p["metadata"]["name"] for p in s.pods(f"{NAME}-")
            if p["spec"].get("nodeName") == node and not P.is_terminating(p)]


def test_a_drain_waits_for_the_migration_and_then_ends_by_itself(tmp_path):
    s, _ = _scenario(tmp_path, replicas=2, lifecycle=SURGE)
    s.run_pass()  # the component's PodDisruptionBudget
    assert _budget(s)["spec"]["maxUnavailable"] == 0
    node = _node(s, 0)
    _watch_serving(s, 2)
    _mark(s, "drain", f"{NAME}-0-default-0")
    # The drain's first evictions are refused: the pods still serve where they are.
    assert _on(s, node)
    s.until(lambda d: _drained(d, node) and settled(d))
    assert not _on(s, node) and _count(s, "InstanceMigrated") >= 1


def test_a_drain_waits_for_a_gang_to_move_whole(tmp_path):
    s, _ = _scenario(tmp_path, replicas=1, workers=1, lifecycle=SURGE)
    s.run_pass()
    node = _node(s, 0)
    _watch_serving(s, 1, gang=True)
    _mark(s, "drain", f"{NAME}-0-leader-0")
    s.until(lambda d: _drained(d, node) and settled(d))
    assert sorted(rows(s)) == [1] and not _on(s, node)


def test_with_migration_policy_never_the_drain_evicts_within_max_unavailable(tmp_path):
    s, _ = _scenario(tmp_path, replicas=2, lifecycle={
        **strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=1),
        "migrationPolicy": {"mode": "Never"}})
    s.run_pass()
    # Said as minAvailable: the pods declare no controller, and over such pods the
    # disruption controller allows nothing for a maxUnavailable above 0.
    spec = _budget(s)["spec"]
    assert (spec.get("minAvailable"), spec.get("maxUnavailable")) == (1, None), spec
    node = _node(s, 0)
    _mark(s, "drain", f"{NAME}-0-default-0")
    s.until(lambda d: _drained(d, node))
    assert not messages(s, "InstanceMigrating")


def test_migrations_and_steering_share_the_instances_auto_migrate_attempts(tmp_path):
    """restart-policy.txt: the moves off a node "need autoMigrate.maxAttempts in the
    operator's settings". A failed migration is an attempt of the Instance, counted and
    steered as a failed restart's is (one counter, one list of nodes to avoid); once
    they are used up nothing migrates, and the budget lets a drain evict within
    maxUnavailable instead of holding it back for a migration that will not come."""
    s, _ = _scenario(tmp_path, replicas=1, values={"autoMigrate": {"maxAttempts": 1}},
                     lifecycle={**strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=1),
                                "instanceReadyTimeout": "2m"})
    s.run_pass()
    assert _budget(s)["spec"] == {**_budget(s)["spec"], "maxUnavailable": 0}
    _mark(s, "cordon", f"{NAME}-0-default-0")
    s.run_pass()
    s.until(lambda d: any(i != 0 for i in rows(d)))
    replacement = max(i for i in rows(s) if i != 0)
    s.until(lambda d: all(p["spec"].get("nodeName") for p in d.pods(f"{NAME}-{replacement}-")))
    [failed_on] = {p["spec"]["nodeName"] for p in s.pods(f"{NAME}-{replacement}-")}
    for pod in s.pods(f"{NAME}-{replacement}-"):
        s.fault("crash", pod=pod["metadata"]["name"])
    s.until(lambda d: bool(messages(d, "MigrationFailed")))
    assert "attempt" in messages(s, "MigrationFailed")[-1]
    assert "no further attempt" in messages(s, "MigrationFailed")[-1]
    row = rows(s)[0]
    assert row["attempts"] == 1 and row["avoidNodes"] == [failed_on], row
    s.until(lambda d: sorted(rows(d)) == [0] and not d.results[-1].busy)
    s.advance(1800)
    s.run_pass()
    assert _count(s, "InstanceMigrating") == 1
    spec = _budget(s)["spec"]
    assert (spec.get("minAvailable"), spec.get("maxUnavailable")) == (0, None), spec
