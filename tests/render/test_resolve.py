"""Precedence rules of the documents, one test each, on the pure resolver."""

import copy

import pytest

from omegitops.render.operator import parse_operator_values
from omegitops.render.resolve import components_of, resolve_component

CHART = parse_operator_values(
    {
        "ome": {
            "controller": {
                "deploymentMode": "RawDeployment",
                "updateStrategy": {
                    c: {"type": "SurgeThenDrain", "maxSurge": "25%", "maxUnavailable": "25%"}
                    for c in ("engine", "decoder", "router")
                },
                "lifecycle": {"instanceReadyTimeout": "30m", "revisionHistoryLimit": 10},
            }
        }
    }
)
NOTHING = parse_operator_values(None)


def isvc(engine=None, **spec):
    body = {"deploymentMode": "OMENative", "runtime": {"name": "rt"}, **spec}
    body["engine"] = {"minReplicas": 2, "maxReplicas": 2, **(engine or {})}
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns"}, "spec": body}


def runtime(engine_config=None, **spec):
    config = {"runner": {"name": "ome-container", "image": "img:1"}, **(engine_config or {})}
    return {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
            "metadata": {"name": "rt"}, "spec": {"engineConfig": config, **spec}}


GANG_RUNTIME = runtime({"runner": None, "leader": {"runner": {"name": "ome-container"}},
                        "worker": {"size": 2, "runner": {"name": "ome-container"}}})


def field(result, name):
    resolved = result.fields[name]
    return resolved.value, resolved.source


def test_strategy_type_alone_gets_the_charts_max_unavailable_only():
    # update-strategies.txt: the service sets only InPlaceIfPossible, so its
    # engine gets maxUnavailable from the chart, and no maxSurge.
    service = isvc({"lifecycle": {"updateStrategy": {"type": "InPlaceIfPossible"}}})
    result = resolve_component(service, runtime(), "engine", CHART)
    assert result.lifecycle_spec()["updateStrategy"] == {
        "rollingUpdate": {"maxUnavailable": "25%"},
        "type": "InPlaceIfPossible",
    }
    assert "updateStrategy.rollingUpdate.maxSurge" not in result.fields


def test_surge_then_drain_reads_both_budgets():
    result = resolve_component(isvc(), runtime(), "engine", CHART)
    assert field(result, "updateStrategy.type") == ("SurgeThenDrain", "operator")
    assert field(result, "updateStrategy.rollingUpdate.maxSurge") == ("25%", "operator")
    assert field(result, "updateStrategy.rollingUpdate.maxUnavailable") == ("25%", "operator")


def test_runtime_strategy_merges_field_by_field():
    # "an InferenceService that sets only the type keeps the runtime's budgets"
    rt = runtime({"lifecycle": {"updateStrategy": {
        "type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}}})
    service = isvc({"lifecycle": {"updateStrategy": {"type": "InPlaceOnly"}}})
    result = resolve_component(service, rt, "engine", CHART)
    assert field(result, "updateStrategy.type") == ("InPlaceOnly", "isvc")
    assert field(result, "updateStrategy.rollingUpdate.maxUnavailable") == (1, "runtime")


def test_default_strategy_without_operator_settings_has_no_budgets():
    result = resolve_component(isvc(), runtime(), "engine", NOTHING)
    assert field(result, "updateStrategy.type") == ("SurgeThenDrain", "default")
    assert field(result, "updateStrategy.rollingUpdate.maxSurge") == (None, "default")
    assert field(result, "updateStrategy.rollingUpdate.maxUnavailable") == (None, "default")
    assert result.lifecycle_spec() == {}


def test_partition_comes_from_service_or_runtime_never_the_operator():
    service = isvc({"lifecycle": {"updateStrategy": {"rollingUpdate": {"partition": 1}}}})
    assert field(resolve_component(service, runtime(), "engine", CHART),
                 "updateStrategy.rollingUpdate.partition") == (1, "isvc")
    assert field(resolve_component(isvc(), runtime(), "engine", CHART),
                 "updateStrategy.rollingUpdate.partition") == (0, "default")


def test_min_ready_seconds_precedence_from_the_document():
    # min-ready-seconds.txt: llama-chat sets 900 and keeps it when the
    # runtime's default is 1200; remove it and the runtime's 1200 takes over.
    rt = runtime({"lifecycle": {"minReadySeconds": 1200}})
    chat = isvc({"lifecycle": {"minReadySeconds": 900}})
    assert field(resolve_component(chat, rt, "engine", CHART), "minReadySeconds") == (900, "isvc")
    removed = copy.deepcopy(chat)
    removed["spec"]["engine"]["lifecycle"]["minReadySeconds"] = None  # the merge patch
    assert field(resolve_component(removed, rt, "engine", CHART),
                 "minReadySeconds") == (1200, "runtime")


def test_min_ready_seconds_zero_in_the_service_wins():
    rt = runtime({"lifecycle": {"minReadySeconds": 1200}})
    zero = isvc({"lifecycle": {"minReadySeconds": 0}})
    assert field(resolve_component(zero, rt, "engine", CHART), "minReadySeconds") == (0, "isvc")


def test_min_ready_seconds_cluster_default_then_zero():
    cluster = parse_operator_values({"ome": {"controller": {"minReadySeconds": 60}}})
    assert field(resolve_component(isvc(), runtime(), "engine", cluster),
                 "minReadySeconds") == (60, "operator")
    assert field(resolve_component(isvc(), runtime(), "engine", NOTHING),
                 "minReadySeconds") == (0, "default")


def test_restart_policy_defaults_by_shape():
    single = resolve_component(isvc(), runtime(), "engine", CHART)
    assert field(single, "restartPolicy") == ("None", "default")
    gang = resolve_component(isvc(), GANG_RUNTIME, "engine", CHART)
    assert gang.shape == "gang" and gang.worker_size == 2
    assert field(gang, "restartPolicy") == ("RecreateInstanceOnPodRestart", "default")


def test_restart_policy_service_then_runtime_and_no_operator_level():
    rt = runtime({"lifecycle": {"restartPolicy": "RecreateInstanceOnPodRestart"}})
    assert field(resolve_component(isvc(), rt, "engine", CHART),
                 "restartPolicy") == ("RecreateInstanceOnPodRestart", "runtime")
    # The decoder of llama-pd states its default, None, which overrides the runtime.
    service = isvc({"lifecycle": {"restartPolicy": "None"}})
    assert field(resolve_component(service, rt, "engine", CHART),
                 "restartPolicy") == ("None", "isvc")
    # A runtime's None on a gang overrides the shape default.
    gang_rt = copy.deepcopy(GANG_RUNTIME)
    gang_rt["spec"]["engineConfig"]["lifecycle"] = {"restartPolicy": "None"}
    assert field(resolve_component(isvc(), gang_rt, "engine", CHART),
                 "restartPolicy") == ("None", "runtime")


def test_llama_pd_restart_policy_per_component():
    service = isvc(
        {"lifecycle": {"restartPolicy": "RecreateInstanceOnPodRestart", "updateStrategy": {
            "type": "SurgeThenDrain", "rollingUpdate": {"maxUnavailable": 1}}}},
        decoder={"minReplicas": 1, "maxReplicas": 1, "lifecycle": {"restartPolicy": "None"}},
        router={"minReplicas": 1, "maxReplicas": 1},
    )
    rt = runtime(decoderConfig={"runner": {"name": "ome-container"}},
                 routerConfig={"runner": {"name": "router"}})
    assert components_of(service, rt) == ["engine", "decoder", "router"]
    engine = resolve_component(service, rt, "engine", CHART)
    assert field(engine, "restartPolicy") == ("RecreateInstanceOnPodRestart", "isvc")
    assert field(engine, "updateStrategy.rollingUpdate.maxUnavailable") == (1, "isvc")
    assert field(engine, "updateStrategy.rollingUpdate.maxSurge") == ("25%", "operator")
    assert field(resolve_component(service, rt, "decoder", CHART),
                 "restartPolicy") == ("None", "isvc")
    assert field(resolve_component(service, rt, "router", CHART),
                 "restartPolicy") == ("None", "default")


def test_components_named_by_the_service_only_and_always_the_engine():
    rt = runtime(routerConfig={"runner": {"name": "router"}})
    # qwen3-0-6b: the runtime has a router, the service names only the engine.
    assert components_of(isvc(), rt) == ["engine"]
    no_engine = isvc()
    del no_engine["spec"]["engine"]
    no_engine["spec"]["router"] = {"minReplicas": 1}
    assert components_of(no_engine, rt) == ["engine", "router"]


def test_instance_ready_timeout_precedence_and_unset():
    rt = runtime({"lifecycle": {"instanceReadyTimeout": "45m"}})
    assert field(resolve_component(isvc(), rt, "engine", CHART),
                 "instanceReadyTimeout") == ("45m", "runtime")
    assert field(resolve_component(isvc(), runtime(), "engine", CHART),
                 "instanceReadyTimeout") == ("30m", "operator")
    assert field(resolve_component(isvc(), runtime(), "engine", NOTHING),
                 "instanceReadyTimeout") == (None, "default")


def test_revision_history_annotation_overrides_the_chart():
    service = isvc()
    service["metadata"]["annotations"] = {"ome.io/revision-history-limit": "3"}
    assert field(resolve_component(service, runtime(), "engine", CHART),
                 "revisionHistoryLimit") == (3, "isvc")
    assert field(resolve_component(isvc(), runtime(), "engine", CHART),
                 "revisionHistoryLimit") == (10, "operator")
    assert field(resolve_component(isvc(), runtime(), "engine", NOTHING),
                 "revisionHistoryLimit") == (None, "default")


@pytest.mark.parametrize(
    "where, expected",
    [
        ("spec", ("OMENative", "isvc")),
        ("component-annotation", ("RawDeployment", "isvc")),
        ("runtime-annotation", ("RawDeployment", "runtime")),
    ],
)
def test_deployment_mode_annotations_override_the_spec(where, expected):
    service, rt = isvc(), runtime()
    annotation = {"ome.io/deploymentMode": "RawDeployment"}
    if where == "component-annotation":
        service["spec"]["engine"]["annotations"] = annotation
    elif where == "runtime-annotation":
        rt["spec"]["engineConfig"]["annotations"] = annotation
    result = resolve_component(service, rt, "engine", CHART)
    assert (result.mode.value, result.mode.source) == expected
    assert result.managed == (expected[0] == "OMENative")
    if not result.managed:
        assert result.fields == {}


def test_mode_from_operator_then_default():
    service = isvc()
    del service["spec"]["deploymentMode"]
    native = parse_operator_values({"ome": {"controller": {"deploymentMode": "OMENative"}}})
    assert resolve_component(service, runtime(), "engine", native).mode.source == "operator"
    result = resolve_component(service, runtime(), "engine", NOTHING)
    assert (result.mode.value, result.mode.source) == ("RawDeployment", "default")


def test_the_planner_reads_the_same_values_typed():
    """``settings`` holds what ``fields`` resolved, typed: budgets as written, durations
    in seconds (with the text for messages), the operator's settings as it parsed them."""
    from omegitops.model.settings import ComponentSettings, UpdateRetry

    values = copy.deepcopy({"ome": {"controller": {
        "updateStrategy": {"engine": {"type": "SurgeThenDrain", "maxSurge": "25%"}},
        "lifecycle": {"instanceReadyTimeout": "30m", "stuckPodGracePeriod": "5m",
                      "repairBatchSize": 2, "revisionHistoryLimit": 3,
                      "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}},
        "autoMigrate": {"maxAttempts": 2}}}})
    service = isvc({"lifecycle": {"updateStrategy": {"rollingUpdate": {"partition": 1}},
                                  "restartPolicy": "RecreateInstanceOnPodRestart"}})
    settings = resolve_component(service, runtime(), "engine",
                                 parse_operator_values(values)).settings
    assert settings == ComponentSettings(
        strategy="SurgeThenDrain", partition=1, max_surge="25%", max_unavailable=None,
        restart_policy="RecreateInstanceOnPodRestart", instance_ready_timeout=1800.0,
        instance_ready_timeout_text="30m", revision_history_limit=3,
        stuck_pod_grace_period=300.0, repair_batch_size=2,
        update_retry=UpdateRetry(max_attempts=3, initial_backoff=60.0),
        auto_migrate_max_attempts=2)
    # Attempt 2 waits the initial backoff, attempt 3 twice that.
    assert [settings.update_retry.delay_before(n) for n in (1, 2, 3)] == [0.0, 60.0, 120.0]
    # A component not managed by OMENative has the documents' "without the setting".
    assert resolve_component(isvc(deploymentMode="RawDeployment"), runtime(), "engine",
                             CHART).settings == ComponentSettings()
