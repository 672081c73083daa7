"""Small repositories for scenario tests, written with yaml.safe_dump so that a
test can say exactly what changes between two passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def runner(image: str = "sglang:v1", env: dict[str, str] | None = None,
           startup: int = 10) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "ome-container",
        "image": image,
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8080},
                           "initialDelaySeconds": startup, "periodSeconds": 5},
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    if env:
        body["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return body


def write_service(root: Path, *, replicas: int = 2, image: str = "sglang:v1",
                  env: dict[str, str] | None = None, lifecycle: dict | None = None,
                  workers: int | None = None, values: dict | None = None,
                  grace: int | None = None, annotations: dict | None = None,
                  name: str = "svc", worker_env: dict[str, str] | None = None,
                  gates: list[str] | None = None, namespace: str = "demo",
                  host_port: int | None = None, labels: dict | None = None,
                  max_replicas: int | None = None, rollout: dict | None = None,
                  decoder: int | None = None, decoder_lifecycle: dict | None = None,
                  decoder_image: str | None = None, decoder_startup: int = 10) -> Path:
    """One runtime and one OMENative service ``<namespace>/<name>`` with an engine;
    ``host_port``: on the host network, serving on that port, as the catalogue's RDMA
    and prefill/decode runtimes do; ``labels``: the pod template's own labels;
    ``max_replicas``: above ``replicas``, an autoscaler owns the count between them;
    ``rollout``: the service's ``spec.rollout``; ``decoder``: that many decoder Instances
    beside the engine (a prefill/decode service), on ``decoder_image`` (the engine's by
    default) with ``decoder_lifecycle``, ready ``decoder_startup`` seconds after it starts."""
    config: dict[str, Any] = {"tolerations": TOLERATIONS}
    if host_port is not None:
        config["hostNetwork"] = True
    if grace is not None:
        config["terminationGracePeriodSeconds"] = grace
    if annotations:
        config["annotations"] = annotations
    if labels:
        config["labels"] = labels
    if gates:
        config["schedulingGates"] = [{"name": gate} for gate in gates]
    if workers is None:
        config["runner"] = runner(image, env)
        if host_port is not None:
            config["runner"]["ports"] = [{"name": "http", "containerPort": host_port}]
    else:
        config["leader"] = {"runner": runner(image, env)}
        config["worker"] = {"size": workers,
                            "runner": runner(image, {**(env or {}), **(worker_env or {})})}
    runtime = {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
               "metadata": {"name": "srt-test"}, "spec": {"engineConfig": config}}
    if decoder is not None:
        runtime["spec"]["decoderConfig"] = {"tolerations": TOLERATIONS,
                                            "runner": runner(decoder_image or image, env,
                                                             decoder_startup)}
        if grace is not None:
            runtime["spec"]["decoderConfig"]["terminationGracePeriodSeconds"] = grace
    engine: dict[str, Any] = {"minReplicas": replicas,
                              "maxReplicas": replicas if max_replicas is None else max_replicas}
    if lifecycle:
        engine["lifecycle"] = lifecycle
    service = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"deploymentMode": "OMENative", "model": {"name": "m"},
                        "runtime": {"name": "srt-test"}, "engine": engine}}
    if decoder is not None:
        service["spec"]["decoder"] = {"minReplicas": decoder, "maxReplicas": decoder}
        if decoder_lifecycle:
            service["spec"]["decoder"]["lifecycle"] = decoder_lifecycle
    if rollout:
        service["spec"]["rollout"] = rollout
    (root / "runtimes").mkdir(parents=True, exist_ok=True)
    (root / "services").mkdir(parents=True, exist_ok=True)
    (root / "runtimes" / "test.yaml").write_text(yaml.safe_dump(runtime, sort_keys=False))
    (root / "services" / f"{name}.yaml").write_text(yaml.safe_dump(service, sort_keys=False))
    values_path = root / "ome-values.yaml"
    if values:
        values_path.write_text(yaml.safe_dump({"ome": {"controller": values}}))
    elif values_path.exists():
        values_path.unlink()
    return root


def strategy(kind: str | None = None, **rolling: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if kind:
        body["type"] = kind
    if rolling:
        body["rollingUpdate"] = rolling
    return {"updateStrategy": body}
