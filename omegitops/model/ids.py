"""Identity of a Kubernetes object: dict key, sort key and message text."""

from __future__ import annotations

from dataclasses import dataclass


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
