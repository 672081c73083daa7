"""Operator settings: the documents' messages for invalid values."""

import pytest

from omegitops.render.operator import parse_operator_values
from omegitops.util.errors import OperatorConfigError


def controller(**settings):
    return {"ome": {"controller": settings}}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"minReadySeconds": -30}, "invalid deploy config, minReadySeconds must be >= 0, got -30"),
        ({"lifecycle": {"repairBatchSize": 0}},
         "invalid deploy config, lifecycle.repairBatchSize must be > 0, got 0"),
        ({"lifecycle": {"repairBatchSize": -2}},
         "invalid deploy config, lifecycle.repairBatchSize must be > 0, got -2"),
        ({"lifecycle": {"stuckPodGracePeriod": "-1m"}},
         "invalid deploy config, lifecycle.stuckPodGracePeriod must be >= 0, got -1m"),
        ({"lifecycle": {"instanceReadyTimeout": "soon"}},
         "invalid deploy config, lifecycle.instanceReadyTimeout: invalid duration 'soon'"),
        ({"updateStrategy": {"engine": {"maxSurge": 0, "maxUnavailable": "0%"}}},
         "invalid deploy config, updateStrategy.engine: maxSurge and maxUnavailable cannot both"),
        ({"updateStrategy": {"decoder": {"type": "RecreatePod", "maxUnavailable": 0}}},
         ("invalid deploy config, updateStrategy.decoder.maxUnavailable must be > 0 under "
         "RecreatePod")),
        ({"updateStrategy": {"router": {"type": "Rolling"}}},
         "invalid deploy config, updateStrategy.router.type must be one of"),
        ({"updateStrategy": {"engine": {"maxSurge": "150%"}}},
         "invalid deploy config, updateStrategy.engine.maxSurge must be at most 100%"),
        ({"deploymentMode": "Knative"}, "invalid deploy config, deploymentMode must be one of"),
    ],
)
def test_invalid_settings_stop_with_the_documents_message(settings, message):
    with pytest.raises(OperatorConfigError) as err:
        parse_operator_values(controller(**settings))
    assert str(err.value).startswith(message)


def test_values_must_be_a_mapping():
    with pytest.raises(OperatorConfigError, match="must be a mapping, got a list"):
        parse_operator_values([1, 2])


def test_chart_defaults_parse():
    settings = parse_operator_values(controller(
        updateStrategy={"engine": {"type": "SurgeThenDrain", "maxSurge": "25%",
                                   "maxUnavailable": "25%"}},
        lifecycle={"revisionHistoryLimit": 10, "stuckPodGracePeriod": "60s",
                   "unschedulableGracePeriod": "15m", "instanceReadyTimeout": "30m",
                   "repairBatchSize": 10, "abandonedReplacementGracePeriod": "30s",
                   "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}},
        autoMigrate={"maxAttempts": 3},
    ))
    assert settings.unschedulable_grace_period == 900
    assert settings.instance_ready_timeout == 1800
    assert settings.strategy_for("engine").max_surge == "25%"
    assert settings.strategy_for("router").type is None
    # "three attempts, the second after one minute and the third after two more"
    retry = settings.update_retry
    assert retry.max_attempts == 3
    assert [retry.delay_before(n) for n in (2, 3)] == [60, 120]


def test_nothing_set_means_nothing():
    settings = parse_operator_values({"global": {"hub": "x"}})
    assert settings.min_ready_seconds is None
    assert settings.instance_ready_timeout is None
    assert settings.repair_batch_size is None
    assert settings.update_retry is None


@pytest.mark.parametrize("text", [
    "ome:\n",
    "ome:\n  controller:\n    # deploymentMode: OMENative\n",
    "ome:\n  controller:\n    lifecycle:\n    updateStrategy:\n      engine:\n",
])
def test_keys_left_empty_are_the_charts_defaults_as_helm_reads_them(tmp_path, text):
    """Every setting under a key commented out leaves the key null: Helm reads it as
    "the chart's default", not as a value of the wrong type that stops every service."""
    from omegitops.manifests.operator_values import read_operator_values

    (tmp_path / "ome-values.yaml").write_text(text)
    settings, path = read_operator_values(tmp_path)
    assert path == "ome-values.yaml"
    assert settings.deployment_mode is None and settings.update_strategy == {}
