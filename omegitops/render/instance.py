"""Instances: pod names, the pods of one Instance, and what state they are in.

An Instance is one replica of a component: a single pod (runner
``default``), or a leader and ``worker.size`` workers that move as one gang.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from omegitops.model.state import Json
from omegitops.render import pods as P
from omegitops.render.templates import (
    DEFAULT,
    LABEL_COMPONENT,
    LABEL_ENTRY,
    LABEL_INCARNATION,
    LABEL_INDEX,
    LABEL_ISVC,
    LABEL_REVISION,
    LABEL_RUNNER,
    LEADER,
    LWS_WORKER_INDEX,
    MANAGED_BY,
    MANAGER,
    SERVING_GATE,
    WORKER,
)


def pod_name(isvc: str, component: str, index: int, runner: str, ordinal: int) -> str:
    """``{isvc}-{component}-{index}-{runner}-{ordinal}`` (instances.txt)."""
    return f"{isvc}-{component}-{index}-{runner}-{ordinal}"


def headless_name(isvc: str, component: str) -> str:
    return f"{isvc}-{component}-pods"


def pod_slots(workers: int, gang: bool, base: int = 0) -> list[tuple[str, int, int]]:
    """(runner, ordinal, rank) of each pod of an Instance.

    A single-pod Instance has one ``default`` pod at ordinal ``base`` (0, or
    1 for a SurgeThenDrain replacement); a gang has its leader at rank 0 and
    its workers at ranks 1..size, each runner's pods numbered from 0.
    """
    if not gang:
        return [(DEFAULT, base, 0)]
    return [(LEADER, 0, 0)] + [(WORKER, i, i + 1) for i in range(workers)]


@dataclass(frozen=True)
class PodSpecInput:
    """What the pods of one Instance are rendered from."""

    namespace: str
    isvc: str
    component: str
    revision: str
    templates: dict[str, Json]
    workers: int
    gang: bool
    # OME's labels and annotations of the component's pods (templates.ome_pod_metadata),
    # on every pod whatever revision it is built from.
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)


def instance_pods(
    spec: PodSpecInput, index: int, incarnation: int, base_ordinal: int = 0
) -> list[Json]:
    """Every pod of Instance ``index``, labelled and with the OME_* environment."""
    slots = pod_slots(spec.workers, spec.gang, base_ordinal)
    headless = headless_name(spec.isvc, spec.component)
    leader = pod_name(spec.isvc, spec.component, index, LEADER, 0)
    leader_address = f"{leader}.{headless}.{spec.namespace}.svc.cluster.local"
    pods: list[Json] = []
    for runner, ordinal, rank in slots:
        template = copy.deepcopy(spec.templates[runner])
        name = pod_name(spec.isvc, spec.component, index, runner, ordinal)
        labels = dict(template["metadata"].get("labels") or {})
        labels.update(spec.metadata.get("labels") or {})
        if spec.gang:
            labels[LWS_WORKER_INDEX] = str(rank)
        labels.update({
            LABEL_ISVC: spec.isvc,
            LABEL_COMPONENT: spec.component,
            LABEL_INDEX: str(index),
            LABEL_INCARNATION: str(incarnation),
            LABEL_RUNNER: runner,
            LABEL_REVISION: spec.revision,
            MANAGED_BY: MANAGER,
        })
        if runner != WORKER:
            labels[LABEL_ENTRY] = "true"
        env = [{"name": "OME_INSTANCE_INDEX", "value": str(index)},
               {"name": "OME_RUNNER", "value": runner}]
        pod_spec = template["spec"]
        if spec.gang:
            count = str(1 + spec.workers)
            env += [
                {"name": "OME_LEADER_ADDRESS", "value": leader_address},
                {"name": "OME_RANK", "value": str(rank)},
                {"name": "OME_POD_COUNT", "value": count},
                # The names LeaderWorkerSet gives, which OME's runtimes use.
                {"name": "LWS_LEADER_ADDRESS", "value": leader_address},
                {"name": "LWS_GROUP_SIZE", "value": count},
                {"name": "LWS_WORKER_INDEX", "value": str(rank)},
            ]
            pod_spec["hostname"] = name
            pod_spec["subdomain"] = headless
        for container in pod_spec.get("containers", []):
            names = {e["name"] for e in env}
            container["env"] = env + [e for e in container.get("env") or []
                                      if e.get("name") not in names]
        gates = [g for g in pod_spec.get("readinessGates") or []
                 if g.get("conditionType") != SERVING_GATE]
        pod_spec["readinessGates"] = gates + [{"conditionType": SERVING_GATE}]
        pods.append({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": spec.namespace,
                "labels": labels,
                "annotations": {**(template["metadata"].get("annotations") or {}),
                                **(spec.metadata.get("annotations") or {})},
            },
            "spec": pod_spec,
        })
    return pods


@dataclass
class InstancePods:
    """The observed pods of one Instance, split the ways the planner asks about them."""

    needed: int
    pods: list[Json] = field(default_factory=list)

    @property
    def live(self) -> list[Json]:
        """Pods neither terminating nor ended."""
        return [p for p in self.pods if not P.is_terminating(p) and not P.has_ended(p)]

    @property
    def terminating(self) -> list[Json]:
        return [p for p in self.pods if P.is_terminating(p)]

    def entries(self) -> list[Json]:
        """The pods that take requests: the leader, or the single pod (two during a surge)."""
        return [p for p in self.live if P.runner_of(p) in (LEADER, DEFAULT)]

    def containers_ready(self) -> bool:
        live = self.live
        return len(live) >= self.needed and all(P.containers_ready(p) for p in live)

    def ready_count(self) -> int:
        return sum(1 for p in self.live if P.is_ready(p))

    def serving_pod_count(self) -> int:
        """Serving pods, workers included, but 0 when no entry pod serves: a gang
        serves only through its leader."""
        if not any(P.is_ready(p) and P.gate_set(p) for p in self.entries()):
            return 0
        return sum(1 for p in self.live if P.is_ready(p) and P.gate_set(p))

    def ready_since(self) -> float | None:
        """When the last of ``needed`` pods became Ready, or None if not all are."""
        live = self.live
        if len(live) < self.needed or not all(P.is_ready(p) for p in live):
            return None
        times = [P.condition(p, "Ready")[1] or 0.0 for p in live]
        return max(times) if times else None

    def containers_ready_since(self) -> float | None:
        """Since when ``needed`` of the live pods have had their containers ready, or
        None while fewer have.

        instances.txt counts an Instance toward a state once at least its desired number
        of pods are in it, so it still counts during a surge: a surge pod, or the
        leftover of a failed attempt stuck pulling its image, is neither required nor
        able to restart the clock of the pods that serve. Each ready pod has been ready
        since its own transition, so ``needed`` of them have been since the
        ``needed``-th earliest one."""
        times = sorted(P.condition(p, "ContainersReady")[1] or 0.0
                       for p in self.live if P.containers_ready(p))
        if self.needed <= 0 or len(times) < self.needed:
            return None
        return times[self.needed - 1]
