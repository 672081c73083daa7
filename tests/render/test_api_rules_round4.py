"""Pods the API server refuses, round four: port names and protocols, probes and hooks,
env names and their valueFrom, subPaths, resource names, pull, termination and DNS
policies, service accounts and tolerations.

Each case is refused by ``validate`` (file, line, the API server's words and the field to
fix) and by ``sim:`` at pod create, as the API server refuses it: the control plane holds
each case to a server-side dry run (``tests/controlplane/test_api_server_rendering_round4.py``).
A component whose pods would be refused keeps its running pods: RecreatePod deletes
nothing for a template the API server would refuse.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import RUNTIME, SERVICE, write_repo
from tests.render.test_api_rules import service_with

CACHE = [{"name": "cache", "emptyDir": {}}]


def mount(**extra) -> dict:
    return {"volumes": CACHE,
            "runner": {"volumeMounts": [{"name": "cache", "mountPath": "/cache", **extra}]}}


def env(**var) -> dict:
    return {"runner": {"env": [var]}}


# case: (what the service's engine sets, a piece of the API server's message, the field
# (the API server's path without its container and list indices))
CASES = {
    # validateContainerPorts, IsValidPortName
    "port name over 15 characters": (
        {"runner": {"ports": [{"containerPort": 8080, "name": "metrics-endpoint-x"}]}},
        "must be no more than 15 characters", "ports.name"),
    "port name in upper case": (
        {"runner": {"ports": [{"containerPort": 8080, "name": "HTTP"}]}},
        "must contain only alpha-numeric characters", "ports.name"),
    "port name of digits": ({"runner": {"ports": [{"containerPort": 8080, "name": "8080"}]}},
                            "must contain at least one letter", "ports.name"),
    "protocol in lower case": (
        {"runner": {"ports": [{"containerPort": 8080, "protocol": "tcp"}]}},
        'supported values: "SCTP", "TCP", "UDP"', "ports.protocol"),
    # validateProbe, validateHandler, ValidatePortNumOrName
    "probe on port 0": ({"runner": {"readinessProbe": {"httpGet": {"path": "/h", "port": 0}}}},
                        "must be between 1 and 65535", "readinessProbe.httpGet.port"),
    "grpc probe on port 0": ({"runner": {"livenessProbe": {"grpc": {"port": 0}}}},
                             "must be between 1 and 65535", "livenessProbe.grpc.port"),
    "probe on a port name too long": (
        {"runner": {"startupProbe": {"tcpSocket": {"port": "inference-server"}}}},
        "must be no more than 15 characters", "startupProbe.tcpSocket.port"),
    "probe with no handler": ({"runner": {"readinessProbe": {"periodSeconds": 5}}},
                              "must specify a handler type", "readinessProbe"),
    "probe with two handlers": (
        {"runner": {"readinessProbe": {"exec": {"command": ["true"]},
                                       "tcpSocket": {"port": 8080}}}},
        "may not specify more than 1 handler type", "readinessProbe.tcpSocket"),
    "probe scheme in lower case": (
        {"runner": {"readinessProbe": {"httpGet": {"port": 8080, "scheme": "http"}}}},
        'supported values: "HTTP", "HTTPS"', "readinessProbe.httpGet.scheme"),
    "liveness successThreshold 2": (
        {"runner": {"livenessProbe": {"tcpSocket": {"port": 8080}, "successThreshold": 2}}},
        "must be 1", "livenessProbe.successThreshold"),
    "negative probe period": (
        {"runner": {"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": -1}}},
        "must be greater than or equal to 0", "readinessProbe.periodSeconds"),
    "preStop exec with no command": ({"runner": {"lifecycle": {"preStop": {"exec": {}}}}},
                                     "Required value", "lifecycle.preStop.exec.command"),
    # ValidateEnv, IsRelaxedEnvVarName, validateEnvVarValueFrom, validateObjectFieldSelector
    "empty env name": (env(name="", value="1"), "Required value", "env.name"),
    "env name not ASCII": (env(name="MODÈLE", value="1"),
                           "printable ASCII characters", "env.name"),
    "unknown fieldRef.fieldPath": (env(name="PHASE", valueFrom={"fieldRef": {
        "fieldPath": "status.phase"}}), '"metadata.name"', "env.valueFrom.fieldRef.fieldPath"),
    "fieldRef subscript on a field without one": (env(name="NODE", valueFrom={"fieldRef": {
        "fieldPath": "spec.nodeName['x']"}}), "does not support subscript",
        "env.valueFrom.fieldRef.fieldPath"),
    "fieldRef apiVersion v2": (env(name="POD", valueFrom={"fieldRef": {
        "apiVersion": "v2", "fieldPath": "metadata.name"}}), "unsupported pod version",
        "env.valueFrom.fieldRef.fieldPath"),
    "unknown resourceFieldRef.resource": (env(name="GPUS", valueFrom={"resourceFieldRef": {
        "resource": "limits.nvidia.com/gpu"}}), '"limits.cpu"',
        "env.valueFrom.resourceFieldRef.resource"),
    "env with a value and a valueFrom": (env(name="POD", value="x", valueFrom={"fieldRef": {
        "fieldPath": "metadata.name"}}), "may not be specified when `value` is not empty",
        "env.valueFrom"),
    # ValidateVolumeMounts, validateLocalDescendingPath
    ".. in a subPath": (mount(subPath="models/../../etc"), "must not contain '..'",
                        "volumeMounts.subPath"),
    "absolute subPathExpr": (mount(subPathExpr="/$(POD_NAME)"), "must be a relative path",
                             "volumeMounts.subPathExpr"),
    "subPath and subPathExpr": (mount(subPath="a", subPathExpr="$(POD_NAME)"),
                                "mutually exclusive", "volumeMounts.subPathExpr"),
    # validateContainerResourceName
    "unqualified resource name": ({"runner": {"resources": {"limits": {"gpu": 1}}}},
                                  "must be a standard resource for containers",
                                  "resources.limits"),
    "extended resource under requests.": (
        {"runner": {"resources": {"limits": {"requests.example.com/gpu": 1}}}},
        "doesn't follow extended resource name standard", "resources.limits"),
    # validateContainerCommon, validatePullPolicy
    "imagePullPolicy Sometimes": ({"runner": {"imagePullPolicy": "Sometimes"}},
                                  '"Always", "IfNotPresent", "Never"', "imagePullPolicy"),
    "terminationMessagePolicy Stdout": (
        {"runner": {"terminationMessagePolicy": "Stdout"}},
        '"File", "FallbackToLogsOnError"', "terminationMessagePolicy"),
    # validateDNSPolicy, validatePodDNSConfig
    "bad dnsPolicy": ({"dnsPolicy": "ClusterFirstHostNet"}, '"ClusterFirstWithHostNet"',
                      "dnsPolicy"),
    "dnsPolicy None with no dnsConfig": ({"dnsPolicy": "None"}, "nameserver", "dnsConfig"),
    # ValidatePodSpec, ValidateServiceAccountName
    "invalid serviceAccountName": ({"serviceAccountName": "Model_Server"},
                                   "a DNS-1123 subdomain", "serviceAccountName"),
    # ValidateTolerations
    "operator exists in a toleration": (
        {"tolerations": [{"key": "nvidia.com/gpu", "operator": "exists"}]},
        'supported values: "Equal", "Exists"', "tolerations.operator"),
    "toleration of no key with Equal": ({"tolerations": [{"operator": "Equal"}]},
                                        "operator must be Exists when `key` is empty",
                                        "tolerations.operator"),
    "toleration Exists with a value": (
        {"tolerations": [{"key": "pool", "operator": "Exists", "value": "a"}]},
        "value must be empty when `operator` is 'Exists'", "tolerations.operator"),
    "toleration value not a label value": (
        {"tolerations": [{"key": "pool", "value": "a b"}]}, "a label value",
        "tolerations.operator"),
    "tolerationSeconds without NoExecute": (
        {"tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedule",
                          "tolerationSeconds": 30}]},
        "effect must be 'NoExecute' when `tolerationSeconds` is set", "tolerations.effect"),
    "toleration effect misspelt": (
        {"tolerations": [{"key": "pool", "operator": "Exists", "effect": "NoSchedul"}]},
        '"NoSchedule", "PreferNoSchedule", "NoExecute"', "tolerations.effect"),
    "toleration key not a qualified name": (
        {"tolerations": [{"key": "gpu pool", "operator": "Exists"}]}, "a label key",
        "tolerations.key"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_refuses_what_the_api_server_refuses_naming_the_field(tmp_path, cli, case):
    engine, said, field = CASES[case]
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME,
                                          "svc.yaml": service_with(engine)})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1, out + err
    (line,) = [line for line in (out + err).splitlines() if "the API server refuses" in line]
    assert line.lstrip().startswith("svc.yaml:"), line  # the file and the line
    where = f"; fix {field} in spec.engine, or in ClusterServingRuntime srt-small at " \
        "spec.engineConfig: "
    assert where in line, line
    # The API server's words after the field, whole unless the message is clipped at 300
    # characters (the sim test below reads them whole).
    words = line.split(where, 1)[1]
    assert said in words or (words.endswith("...") and len(words) > 20), line


def pod_with(engine: dict) -> dict:
    """A simulated-cluster pod with what a case sets: the runner's fields on its
    container, the rest on the pod's spec."""
    from tests.cluster.sim_helpers import make_pod

    pod = make_pod("refused")
    container = pod["spec"]["containers"][0]
    for key, value in (engine.get("runner") or {}).items():
        container[key] = {**container.get(key, {}), **value} if key == "resources" else value
    pod["spec"].update({k: v for k, v in engine.items() if k != "runner"})
    return pod


@pytest.mark.parametrize("case", sorted(CASES))
def test_sim_refuses_at_create_what_the_api_server_refuses(tmp_path, case):
    from omegitops.cluster.errors import Invalid
    from omegitops.cluster.sim import SimCluster

    engine, said, field = CASES[case]
    SimCluster.init(tmp_path / "c.json")
    with SimCluster(tmp_path / "c.json") as sim:
        with pytest.raises(Invalid, match=re.escape(said)) as refused:
            sim.create_pod(pod_with(engine))
        assert str(refused.value).endswith(f"({field})")
        assert sim.list_pods() == []


def test_the_pod_every_case_changes_is_taken(tmp_path):
    """The pods the cases change are valid as they are: each case is refused for its own
    field only."""
    from omegitops.cluster.sim import SimCluster

    SimCluster.init(tmp_path / "c.json")
    with SimCluster(tmp_path / "c.json") as sim:
        sim.create_pod(pod_with({**mount(), "dnsPolicy": "ClusterFirst"}))
        assert len(sim.list_pods()) == 1


# -- a refused template deletes nothing ---------------------------------------------------

RECREATE = {"updateStrategy": {"type": "RecreatePod"}}


def recreate_service(**engine) -> str:
    data = yaml.safe_load(SERVICE)
    data["spec"]["engine"]["lifecycle"] = RECREATE
    data["spec"]["engine"].update(engine)
    return yaml.safe_dump(data)


def running(cluster) -> dict[str, str]:
    pods = json.loads(cluster.read_text())["objects"]["Pod"]
    return {key: pod["metadata"]["uid"] for key, pod in pods.items()
            if pod.get("status", {}).get("phase") == "Running"}


@pytest.mark.parametrize("case", ["port name over 15 characters", "protocol in lower case",
                                  "probe on port 0", "unqualified resource name",
                                  "operator exists in a toleration"])
def test_recreate_pod_keeps_running_pods_when_the_new_ones_would_be_refused(
        tmp_path, cli, case):
    """RecreatePod deletes an Instance's pods before it creates the new ones: a template
    the API server would refuse is refused by validation first, and the running pods stay."""
    engine, _, field = CASES[case]
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME,
                                          "svc.yaml": recreate_service()})
    cluster = tmp_path / "c.json"
    code, out, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                         "--until-idle")
    assert code == 0, out + err
    before = running(cluster)
    assert len(before) == 2

    changed = dict(engine)
    runner = {**(changed.pop("runner", None) or {}), "image": "docker.io/lmsysorg/sglang:v0.5.6"}
    (repo / "svc.yaml").write_text(recreate_service(runner=runner, **changed))
    code, out, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                         "--until-idle")
    assert running(cluster) == before  # the same pods, none deleted or replaced
    assert code == 1, out + err
    assert f"fix {field}" in out + err and "Traceback" not in err
