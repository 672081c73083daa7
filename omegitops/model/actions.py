"""What a plan asks the cluster to do: small frozen values, applied in order.

The planner only returns these; ``omegitops.app.passes`` applies them. The
InferenceReplica write always goes first, so an operation is recorded before
any pod is touched for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CreatePod:
    pod: dict[str, Any]

    def describe(self) -> str:
        return f"create pod {self.pod['metadata']['name']}"


@dataclass(frozen=True)
class DeletePod:
    namespace: str
    name: str
    grace_seconds: int | None = None

    def describe(self) -> str:
        grace = f" (grace {self.grace_seconds}s)" if self.grace_seconds is not None else ""
        return f"delete pod {self.name}{grace}"


@dataclass(frozen=True)
class SetServing:
    """Set the pod's ``ome.io/serving`` readiness gate: into or out of rotation.

    ``seen`` is the pod's conditions as the pass observed them, so that the write needs
    no read of its own (the planner asks only for a gate that differs)."""

    namespace: str
    name: str
    serving: bool
    seen: tuple[tuple[tuple[str, Any], ...], ...] | None = field(default=None, compare=False)

    def describe(self) -> str:
        return f"{'route' if self.serving else 'unroute'} pod {self.name}"


@dataclass(frozen=True)
class PatchImages:
    """New container images in place, and the labels that must move with them (the
    ``ome.io/revision`` label), in one patch: a pod never carries a revision label
    whose template it does not run."""

    namespace: str
    name: str
    images: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        changed = ", ".join(f"{c}={i}" for c, i in self.images + self.labels)
        return f"patch images of pod {self.name}: {changed}"


@dataclass(frozen=True)
class ApplyObject:
    """Create an object, or replace it when it exists (Services, PodGroups, revisions)."""

    obj: dict[str, Any]
    exists: bool

    def describe(self) -> str:
        verb = "update" if self.exists else "create"
        return f"{verb} {self.obj['kind']} {self.obj['metadata']['name']}"


@dataclass(frozen=True)
class DeleteObject:
    kind: str
    namespace: str
    name: str

    def describe(self) -> str:
        return f"delete {self.kind} {self.name}"


@dataclass(frozen=True)
class Event:
    """A core/v1 Event on the InferenceService."""

    type: str  # Normal or Warning
    reason: str
    message: str
    # Its number in the InferenceReplica's outbox (model/outbox.py), once recorded.
    sequence: int | None = None

    def describe(self) -> str:
        return f"event {self.type} {self.reason}: {self.message}"


Action = CreatePod | DeletePod | SetServing | PatchImages | ApplyObject | DeleteObject
