"""The shipped examples/ repository validates and resolves as the documents say."""

import json

from tests.conftest import EXAMPLES


def resolved(cli):
    code, out, err = cli("resolve", "--repo", str(EXAMPLES), "-o", "json")
    assert code == 0, err
    return {(v["inferenceService"], v["component"]): v for v in json.loads(out)}


def value(view, name):
    field = view["lifecycle"][name]
    return field["value"], field["source"]


def test_examples_validate(cli):
    code, out, _ = cli("validate", "--repo", str(EXAMPLES))
    assert code == 0
    assert "0 errors" in out


def test_examples_resolve_as_the_documents_prescribe(cli):
    views = resolved(cli)
    assert set(views) == {
        ("qwen3-0-6b/qwen3-0-6b", "engine"),
        ("llama-demo/llama-3-2-3b-instruct", "engine"),
        ("llama-demo/llama-chat", "engine"),
        ("llama-demo/llama-pd", "engine"),
        ("llama-demo/llama-pd", "decoder"),
        ("llama-demo/llama-pd", "router"),
        ("deepseek-r1/deepseek-r1", "engine"),
    }
    for view in views.values():
        assert view["managed"] and view["deploymentMode"] == {"value": "OMENative",
                                                             "source": "isvc"}
    qwen = views[("qwen3-0-6b/qwen3-0-6b", "engine")]
    assert qwen["replicas"] == 2 and qwen["shape"] == "single"
    assert value(qwen, "updateStrategy.type") == ("SurgeThenDrain", "operator")
    assert value(qwen, "updateStrategy.rollingUpdate.maxSurge") == ("25%", "operator")
    assert value(qwen, "restartPolicy") == ("None", "default")

    pacing = views[("llama-demo/llama-3-2-3b-instruct", "engine")]
    assert value(pacing, "updateStrategy.type") == ("InPlaceIfPossible", "isvc")
    assert value(pacing, "updateStrategy.rollingUpdate.partition") == (1, "isvc")
    assert value(pacing, "updateStrategy.rollingUpdate.maxUnavailable") == (1, "isvc")
    assert "updateStrategy.rollingUpdate.maxSurge" not in pacing["lifecycle"]

    chat = views[("llama-demo/llama-chat", "engine")]
    assert value(chat, "minReadySeconds") == (900, "isvc")  # the runtime's 1200 loses

    pd = views[("llama-demo/llama-pd", "engine")]
    assert value(pd, "restartPolicy") == ("RecreateInstanceOnPodRestart", "isvc")
    assert value(views[("llama-demo/llama-pd", "decoder")], "restartPolicy") == ("None", "isvc")
    assert value(views[("llama-demo/llama-pd", "router")], "restartPolicy") == ("None", "default")

    gang = views[("deepseek-r1/deepseek-r1", "engine")]
    assert gang["shape"] == "gang" and gang["workers"] == 1
    assert value(gang, "restartPolicy") == ("RecreateInstanceOnPodRestart", "default")
    assert value(gang, "updateStrategy.rollingUpdate.maxUnavailable") == (1, "runtime")
    assert value(gang, "instanceReadyTimeout") == ("30m", "operator")
    assert value(gang, "updateRetry") == ({"maxAttempts": 3, "initialBackoff": "1m"},
                                          "operator")


def test_resolve_table_and_yaml(cli):
    code, out, _ = cli("resolve", "--repo", str(EXAMPLES))
    assert code == 0
    assert "llama-demo/llama-chat" in out and "minReadySeconds" in out and "900" in out
    code, out, _ = cli("resolve", "--repo", str(EXAMPLES), "-o", "yaml")
    assert code == 0 and "inferenceService: llama-demo/llama-chat" in out


def test_the_example_hpa_is_skipped_and_targets_an_inference_replica(cli):
    """examples/autoscaling/: an HPA for an InferenceReplica, valid as Kubernetes has it,
    which omegitops lists as a kind it does not manage and never reads as a service."""
    import kubernetes_validate
    import yaml

    path = EXAMPLES / "autoscaling" / "qwen3-0-6b-engine-hpa.yaml"
    hpa = yaml.safe_load(path.read_text())
    kubernetes_validate.validate(hpa, "1.30", strict=True)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1",
                                             "kind": "InferenceReplica",
                                             "name": "qwen3-0-6b-engine"}
    code, out, _ = cli("validate", "--repo", str(EXAMPLES))
    assert code == 0 and "0 errors" in out
    skipped = out.split("skipped (kinds omegitops does not manage):")[1]
    assert "HorizontalPodAutoscaler qwen3-0-6b-engine" in skipped
    assert "autoscaling/qwen3-0-6b-engine-hpa.yaml" in skipped
