"""``omegitops plan``: revision diffs, next steps, warnings and the forecast, without writes."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from omegitops.cluster.sim import SimCluster
from omegitops.commands import plan as plan_command
from omegitops.manifests.load import load, resolved_components
from omegitops.preview.forecast import (
    IDLE,
    InstanceState,
    Sample,
    gantt,
    lowest_capacity,
    operation_spans,
)
from omegitops.preview.planview import (
    BUDGETS_CANNOT_MOVE,
    IN_PLACE_ONLY_WILL_STALL,
    MIN_READY_SHORTER_THAN_PROBE,
    NO_INSTANCE_READY_TIMEOUT,
    RECREATE_TAKES_COMPONENT_OFFLINE,
    budgets_cannot_move,
    component_warnings,
    in_place_only_will_stall,
    min_ready_shorter_than_probe,
    no_instance_ready_timeout,
    probe_catch_seconds,
    recreate_takes_component_offline,
    template_diff,
)
from omegitops.render.operator import parse_operator_values
from omegitops.render.resolve import resolve_component
from omegitops.render.templates import render_templates
from tests.conftest import EXAMPLES, RUNTIME, SERVICE, write_repo
from tests.fleet import strategy, write_service

CHART = parse_operator_values({"ome": {"controller": {
    "updateStrategy": {"engine": {"type": "SurgeThenDrain", "maxSurge": "25%",
                                  "maxUnavailable": "25%"}},
    "lifecycle": {"instanceReadyTimeout": "30m"}}}})
NOTHING = parse_operator_values(None)
QWEN_RUNTIME = "runtimes/srt-qwen3-0-6b.yaml"
OLD_IMAGE = "docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64"
NEW_IMAGE = "docker.io/lmsysorg/sglang:v0.5.6-cu129-amd64"


# -- small builders ----------------------------------------------------------------


def service(lifecycle: dict | None = None, replicas: int = 2, **engine) -> dict:
    body = {"minReplicas": replicas, "maxReplicas": replicas, **engine}
    if lifecycle is not None:
        body["lifecycle"] = lifecycle
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"deploymentMode": "OMENative", "runtime": {"name": "rt"}, "engine": body}}


def runtime(**engine_config) -> dict:
    config = {"runner": {"name": "ome-container", "image": "img:1"}, **engine_config}
    return {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
            "metadata": {"name": "rt"}, "spec": {"engineConfig": config}}


GANG = runtime(runner=None, leader={"runner": {"name": "ome-container", "image": "img:1"}},
               worker={"size": 1, "runner": {"name": "ome-container", "image": "img:1"}})


def resolved(isvc: dict, rt: dict | None = None, operator=CHART):
    return resolve_component(isvc, rt or runtime(), "engine", operator)


def templates(isvc: dict, rt: dict | None = None, operator=CHART) -> dict:
    rt = rt or runtime()
    return render_templates(isvc, rt, resolved(isvc, rt, operator))


def codes(warnings) -> list[str]:
    return [w.code for w in warnings]


# -- template diff ---------------------------------------------------------------------


def test_diff_names_the_changed_image_by_container_name():
    old = templates(service())
    new = templates(service(runner={"image": "img:2"}))
    assert [str(c) for c in template_diff(old, new)] == [
        "default.spec.containers[ome-container].image: img:1 → img:2"]


def test_diff_keys_env_by_name_and_shows_added_items():
    old = templates(service(runner={"env": [{"name": "A", "value": "1"}]}))
    new = templates(service(runner={"env": [{"name": "A", "value": "2"},
                                            {"name": "B", "value": "x"}]}))
    assert [str(c) for c in template_diff(old, new)] == [
        "default.spec.containers[ome-container].env[A].value: 1 → 2",
        'default.spec.containers[ome-container].env[B]: (unset) → {"name":"B","value":"x"}',
    ]


def test_diff_of_equal_templates_is_empty_and_unnamed_lists_change_whole():
    same = templates(service())
    assert template_diff(same, copy.deepcopy(same)) == []
    old = templates(service(runner={"args": ["--a", "1"]}))
    new = templates(service(runner={"args": ["--a", "2"]}))
    assert [str(c) for c in template_diff(old, new)] == [
        'default.spec.containers[ome-container].args: ["--a","1"] → ["--a","2"]']


# -- warnings, one code at a time ---------------------------------------------------------


def test_in_place_only_warns_on_a_non_image_change_of_a_single_pod_component():
    isvc = service({"updateStrategy": {"type": "InPlaceOnly"}})
    old = templates(isvc)
    env = service({"updateStrategy": {"type": "InPlaceOnly"}},
                  runner={"env": [{"name": "LOG", "value": "debug"}]})
    warning = in_place_only_will_stall(resolved(isvc), old, templates(env))
    assert warning.code == IN_PLACE_ONLY_WILL_STALL
    assert "env[LOG]" in warning.message and "InPlaceUpdateNotPossible" in warning.message


def test_in_place_only_does_not_warn_on_a_new_pod_label():
    """update-strategies.txt: "A label that you add to the pod template reaches the pod
    only when OME recreates it": InPlaceOnly moves such a change in place, with or
    without new images, so the plan foresees no stall; an annotation still stalls."""
    life = {"updateStrategy": {"type": "InPlaceOnly"}}
    isvc = service(life)
    for change in ({"labels": {"team": "a"}},
                   {"labels": {"team": "a"}, "runner": {"image": "img:2"}}):
        labelled = service(life, **change)
        assert in_place_only_will_stall(resolved(isvc), templates(isvc),
                                        templates(labelled)) is None
    noted = service(life, annotations={"team": "a"})
    assert in_place_only_will_stall(resolved(isvc), templates(isvc),
                                    templates(noted)) is not None


def test_in_place_only_does_not_warn_on_images_gangs_or_other_strategies():
    isvc = service({"updateStrategy": {"type": "InPlaceOnly"}})
    image = service({"updateStrategy": {"type": "InPlaceOnly"}}, runner={"image": "img:2"})
    assert in_place_only_will_stall(resolved(isvc), templates(isvc), templates(image)) is None
    assert in_place_only_will_stall(resolved(isvc), None, templates(image)) is None  # new
    # A gang is recreated under the in-place strategies: it moves, it does not stall.
    gang_env = service({"updateStrategy": {"type": "InPlaceOnly"}},
                       leader={"runner": {"env": [{"name": "X", "value": "1"}]}})
    assert in_place_only_will_stall(resolved(isvc, GANG), templates(isvc, GANG),
                                    templates(gang_env, GANG)) is None
    possible = service({"updateStrategy": {"type": "InPlaceIfPossible"}})
    env = service(runner={"env": [{"name": "X", "value": "1"}]})
    assert in_place_only_will_stall(resolved(possible), templates(possible),
                                    templates(env)) is None


@pytest.mark.parametrize("rolling, strategy", [
    ({"maxSurge": 0, "maxUnavailable": 0}, "SurgeThenDrain"),
    ({"maxUnavailable": "0%"}, "RecreatePod"),
    ({"maxUnavailable": 0}, "InPlaceIfPossible"),
])
def test_budgets_that_cannot_move_warn(rolling, strategy):
    isvc = service({"updateStrategy": {"type": strategy, "rollingUpdate": rolling}})
    warning = budgets_cannot_move(resolved(isvc))
    assert warning.code == BUDGETS_CANNOT_MOVE
    assert "(from isvc)" in warning.message


def test_budgets_that_can_move_do_not_warn():
    drain_only = service({"updateStrategy": {"rollingUpdate": {"maxSurge": 0,
                                                               "maxUnavailable": 1}}})
    assert budgets_cannot_move(resolved(drain_only)) is None
    assert budgets_cannot_move(resolved(service(), operator=NOTHING)) is None  # unset: all move


def test_a_component_scaled_to_zero_is_judged_as_it_would_move_once_scaled_up():
    """At zero replicas every percentage budget scales to 0, which is no reason to warn:
    nothing is there to move (two of OME's own samples run an engine at minReplicas 0).
    Budgets that could not move a single Instance still warn."""
    percent = service({"updateStrategy": {"rollingUpdate": {"maxSurge": "25%",
                                                            "maxUnavailable": "25%"}}},
                      replicas=0)
    assert budgets_cannot_move(resolved(percent)) is None
    assert budgets_cannot_move(resolved(service(replicas=0))) is None
    stuck = service({"updateStrategy": {"rollingUpdate": {"maxSurge": 0,
                                                          "maxUnavailable": 0}}}, replicas=0)
    assert budgets_cannot_move(resolved(stuck)).code == BUDGETS_CANNOT_MOVE


def test_recreate_pod_without_a_budget_takes_the_component_offline():
    isvc = service({"updateStrategy": {"type": "RecreatePod"}})
    warning = recreate_takes_component_offline(resolved(isvc, operator=NOTHING))
    assert warning.code == RECREATE_TAKES_COMPONENT_OFFLINE
    assert "maxUnavailable" in warning.message
    everything = service({"updateStrategy": {"type": "RecreatePod",
                                             "rollingUpdate": {"maxUnavailable": "100%"}}})
    assert recreate_takes_component_offline(resolved(everything)).code == (
        RECREATE_TAKES_COMPONENT_OFFLINE)


def test_recreate_pod_with_a_budget_and_other_strategies_do_not_warn():
    paced = service({"updateStrategy": {"type": "RecreatePod",
                                        "rollingUpdate": {"maxUnavailable": 1}}})
    assert recreate_takes_component_offline(resolved(paced)) is None
    # The chart's 25% of two Instances is one: not the whole component.
    assert recreate_takes_component_offline(
        resolved(service({"updateStrategy": {"type": "RecreatePod"}}))) is None
    assert recreate_takes_component_offline(resolved(service(), operator=NOTHING)) is None


def test_probe_catch_time_follows_the_document_and_kubernetes_defaults():
    # srt-llama-3-2-1b-instruct: every 60 s, up to 200 s for an answer, 3 failures.
    assert probe_catch_seconds({"periodSeconds": 60, "timeoutSeconds": 200,
                                "failureThreshold": 3}) == 600
    assert probe_catch_seconds({}) == 3 * 10


def _llama_chat(min_ready: int | None):
    loaded = load(EXAMPLES)
    item = next(i for i in resolved_components(loaded)
                if i.service.data["metadata"]["name"] == "llama-chat")
    isvc = copy.deepcopy(item.service.data)
    if min_ready is not None:
        isvc["spec"]["engine"]["lifecycle"]["minReadySeconds"] = min_ready
    lifecycle = resolve_component(isvc, item.runtime.data, "engine", loaded.operator)
    return lifecycle, render_templates(isvc, item.runtime.data, lifecycle)


def test_llama_chat_900_covers_the_runtime_probe():
    lifecycle, rendered = _llama_chat(None)
    assert lifecycle.min_ready_seconds == 900
    assert min_ready_shorter_than_probe(lifecycle, rendered) is None


def test_a_30_second_window_is_shorter_than_the_runtime_probe():
    lifecycle, rendered = _llama_chat(30)
    warning = min_ready_shorter_than_probe(lifecycle, rendered)
    assert warning.code == MIN_READY_SHORTER_THAN_PROBE
    assert "minReadySeconds 30 (from isvc)" in warning.message
    assert "3 failures × max(periodSeconds 60, timeoutSeconds 200) = 600 s" in warning.message


def test_no_window_or_no_probe_is_not_a_window_too_short():
    lifecycle, rendered = _llama_chat(0)
    assert min_ready_shorter_than_probe(lifecycle, rendered) is None
    bare = service({"minReadySeconds": 5})
    assert min_ready_shorter_than_probe(resolved(bare), templates(bare)) is None


def test_the_probe_defaults_apply_when_the_probe_leaves_them_out():
    isvc = service({"minReadySeconds": 20})
    rt = runtime(runner={"name": "ome-container", "image": "img:1",
                         "readinessProbe": {"httpGet": {"path": "/", "port": 8080}}})
    warning = min_ready_shorter_than_probe(resolved(isvc, rt), templates(isvc, rt))
    assert warning.code == MIN_READY_SHORTER_THAN_PROBE
    assert "= 30 s" in warning.message


def test_no_instance_ready_timeout_anywhere():
    warning = no_instance_ready_timeout(resolved(service(), operator=NOTHING))
    assert warning.code == NO_INSTANCE_READY_TIMEOUT
    assert no_instance_ready_timeout(resolved(service())) is None  # from the operator
    own = service({"instanceReadyTimeout": "10m"})
    assert no_instance_ready_timeout(resolved(own, operator=NOTHING)) is None


def test_component_warnings_collects_them_in_a_fixed_order():
    isvc = service({"updateStrategy": {"type": "RecreatePod"}, "minReadySeconds": 1})
    rt = runtime(runner={"name": "ome-container", "image": "img:1", "readinessProbe": {}})
    lifecycle = resolved(isvc, rt, NOTHING)
    assert codes(component_warnings(lifecycle, None, templates(isvc, rt, NOTHING))) == [
        RECREATE_TAKES_COMPONENT_OFFLINE, MIN_READY_SHORTER_THAN_PROBE,
        NO_INSTANCE_READY_TIMEOUT]


# -- forecast, pure parts ---------------------------------------------------------------


T0 = 1_790_496_000.0  # 2026-09-27T08:00:00Z
KEY = ("ns/svc", "engine")


def state(phase: str, started: str | None = None, kind: str = "Update",
          mode: str = "Surge") -> InstanceState:
    op = (kind, mode, started) if started else None
    label = f"Instance 0 {kind} ({mode})" if started else ""
    return InstanceState(phase, op, label)


def test_spans_run_from_the_operation_start_to_the_pass_that_saw_it_end():
    started = "2026-09-27T08:00:00Z"
    samples = [
        Sample(T0, 2, {KEY: (2, 2)}, {(*KEY, 0): state("Updating", started)}),
        Sample(T0 + 60, 3, {KEY: (1, 2)}, {(*KEY, 0): state("Updating", started)}),
        Sample(T0 + 300, 2, {KEY: (2, 2)}, {(*KEY, 0): state("Ready")}),
    ]
    (span,) = operation_spans(samples)
    assert (span.label, span.start, span.end, span.outcome) == (
        "Instance 0 Update (Surge)", T0, T0 + 300, "done")
    (low,) = lowest_capacity(samples)
    assert (low["text"], low["fraction"], low["at"]) == ("1/2", 0.5, "2026-09-27T08:01:00Z")
    chart = gantt([span])
    # Time since the rollout's start, so the chart reads as durations, not dates.
    assert chart.splitlines() == [
        "%%{init: {'gantt': {'leftPadding': 104}}}%%", "gantt", "    dateFormat x", "    axisFormat %M:%S",
        "    todayMarker off", "    section ns/svc engine",
        "    Instance 0 Update (Surge) (5m) :op1, 0, 300000"]


def test_failed_and_unfinished_operations_are_marked():
    started = "2026-09-27T08:00:00Z"
    failed = [Sample(T0, 1, {}, {(*KEY, 0): state("Creating", started, "Create", "")}),
              Sample(T0 + 90, 1, {}, {(*KEY, 0): state("Failed", started, "Create", "")})]
    (span,) = operation_spans(failed)
    assert span.outcome == "failed" and span.end == T0 + 90
    running = failed[:1]
    (span,) = operation_spans(running)
    assert span.outcome == "running"
    assert ":crit, op1" in gantt(operation_spans(failed))
    assert ":active, op1" in gantt(operation_spans(running))
    assert gantt([]) is None


# -- the command ---------------------------------------------------------------------------


def plan_json(cli, *args: str) -> tuple[int, dict]:
    code, out, err = cli("plan", *args, "-o", "json")
    assert code in (0, 2), err
    return code, json.loads(out)


def test_plan_against_no_cluster_creates_everything_and_forecasts_it(cli):
    code, plan = plan_json(cli, "--repo", str(EXAMPLES))
    assert code == 0
    assert set(plan) >= {"validation", "components", "forecast", "changes"}
    assert plan["validation"] == {"errors": [], "warnings": []}
    assert plan["cluster"]["kind"] == "empty" and plan["changes"] is True
    for component in plan["components"]:
        assert set(component) >= {"service", "component", "managed", "lifecycle", "revision",
                                  "nextStep", "hold", "conditions", "warnings"}
        assert component["managed"] and component["changes"]
        assert component["revision"]["old"] is None
        assert component["revision"]["new"].startswith(component["inferenceReplica"] + "-")
        assert {i["phase"] for i in component["instances"]} == {"Creating"}
        assert any(s.startswith("create pod ") for s in component["nextStep"])
        assert component["nextStep"][0] == f"create InferenceReplica {component['inferenceReplica']}"
        assert component["lifecycle"]["minReadySeconds"]["source"] in {"isvc", "default"}
    forecast = plan["forecast"]
    assert forecast["idle"] and forecast["stopReason"] == IDLE
    assert forecast["passes"] > 1 and forecast["seconds"] > 0
    assert forecast["peakPods"] == 13  # deepseek's two gangs of two, and nine single pods
    for low in forecast["lowestCapacity"]:
        assert low["serving"] == 0 and low["fraction"] == 0
        assert low["at"] == forecast["start"]
    assert {s["outcome"] for s in forecast["spans"]} == {"done"}
    assert forecast["failedOperations"] == 0 and forecast["notUpdated"] == []
    assert {low["end"] for low in forecast["lowestCapacity"]} == {"1/1", "2/2"}
    assert {s["operation"].split()[-1] for s in forecast["spans"]} == {"Create"}
    chat = [s for s in forecast["spans"] if s["service"] == "llama-demo/llama-chat"]
    assert chat[0]["seconds"] >= 900  # its warm-up window


def test_plan_exit_codes_with_detailed_exitcode(cli):
    assert cli("plan", "--repo", str(EXAMPLES), "--detailed-exitcode", "--no-forecast")[0] == 2
    assert cli("plan", "--repo", str(EXAMPLES), "--no-forecast")[0] == 0


def test_markdown_has_a_summary_details_and_a_mermaid_gantt(cli):
    code, out, _ = cli("plan", "--repo", str(EXAMPLES))
    assert code == 0
    assert out.startswith("**Plan: 7 of 7 managed components to change (7 to add, 0 to update, "
                          "0 to remove); 0 warnings; "
                          "0 validation errors.**")
    # Each changed component in its own block, closed before the next begins.
    assert out.count("<details>") == out.count("</details>")
    assert out.count("<details><summary><b>") == 7
    assert "```mermaid\n%%{init: {'gantt': {'leftPadding': " in out
    assert "}}}%%\ngantt\n    dateFormat x\n" in out
    assert "Instance 0 Create (" in out
    assert cli("plan", "--repo", str(EXAMPLES))[1] == out  # deterministic


def test_the_summary_counts_every_warning_it_lists_and_summaries_use_html_code(cli, tmp_path):
    """Validation's warnings count with the components' (the summary once said "0
    warnings" above a list of 15), and inline code inside <summary> is HTML: GitHub shows
    backticks there as they are."""
    stuck = SERVICE.replace("  engine:\n", "  engine:\n    lifecycle:\n      updateStrategy:\n"
                            "        rollingUpdate: {maxSurge: 0, maxUnavailable: 0}\n")
    repo = write_repo(tmp_path / "repo", {"runtimes/small.yaml": RUNTIME,
                                          "services/small.yaml": stuck})
    code, plan = plan_json(cli, "--repo", str(repo), "--no-forecast")
    assert code == 0
    listed = len(plan["validation"]["warnings"]) + sum(len(c["warnings"])
                                                        for c in plan["components"])
    assert plan["validation"]["warnings"] and listed > len(plan["validation"]["warnings"])
    assert plan["summary"]["warnings"] == listed
    assert f"; {listed} warnings;" in plan["summary"]["text"]
    code, out, _ = cli("plan", "--repo", str(repo), "--no-forecast")
    summaries = [line for line in out.splitlines() if line.startswith("<details><summary>")]
    assert summaries and all("`" not in line for line in summaries), summaries
    assert any("<code>small-engine-" in line for line in summaries), summaries


@pytest.fixture
def settled(cli, tmp_path):
    """A copy of examples/ reconciled until idle on sim:; returns (repo, --cluster, file)."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    path = tmp_path / "cluster.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{path}",
                       "--until-idle")
    assert code == 0, err
    return repo, f"sim:{path}", path


def test_a_deleted_service_is_named_with_what_happens_to_it(cli, settled):
    """A change that removes a service plans it as a removal: named, counted in the
    summary, with what the job does without --prune (it keeps serving, orphaned) and
    with it (torn down); it once read "0 of 6 managed components to change"."""
    repo, spec, _ = settled
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    code, plan = plan_json(cli, "--repo", str(repo), "--cluster", spec, "--no-forecast",
                           "--detailed-exitcode")
    assert code == 2 and plan["changes"]
    assert plan["summary"]["removing"] == 1 and plan["summary"]["changing"] == 0
    assert "(0 to add, 0 to update, 1 to remove)" in plan["summary"]["text"]
    (removed,) = plan["removed"]
    assert removed["service"] == "llama-demo/llama-chat" and removed["component"] == "engine"
    assert removed["instances"] == 1 and removed["serving"] == 1
    assert removed["withoutPrune"].startswith("orphaned")
    assert removed["withPrune"] == "torn down: 1 Instance deleted"
    code, out, _ = cli("plan", "--repo", str(repo), "--cluster", spec, "--no-forecast")
    assert "### Removed from the repository (1)" in out
    assert "| llama-demo/llama-chat engine | 1 | 1 |" in out


def _set_qwen_image(repo: Path, image: str) -> None:
    path = repo / QWEN_RUNTIME
    text = path.read_text()
    path.write_text(text.replace(OLD_IMAGE, image).replace(NEW_IMAGE, image))


def test_an_image_change_shows_the_revision_diff_a_surge_and_its_forecast(cli, settled):
    repo, spec, path = settled
    before = path.read_bytes()
    files = sorted(p.name for p in path.parent.iterdir())
    _set_qwen_image(repo, NEW_IMAGE)
    code, plan = plan_json(cli, "--repo", str(repo), "--cluster", spec, "--detailed-exitcode")
    assert code == 2 and plan["changes"]
    changing = [c for c in plan["components"] if c["changes"]]
    assert [(c["service"], c["component"]) for c in changing] == [
        ("qwen3-0-6b/qwen3-0-6b", "engine")]
    (qwen,) = changing
    revision = qwen["revision"]
    assert revision["old"] != revision["new"] and revision["old"].startswith("qwen3-0-6b-engine-")
    assert revision["changed"] == [
        f"default.spec.containers[ome-container].image: {OLD_IMAGE} → {NEW_IMAGE}"]
    assert "create pod qwen3-0-6b-engine-0-default-1" in qwen["nextStep"]
    assert any("InstanceUpdating" in s and "SurgeThenDrain: Surge" in s
               for s in qwen["nextStep"])
    assert qwen["instances"][0]["operation"] == "Update/Surge SurgeCreate"
    # 25% of two Instances is one surge slot: Instance 1 waits its turn.
    assert qwen["hold"]["gate"] == "Budget"
    assert {c["type"] for c in qwen["conditions"]} == {"Ready", "RolloutStalled"}
    forecast = plan["forecast"]
    assert forecast["idle"]
    spans = [(s["operation"], s["outcome"]) for s in forecast["spans"]]
    assert spans == [("Instance 0 Update (Surge)", "done"), ("Instance 1 Update (Surge)", "done")]
    assert {low["fraction"] for low in forecast["lowestCapacity"]} == {1.0}  # surge keeps serving
    # No writes anywhere: the file and its folder are as they were.
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == files
    code, out, _ = cli("plan", "--repo", str(repo), "--cluster", spec)
    assert code == 0
    assert (f"`default.spec.containers[ome-container].image: {OLD_IMAGE} → {NEW_IMAGE}`"
            in out)
    assert "Instance 1 Update (Surge) (" in out and ":op2, " in out
    # The image as a unified diff of the pod templates, old revision to new.
    assert f"-      image: {OLD_IMAGE}\n+      image: {NEW_IMAGE}\n" in out
    assert "2 Instance operations in 2 batches" in out
    assert path.read_bytes() == before


def test_a_partition_holds_an_instance_in_the_forecast(cli, settled):
    repo, spec, _ = settled
    runtime_file = repo / "runtimes/srt-llama-3-2-3b-instruct.yaml"
    runtime_file.write_text(runtime_file.read_text().replace(OLD_IMAGE, NEW_IMAGE))
    _, plan = plan_json(cli, "--repo", str(repo), "--cluster", spec)
    (llama,) = [c for c in plan["components"] if c["changes"]]
    # Only images changed: InPlaceIfPossible patches Instance 1 in place; partition 1 holds 0.
    assert "unroute pod llama-3-2-3b-instruct-engine-1-default-0" in llama["nextStep"]
    assert any("instance=1 updating to" in s and "(InPlaceIfPossible: InPlace)" in s
               for s in llama["nextStep"])
    forecast = plan["forecast"]
    assert [s["operation"] for s in forecast["spans"]] == ["Instance 1 Update (InPlace)"]
    (held,) = forecast["notUpdated"]
    assert held["text"] == "1/2" and held["ready"].startswith("Staged at partition 1: 1/2")
    (low,) = [c for c in forecast["lowestCapacity"] if c["fraction"] < 1]
    assert (low["text"], low["end"]) == ("1/2", "2/2")  # maxUnavailable 1: one at a time


def test_planning_a_settled_cluster_with_no_change_exits_0(cli, settled):
    repo, spec, path = settled
    before = path.read_bytes()
    code, plan = plan_json(cli, "--repo", str(repo), "--cluster", spec, "--detailed-exitcode")
    assert code == 0 and not plan["changes"]
    for component in plan["components"]:
        assert component["nextStep"] == [] and component["revision"]["changed"] == []
        assert component["revision"]["old"] == component["revision"]["new"]
    assert plan["forecast"]["spans"] == [] and plan["forecast"]["mermaid"] is None
    code, out, _ = cli("plan", "--repo", str(repo), "--cluster", spec)
    assert "No Instance operation: nothing moves." in out
    assert path.read_bytes() == before


def test_a_missing_sim_file_is_planned_as_empty_and_not_created(cli, tmp_path):
    path = tmp_path / "absent.json"
    code, plan = plan_json(cli, "--repo", str(EXAMPLES), "--cluster", f"sim:{path}",
                           "--no-forecast")
    assert code == 0 and plan["forecast"] is None
    assert all(c["revision"]["old"] is None for c in plan["components"])
    assert list(tmp_path.iterdir()) == []


def small_runtime() -> str:
    """conftest's runtime, tolerating the simulated GPU nodes' taint so that its pods schedule."""
    data = yaml.safe_load(RUNTIME)
    data["spec"]["engineConfig"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return yaml.safe_dump(data)


SMALL_VALUES = """
ome:
  controller:
    lifecycle:
      instanceReadyTimeout: 30m
"""


def test_in_place_only_env_change_warns_and_the_forecast_shows_no_move(cli, tmp_path):
    in_place = yaml.safe_load(SERVICE)
    in_place["spec"]["engine"]["lifecycle"] = {"updateStrategy": {"type": "InPlaceOnly"}}
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": small_runtime(),
                                          "service.yaml": yaml.safe_dump(in_place),
                                          "ome-values.yaml": SMALL_VALUES})
    spec = f"sim:{tmp_path / 'cluster.json'}"
    assert cli("reconcile", "--repo", str(repo), "--cluster", spec, "--until-idle")[0] == 0
    in_place["spec"]["engine"]["runner"] = {"env": [{"name": "LOG", "value": "debug"}]}
    (repo / "service.yaml").write_text(yaml.safe_dump(in_place))
    code, plan = plan_json(cli, "--repo", str(repo), "--cluster", spec, "--detailed-exitcode")
    assert code == 2  # the new revision is stored and the stall recorded, though nothing moves
    (engine,) = plan["components"]
    assert [w["code"] for w in engine["warnings"]] == [IN_PLACE_ONLY_WILL_STALL]
    assert engine["revision"]["changed"] == [
        ('default.spec.containers[ome-container].env[LOG]: (unset) → '
         '{"name":"LOG","value":"debug"}')]
    stalled = {c["type"]: c for c in engine["conditions"]}["RolloutStalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "InPlaceUpdateNotPossible")
    assert plan["forecast"]["spans"] == []  # nothing moves
    (stuck,) = plan["forecast"]["notUpdated"]
    assert (stuck["service"], stuck["text"]) == ("demo/small", "0/2")
    assert plan["summary"]["warnings"] == 1
    _, out, _ = cli("plan", "--repo", str(repo), "--cluster", spec)
    assert "**InPlaceOnlyWillStall** demo/small engine:" in out


def test_warnings_of_a_repository_without_operator_settings(cli, tmp_path):
    recreate = yaml.safe_load(SERVICE)
    recreate["spec"]["engine"]["lifecycle"] = {"updateStrategy": {"type": "RecreatePod"}}
    repo = write_repo(tmp_path, {"runtime.yaml": RUNTIME,
                                 "service.yaml": yaml.safe_dump(recreate)})
    _, plan = plan_json(cli, "--repo", str(repo), "--no-forecast")
    (engine,) = plan["components"]
    assert [w["code"] for w in engine["warnings"]] == [RECREATE_TAKES_COMPONENT_OFFLINE,
                                                        NO_INSTANCE_READY_TIMEOUT]


def test_validation_errors_exit_1_and_the_valid_objects_are_still_planned(cli, tmp_path):
    bad = SERVICE.replace("name: small\n", "name: broken\n").replace(
        "maxReplicas: 2", "maxReplicas: 2\n    lifecycle:\n      minReadySeconds: -5")
    repo = write_repo(tmp_path, {"runtime.yaml": RUNTIME, "service.yaml": SERVICE,
                                 "broken.yaml": bad})
    code, out, err = cli("plan", "--repo", str(repo), "-o", "json", "--detailed-exitcode")
    assert code == 1
    plan = json.loads(out)
    assert plan["validation"]["errors"] and "broken" in err
    assert [c["service"] for c in plan["components"]] == ["demo/small"]
    code, out, _ = cli("plan", "--repo", str(repo))
    assert code == 1 and "### Validation errors" in out


class ReadOnly:
    """A simulated cluster behind the Cluster interface that refuses every write."""

    WRITES = ("create_pod", "delete_pod", "set_pod_condition", "patch_pod_images",
              "create_object", "replace_object", "replace_status", "delete_object",
              "record_event", "advance")

    def __init__(self, sim: SimCluster) -> None:
        self._sim = sim

    def __enter__(self):
        self._sim.__enter__()
        return self

    def __exit__(self, *exc):
        self._sim._dirty = False  # nothing to save: nothing was written
        return self._sim.__exit__(*exc)

    def __getattr__(self, name):
        if name in self.WRITES:
            raise AssertionError(f"plan wrote to a live cluster: {name}")
        return getattr(self._sim, name)


def test_a_live_cluster_is_only_observed_and_gets_no_forecast(cli, settled, monkeypatch):
    repo, _, path = settled
    opened = []

    def fake_open(spec, exclusive=True):
        opened.append((spec, exclusive))
        return ReadOnly(SimCluster(path))

    monkeypatch.setattr(plan_command, "open_cluster", fake_open)
    _set_qwen_image(repo, NEW_IMAGE)
    before = path.read_bytes()
    code, plan = plan_json(cli, "--repo", str(repo), "--cluster", "kube", "--detailed-exitcode")
    assert opened == [("kube", False)]
    assert code == 2 and plan["cluster"]["kind"] == "kube"
    assert plan["forecast"] is None and "live cluster" in plan["forecastSkipped"]
    (qwen,) = [c for c in plan["components"] if c["changes"]]
    assert qwen["revision"]["changed"]
    code, out, _ = cli("plan", "--repo", str(repo), "--cluster", "kube")
    assert "No forecast for a live cluster" in out and "```mermaid" not in out
    assert path.read_bytes() == before


# -- the forecast's cadence and assumptions ------------------------------------------------


@pytest.mark.parametrize("schedule, period", [
    ("*/5 * * * *", 300), ("* * * * *", 60), ("0,30 * * * *", 1800), ("0,10 * * * *", 3000),
    # Every schedule a CronJob accepts, read as cron reads it: the longest wait between
    # two runs bounds the forecast.
    ("*/7 * * * *", 420), ("0 3 * * *", 86400), ("@hourly", 3600), ("@daily", 86400),
    ("0 9 * * 1-5", 3 * 86400), ("CRON_TZ=Europe/Paris */10 * * * *", 600),
    ("*/5 * * * 1", 6 * 86400 + 300),
])
def test_a_cadence_is_the_schedules_longest_gap(schedule, period):
    from omegitops.preview.cadence import cadence

    assert cadence(schedule, 900).period == period


@pytest.mark.parametrize("schedule", ["0 0 30 2 *", "61 * * * *", "nope", "* * * *", ""])
def test_what_is_not_a_schedule_is_a_usage_error(schedule):
    from omegitops.preview.cadence import cadence
    from omegitops.util.errors import UsageError

    with pytest.raises(UsageError, match="--schedule"):
        cadence(schedule, 900)


def test_the_next_run_starts_at_the_first_tick_after_the_last_ended():
    from omegitops.preview.cadence import cadence

    every_five = cadence("*/5 * * * *", 900)
    # A run from 0 s that used its 900 s: the ticks at 300, 600 and 900 were skipped
    # (concurrencyPolicy Forbid); the next starts at 1200.
    assert every_five.next_start(0, 900) == 1200
    assert every_five.next_start(0, 899) == 900


def test_a_rollout_longer_than_a_run_is_forecast_run_by_run(tmp_path, cli):
    """Four Instances, one at a time, each waiting out a 250 s window: the last becomes
    available after the first run's 900 s, while no job runs, and is handed over by the
    next run, at the next five-minute tick. The forecast runs the job as the shipped
    pipelines do, counts that wait, and says how many runs the rollout takes."""
    life = {"minReadySeconds": 250, **strategy(maxSurge=1, maxUnavailable=0)}
    repo = write_service(tmp_path / "repo", replicas=4, lifecycle=life)
    state = tmp_path / "c.json"
    assert cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{state}",
               "--until-idle")[0] == 0
    write_service(repo, replicas=4, image="sglang:v2", lifecycle=life)

    def planned(*more: str) -> dict:
        _, out, _ = cli("plan", "--repo", str(repo), "--cluster", f"sim:{state}", "-o", "json",
                        *more)
        return json.loads(out)["forecast"]

    paced, unbounded = planned(), planned("--job-seconds", "7200")
    assert paced["idle"] and unbounded["idle"]
    assert (paced["runs"], unbounded["runs"]) == (2, 1)
    assert paced["seconds"] > unbounded["seconds"] > 4 * 250
    assert (paced["extraPods"], paced["extraGpus"]) == (1, 1)
    assert any("this rollout takes 2 runs" in said for said in paced["assumptions"])
    _, text, _ = cli("plan", "--repo", str(repo), "--cluster", f"sim:{state}")
    assert "passes over 2 job runs" in text


def test_batching_within_the_budgets_reads_as_pacing_not_a_hold():
    """The rollout hold says Budget both while the budgets pace a rollout (others are
    moving) and while they let nothing move at all: only the second is a hold."""
    from omegitops.model.state import Hold, Operation, OperationType, Phase, Row, Step
    from omegitops.preview.planview import pacing

    lifecycle = resolved(service(replicas=3))
    stored = {"gate": "Budget", "reason": "per-Component surge budget 1 exhausted",
              "since": "2026-01-01T00:00:00Z", "target": "svc-engine-new"}
    hold = Hold.from_storage(stored)
    moving = Row(0, 1, Phase.UPDATING, "svc-engine-old",
                 operation=Operation(OperationType.UPDATE, Step.SURGE_CREATE))
    waiting = Row(1, 1, Phase.READY, "svc-engine-old")
    paced = pacing(lifecycle, hold, (moving, waiting))
    assert paced["short"] == "1 at a time"
    assert "1 waits its turn" in paced["text"]
    assert pacing(lifecycle, hold, (waiting, Row(2, 1, Phase.READY, "svc-engine-old"))) is None
    assert pacing(lifecycle, Hold.from_storage({**stored, "gate": "RevisionHeld"}),
                  (moving, waiting)) is None
