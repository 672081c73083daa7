"""A generated GitOps repository for the benchmarks: N services, a mix of shapes and strategies.

Each service has 8 pods on average (``PODS_PER_SERVICE``), cycling through four shapes:

- ``single``: one engine, 8 single-pod Instances;
- ``gang``: one engine, 2 Instances of a leader and 3 workers;
- ``pd``: engine (3 single-pod Instances), decoder (4) and router (1);
- ``mixed``: engine (2 gang Instances of leader + 1 worker) and decoder (4).

Strategies cycle through SurgeThenDrain, RecreatePod, InPlaceIfPossible and
InPlaceOnly (with a percentage or an absolute budget), services are spread
over ``namespaces`` namespaces, and they use a handful of runtimes, some
cluster-wide and some namespaced. Every pod asks for one GPU (routers for
none: they go to the CPU nodes), so the simulated cluster needs
``gpus_needed(services)`` GPUs. Files are written with yaml.safe_dump, one
service per file, as a real repository keeps them.

    python tests/bench/fleet.py OUT_DIR --services 100
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import yaml

PODS_PER_SERVICE = 8
SHAPES = ("single", "gang", "pd", "mixed")
STRATEGIES = (
    ("SurgeThenDrain", {"maxSurge": "25%", "maxUnavailable": 0}),
    ("RecreatePod", {"maxUnavailable": "25%"}),
    ("InPlaceIfPossible", {"maxUnavailable": 1}),
    ("InPlaceOnly", {"maxUnavailable": "50%"}),
)
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
CLUSTER_RUNTIMES = 4
# GPU pods a simulated node holds: its 128 CPUs over the 8 each runner asks for.
GPU_PODS_PER_NODE = 16
VALUES = {"ome": {"controller": {
    "updateStrategy": {c: {"type": "SurgeThenDrain", "maxSurge": "25%", "maxUnavailable": "25%"}
                       for c in ("engine", "decoder", "router")},
    "lifecycle": {"revisionHistoryLimit": 10, "stuckPodGracePeriod": "60s",
                  "unschedulableGracePeriod": "15m", "instanceReadyTimeout": "30m",
                  "repairBatchSize": 10, "abandonedReplacementGracePeriod": "30s",
                  "updateRetry": {"maxAttempts": 3, "initialBackoff": "1m"}},
    "autoMigrate": {"maxAttempts": 3},
}}}


def runner(image: str, *, gpu: bool = True, startup: int = 10, name: str = "ome-container",
           model: str = "model") -> dict[str, Any]:
    """A container like the catalogue's: command, ports, probes, a volume, resources."""
    limits: dict[str, Any] = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1} if gpu \
        else {"cpu": "1", "memory": "2Gi"}
    return {
        "name": name,
        "image": image,
        "command": ["python3", "-m", "sglang.launch_server", "--host", "0.0.0.0", "--port",
                    "8080", "--model-path", "$(MODEL_PATH)", "--served-model-name", model],
        "ports": [{"containerPort": 8080, "name": "http1", "protocol": "TCP"}],
        "env": [{"name": "MODEL_PATH", "value": f"/mnt/models/{model}"},
                {"name": "LOG_LEVEL", "value": "info"}],
        "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm"}],
        "resources": {"requests": dict(limits), "limits": dict(limits)},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8080},
                           "initialDelaySeconds": startup, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080},
                          "failureThreshold": 5, "periodSeconds": 60},
    }


def _config(runner_body: dict | None = None, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
        "labels": {"logging-forward": "enabled"},
        "tolerations": TOLERATIONS,
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        **extra,
    }
    if runner_body is not None:
        config["runner"] = runner_body
    return config


def runtime(name: str, shape: str, *, namespace: str | None = None,
            image: str = "sglang:v1") -> dict[str, Any]:
    """A runtime for ``shape``; namespaced (ServingRuntime) when ``namespace`` is given."""
    spec: dict[str, Any] = {"supportedModelFormats": [{
        "modelFramework": {"name": "transformers", "version": "4.45.0"},
        "modelFormat": {"name": "safetensors", "version": "1.0.0"},
        "autoSelect": False, "priority": 1}]}
    if shape == "single":
        spec["engineConfig"] = _config(runner(image))
    elif shape == "gang":
        spec["engineConfig"] = _config(leader={"runner": runner(image)},
                                       worker={"size": 3, "runner": runner(image)})
    elif shape == "pd":
        spec["engineConfig"] = _config(runner(image))
        spec["decoderConfig"] = _config(runner(image))
        spec["routerConfig"] = {"runner": runner("router:v1", gpu=False, name="router"),
                                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}
    else:  # mixed
        spec["engineConfig"] = _config(leader={"runner": runner(image)},
                                       worker={"size": 1, "runner": runner(image)})
        spec["decoderConfig"] = _config(runner(image))
    meta: dict[str, Any] = {"name": name}
    kind = "ClusterServingRuntime"
    if namespace is not None:
        meta["namespace"] = namespace
        kind = "ServingRuntime"
    return {"apiVersion": "ome.io/v1beta1", "kind": kind, "metadata": meta, "spec": spec}


def _lifecycle(number: int, offset: int = 0) -> dict[str, Any]:
    kind, rolling = STRATEGIES[(number + offset) % len(STRATEGIES)]
    body: dict[str, Any] = {"updateStrategy": {"type": kind, "rollingUpdate": dict(rolling)}}
    if number % 3 == 0:
        body["minReadySeconds"] = 30
    return body


def _component(replicas: int, number: int, offset: int = 0) -> dict[str, Any]:
    return {"minReplicas": replicas, "maxReplicas": replicas,
            "lifecycle": _lifecycle(number, offset)}


def service(number: int, namespace: str, runtime_name: str, shape: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"deploymentMode": "OMENative", "model": {"name": f"model-{number}"},
                            "runtime": {"name": runtime_name}}
    if shape == "single":
        spec["engine"] = _component(8, number)
    elif shape == "gang":
        spec["engine"] = _component(2, number)
    elif shape == "pd":
        spec["engine"] = _component(3, number)
        spec["decoder"] = _component(4, number, 1)
        spec["router"] = _component(1, number, 2)
    else:
        spec["engine"] = _component(2, number)
        spec["decoder"] = _component(4, number, 1)
    if number % 5 == 0:
        spec["engine"]["runner"] = {"env": [{"name": "SERVICE_TIER", "value": "gold"}]}
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": f"svc-{number:05d}", "namespace": namespace,
                         "labels": {"team": f"team-{number % 7}"}},
            "spec": spec}


def gpus_needed(services: int) -> int:
    """GPUs the fleet asks for (routers take none)."""
    total = 0
    for number in range(services):
        total += PODS_PER_SERVICE - (1 if SHAPES[number % len(SHAPES)] == "pd" else 0)
    return total


def sim_size(services: int, gpus_per_node: int | None = None) -> dict[str, int]:
    """``SimCluster.init`` arguments with room for the fleet plus a surge (about 40% spare).

    Past 1,000 services the nodes get 16 GPUs each: the simulated scheduler looks
    at every node for every pod, and 14,000 nodes would make a 10,000-service fleet
    a matter of its scheduling rather than of omegitops. No more than 16: a node has
    128 CPUs (``capacity/nodes.py``) and each GPU pod here asks for 8, so a node of 64
    GPUs would hold 16 pods all the same, and three in four of the fleet's pods would
    wait unscheduled until their Instances failed."""
    if gpus_per_node is None:
        gpus_per_node = 8 if services <= 1000 else GPU_PODS_PER_NODE
    per_node = min(gpus_per_node, GPU_PODS_PER_NODE)
    nodes = max(2, math.ceil(gpus_needed(services) * 1.4 / per_node))
    routers = sum(1 for n in range(services) if SHAPES[n % len(SHAPES)] == "pd")
    return {"nodes": nodes, "gpus_per_node": gpus_per_node,
            "cpu_nodes": max(2, math.ceil(routers * 1.4 / 100))}


def write_fleet(root: Path | str, services: int, namespaces: int | None = None) -> dict:
    """Write the repository; returns counts (services, components, instances, pods)."""
    root = Path(root)
    namespaces = namespaces or max(1, min(50, services // 20))
    (root / "runtimes").mkdir(parents=True, exist_ok=True)
    (root / "services").mkdir(parents=True, exist_ok=True)
    (root / "ome-values.yaml").write_text(yaml.safe_dump(VALUES, sort_keys=False))
    written: set[Path] = set()
    for index, shape in enumerate(SHAPES):
        for copy in range(CLUSTER_RUNTIMES // len(SHAPES) or 1):
            name = f"srt-{shape}-{copy}"
            path = root / "runtimes" / f"{name}.yaml"
            path.write_text(yaml.safe_dump(runtime(name, shape), sort_keys=False))
            written.add(path)
    components = instances = pods = 0
    namespaced_runtimes: set[tuple[str, str]] = set()
    for number in range(services):
        shape = SHAPES[number % len(SHAPES)]
        namespace = f"team-{number % namespaces:02d}"
        if number % 10 == 9:  # one service in ten uses a runtime of its own namespace
            runtime_name = f"ns-{shape}"
            if (namespace, runtime_name) not in namespaced_runtimes:
                namespaced_runtimes.add((namespace, runtime_name))
                folder = root / "runtimes" / namespace
                folder.mkdir(exist_ok=True)
                body = runtime(runtime_name, shape, namespace=namespace)
                (folder / f"{runtime_name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
        else:
            runtime_name = f"srt-{shape}-0"
        body = service(number, namespace, runtime_name, shape)
        folder = root / "services" / namespace
        folder.mkdir(exist_ok=True)
        (folder / f"{body['metadata']['name']}.yaml").write_text(
            yaml.safe_dump(body, sort_keys=False))
        per_shape = {"single": (1, 8, 8), "gang": (1, 2, 8), "pd": (3, 8, 8),
                     "mixed": (2, 6, 8)}[shape]
        components += per_shape[0]
        instances += per_shape[1]
        pods += per_shape[2]
    return {"services": services, "components": components, "instances": instances,
            "pods": pods, "namespaces": namespaces}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--services", type=int, default=100)
    args = parser.parse_args(argv)
    counts = write_fleet(args.out, args.services)
    print(counts, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
