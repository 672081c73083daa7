"""Static checks of the example GitOps repository in examples/.

Plain YAML only: these tests must not import omegitops, so that they hold the
examples to the OMENative documents independently of the code that reads them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MANAGED_KINDS = {"InferenceService", "ServingRuntime", "ClusterServingRuntime"}

ALL_YAML = sorted(EXAMPLES.rglob("*.yaml"))
RUNTIME_FILES = sorted((EXAMPLES / "runtimes").glob("*.yaml"))
SERVICE_FILES = sorted((EXAMPLES / "services").rglob("*.yaml"))


def _load_one(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path}: expected exactly one object, got {len(docs)}"
    assert isinstance(docs[0], dict), path
    return docs[0]


def _rel(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


@pytest.fixture(scope="module")
def runtimes() -> dict[str, dict]:
    return {_load_one(p)["metadata"]["name"]: _load_one(p) for p in RUNTIME_FILES}


@pytest.fixture(scope="module")
def services() -> dict[tuple[str, str], dict]:
    out = {}
    for p in SERVICE_FILES:
        obj = _load_one(p)
        out[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
    return out


# --- every file ------------------------------------------------------------


def test_layout_exists():
    for name in ("README.md", "ome-values.yaml", "namespaces.yaml"):
        assert (EXAMPLES / name).is_file(), name
    assert len(RUNTIME_FILES) == 5
    assert len(SERVICE_FILES) == 5


@pytest.mark.parametrize("path", ALL_YAML, ids=_rel)
def test_file_parses(path: Path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict)


@pytest.mark.parametrize("path", ALL_YAML, ids=_rel)
def test_two_space_indent_no_tabs(path: Path):
    for n, line in enumerate(path.read_text().splitlines(), 1):
        assert "\t" not in line, f"{_rel(path)}:{n}: tab"
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, f"{_rel(path)}:{n}: odd indent"


def test_namespaces_file():
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "namespaces.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} == {"Namespace"}
    assert {d["metadata"]["name"] for d in docs} == {"qwen3-0-6b", "llama-demo", "deepseek-r1"}


def test_every_service_namespace_is_declared(services):
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "namespaces.yaml").read_text()) if d]
    declared = {d["metadata"]["name"] for d in docs}
    assert {ns for ns, _ in services} <= declared


@pytest.mark.parametrize("path", RUNTIME_FILES + SERVICE_FILES, ids=_rel)
def test_one_managed_object_per_file_named_after_it(path: Path):
    obj = _load_one(path)
    assert obj["apiVersion"] == "ome.io/v1beta1"
    assert obj["kind"] in MANAGED_KINDS
    assert path.stem == obj["metadata"]["name"]


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=_rel)
def test_runtime_files_are_cluster_runtimes(path: Path):
    obj = _load_one(path)
    assert obj["kind"] == "ClusterServingRuntime"
    assert "namespace" not in obj["metadata"]


@pytest.mark.parametrize("path", SERVICE_FILES, ids=_rel)
def test_service_files_sit_in_their_namespace_folder(path: Path):
    obj = _load_one(path)
    assert obj["kind"] == "InferenceService"
    assert path.parent.name == obj["metadata"]["namespace"]


def test_names_are_dns1123_labels(runtimes, services):
    names = set(runtimes)
    for ns, name in services:
        names |= {ns, name}
    for name in names:
        assert len(name) <= 63 and DNS1123_LABEL.match(name), name


# --- services ----------------------------------------------------------------


def test_every_service_names_an_existing_runtime(services, runtimes):
    for key, svc in services.items():
        assert svc["spec"]["runtime"]["name"] in runtimes, key


def test_every_service_is_omenative(services):
    for key, svc in services.items():
        assert svc["spec"]["deploymentMode"] == "OMENative", key


def test_the_five_services(services):
    assert set(services) == {
        ("qwen3-0-6b", "qwen3-0-6b"),
        ("llama-demo", "llama-3-2-3b-instruct"),
        ("llama-demo", "llama-chat"),
        ("llama-demo", "llama-pd"),
        ("deepseek-r1", "deepseek-r1"),
    }


def test_qwen3_0_6b_matches_instances_document(services):
    assert services[("qwen3-0-6b", "qwen3-0-6b")]["spec"] == {
        "deploymentMode": "OMENative",
        "model": {"name": "qwen3-0-6b"},
        "runtime": {"name": "srt-qwen3-0-6b"},
        "engine": {"minReplicas": 2, "maxReplicas": 2},
    }


def test_llama_3_2_3b_matches_update_strategies_document(services):
    assert services[("llama-demo", "llama-3-2-3b-instruct")]["spec"] == {
        "deploymentMode": "OMENative",
        "model": {"name": "llama-3-2-3b-instruct"},
        "runtime": {"name": "srt-llama-3-2-3b-instruct"},
        "engine": {
            "minReplicas": 2,
            "maxReplicas": 2,
            "lifecycle": {
                "updateStrategy": {
                    "type": "InPlaceIfPossible",
                    "rollingUpdate": {"partition": 1, "maxUnavailable": 1},
                }
            },
        },
    }


def test_llama_chat_matches_min_ready_seconds_document(services):
    assert services[("llama-demo", "llama-chat")]["spec"] == {
        "deploymentMode": "OMENative",
        "model": {"name": "llama-3-2-1b-instruct"},
        "runtime": {"name": "srt-llama-3-2-1b-instruct"},
        "engine": {"minReplicas": 1, "maxReplicas": 1, "lifecycle": {"minReadySeconds": 900}},
    }


def test_llama_pd_matches_restart_policy_document(services):
    assert services[("llama-demo", "llama-pd")]["spec"] == {
        "deploymentMode": "OMENative",
        "model": {"name": "llama-3-2-1b-instruct"},
        "runtime": {"name": "srt-llama-3-2-1b-instruct-pd"},
        "engine": {
            "minReplicas": 2,
            "maxReplicas": 2,
            "lifecycle": {
                "restartPolicy": "RecreateInstanceOnPodRestart",
                "updateStrategy": {
                    "type": "SurgeThenDrain",
                    "rollingUpdate": {"maxUnavailable": 1},
                },
            },
        },
        "decoder": {"minReplicas": 1, "maxReplicas": 1, "lifecycle": {"restartPolicy": "None"}},
        "router": {"minReplicas": 1, "maxReplicas": 1},
    }


def test_multinode_service(services, runtimes):
    spec = services[("deepseek-r1", "deepseek-r1")]["spec"]
    assert spec == {
        "deploymentMode": "OMENative",
        "model": {"name": "deepseek-r1"},
        "runtime": {"name": "srt-deepseek-rdma"},
        "engine": {"minReplicas": 2, "maxReplicas": 2},
    }
    engine = runtimes[spec["runtime"]["name"]]["spec"]["engineConfig"]
    assert "leader" in engine and "worker" in engine


# --- runtimes ----------------------------------------------------------------


def test_runtime_set(runtimes):
    assert set(runtimes) == {
        "srt-qwen3-0-6b",
        "srt-llama-3-2-3b-instruct",
        "srt-llama-3-2-1b-instruct",
        "srt-llama-3-2-1b-instruct-pd",
        "srt-deepseek-rdma",
    }


def test_exactly_one_runtime_sets_min_ready_seconds_1200(runtimes):
    having = [
        name
        for name, rt in runtimes.items()
        if (rt["spec"].get("engineConfig") or {}).get("lifecycle", {}).get("minReadySeconds")
        == 1200
    ]
    assert having == ["srt-llama-3-2-1b-instruct"]
    assert runtimes["srt-llama-3-2-1b-instruct"]["spec"]["engineConfig"]["lifecycle"] == {
        "minReadySeconds": 1200
    }


def test_only_the_documented_runtime_lifecycles(runtimes):
    for name, rt in runtimes.items():
        for cfg in ("engineConfig", "decoderConfig", "routerConfig"):
            lifecycle = (rt["spec"].get(cfg) or {}).get("lifecycle")
            if (name, cfg) == ("srt-llama-3-2-1b-instruct", "engineConfig"):
                continue
            if (name, cfg) == ("srt-deepseek-rdma", "engineConfig"):
                assert lifecycle == {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}}
                continue
            assert lifecycle is None, (name, cfg)


def test_multinode_runtime_has_leader_and_sized_worker(runtimes):
    engine = runtimes["srt-deepseek-rdma"]["spec"]["engineConfig"]
    leader, worker = engine["leader"], engine["worker"]
    assert leader["runner"]["image"] and worker["runner"]["image"]
    assert isinstance(worker["size"], int) and worker["size"] == 1
    assert "runner" not in engine, "a gang runtime puts its runners under leader/worker"
    # every volumeMount of a runner names a volume its pod declares
    for part in (leader, worker):
        declared = {v["name"] for v in part.get("volumes", []) + engine.get("volumes", [])}
        mounts = {m["name"] for m in part["runner"].get("volumeMounts", [])}
        assert mounts <= declared


def _gpus(runner: dict) -> int:
    """GPUs a runner asks for; the catalogue writes them as 8 or "8"."""
    res = runner.get("resources", {})
    requests = int(res.get("requests", {}).get("nvidia.com/gpu", 0))
    limits = int(res.get("limits", {}).get("nvidia.com/gpu", 0))
    assert requests == limits, runner["name"]
    return limits


def test_gpu_requests(runtimes):
    for name in ("srt-qwen3-0-6b", "srt-llama-3-2-3b-instruct", "srt-llama-3-2-1b-instruct"):
        assert _gpus(runtimes[name]["spec"]["engineConfig"]["runner"]) == 1, name
    pd = runtimes["srt-llama-3-2-1b-instruct-pd"]["spec"]
    assert _gpus(pd["engineConfig"]["runner"]) == 1
    assert _gpus(pd["decoderConfig"]["runner"]) == 1
    assert _gpus(pd["routerConfig"]["runner"]) == 0
    ds = runtimes["srt-deepseek-rdma"]["spec"]["engineConfig"]
    assert _gpus(ds["leader"]["runner"]) == 8
    assert _gpus(ds["worker"]["runner"]) == 8


def test_runtimes_with_gpus_tolerate_the_gpu_taint(runtimes):
    taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    for name, rt in runtimes.items():
        for cfg in ("engineConfig", "decoderConfig"):
            c = rt["spec"].get(cfg)
            if not c:
                continue
            parts = [c[k] for k in ("leader", "worker") if k in c] or [c]
            for part in parts:
                assert taint in part.get("tolerations", []), (name, cfg)


def test_runtime_containers_have_probes(runtimes):
    for name, rt in runtimes.items():
        for cfg in ("engineConfig", "decoderConfig", "routerConfig"):
            c = rt["spec"].get(cfg)
            if not c:
                continue
            runners = [c["runner"]] if "runner" in c else [c["leader"]["runner"]]
            for runner in runners:
                assert "readinessProbe" in runner, (name, cfg)
                assert runner["name"] in ("ome-container", "router"), (name, cfg)


# --- operator settings -------------------------------------------------------


def test_ome_values():
    values = yaml.safe_load((EXAMPLES / "ome-values.yaml").read_text())
    ctl = values["ome"]["controller"]
    assert ctl["deploymentMode"] == "RawDeployment"
    assert "minReadySeconds" not in ctl
    for component in ("engine", "decoder", "router"):
        assert ctl["updateStrategy"][component] == {
            "type": "SurgeThenDrain",
            "maxSurge": "25%",
            "maxUnavailable": "25%",
        }
    assert ctl["lifecycle"] == {
        "revisionHistoryLimit": 10,
        "stuckPodGracePeriod": "60s",
        "unschedulableGracePeriod": "15m",
        "instanceReadyTimeout": "30m",
        "repairBatchSize": 10,
        "abandonedReplacementGracePeriod": "30s",
        "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"},
    }
    assert ctl["autoMigrate"] == {"maxAttempts": 3}
