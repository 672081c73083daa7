"""The component as the planner takes it: what the repository asks for, resolved and
rendered (``DesiredComponent``), and what the cluster holds (``ObservedComponent``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegitops.model.groups import GroupView
from omegitops.model.replica import replica_name
from omegitops.model.state import Json
from omegitops.render.resolve import ComponentLifecycle


@dataclass(frozen=True)
class DesiredComponent:
    """What the repository asks for one component, already resolved and rendered."""

    namespace: str
    isvc: str
    component: str
    lifecycle: ComponentLifecycle
    templates: dict[str, Json]
    revision: str
    runtime_config: Json = field(default_factory=dict)
    pinned: bool = False
    drifted: bool = False
    # The repository no longer has this component and --prune tears it down.
    teardown: bool = False
    # OME's labels and annotations on every pod of the component
    # (templates.ome_pod_metadata).
    pod_metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    # The file that declares lifecycle.paused, when the repository does: the
    # rollout hold names it (lifecycle/pause.py).
    paused_at: str | None = None

    @property
    def name(self) -> str:
        """The InferenceReplica's name, which the routing Service shares."""
        return replica_name(self.isvc, self.component)

    @property
    def gang(self) -> bool:
        return self.lifecycle.shape == "gang"

    @property
    def pods_per_instance(self) -> int:
        return 1 + self.lifecycle.worker_size if self.gang else 1


@dataclass
class ObservedComponent:
    """What the cluster holds for one component."""

    replica: Json | None = None
    pods: list[Json] = field(default_factory=list)
    revisions: list[Json] = field(default_factory=list)
    services: dict[str, Json] = field(default_factory=dict)
    podgroups: dict[str, Json] | None = None  # None: the PodGroup kind is not installed
    # The nodes the component's pods run on, by name (None: the nodes could not be
    # listed, and no migration starts).
    nodes: dict[str, Json] | None = None
    # Its PodDisruptionBudget by name, where one is kept (None: not on this cluster).
    budgets: dict[str, Json] | None = None
    # The rollout group it moves in, as the pass observed every member
    # (lifecycle/groups.py); None when it moves alone.
    group: GroupView | None = None
