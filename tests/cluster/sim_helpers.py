"""Helpers for the simulated-cluster tests: pod builders and clock steps."""

from __future__ import annotations

from datetime import UTC, datetime

from omegitops.cluster.sim import SimCluster

START = datetime(2026, 9, 27, 8, 0, 0, tzinfo=UTC)

NS = "demo"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def make_pod(name: str, *, gpus: int = 1, image: str = "registry/engine:v1",
             annotations: dict | None = None, gates: bool = True, **spec_extra) -> dict:
    """A minimal OME-like pod: one ome-container asking for ``gpus`` GPUs."""
    container = {"name": "ome-container", "image": image,
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    container.update(spec_extra.pop("container", {}))
    spec = {"containers": [container], "tolerations": [GPU_TOLERATION], **spec_extra}
    if gates:
        spec["readinessGates"] = [{"conditionType": "ome.io/serving"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "engine"},
                     "annotations": annotations or {}},
        "spec": spec,
    }


def get(sim: SimCluster, name: str) -> dict | None:
    return sim.get_object("Pod", NS, name)


def container(sim: SimCluster, name: str, index: int = 0) -> dict:
    return get(sim, name)["status"]["containerStatuses"][index]


def condition(pod: dict, kind: str) -> dict | None:
    return next((c for c in pod["status"].get("conditions", []) if c["type"] == kind), None)


def elapsed(sim: SimCluster) -> float:
    """Seconds since the simulated clock's fixed start."""
    return (sim.now() - START).total_seconds()


def step(sim: SimCluster) -> float:
    """Jump to the next transition; returns the new elapsed time."""
    when = sim.next_transition_at()
    assert when is not None, "nothing left to happen"
    sim.advance((when - sim.now()).total_seconds())
    return elapsed(sim)

