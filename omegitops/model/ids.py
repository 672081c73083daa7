"""Identity of a Kubernetes object (dict key, sort key and message text), and of one
component of an InferenceService."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, order=True)
class ResourceId:
    """``Kind ns/name`` for namespaced objects, ``Kind name`` for cluster-scoped ones."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        if self.namespace:
            return f"{self.kind} {self.namespace}/{self.name}"
        return f"{self.kind} {self.name}"

    @property
    def ref(self) -> str:
        """``ns/name`` (or ``name``), as users type it on the command line."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class ComponentKey(NamedTuple):
    """One component of one InferenceService: the key of everything a pass keeps per
    component (a plain tuple at runtime, so it equals and hashes as one)."""

    namespace: str
    service: str
    component: str
