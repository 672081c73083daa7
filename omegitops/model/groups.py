"""What one member of a rollout group sees of its group this pass (lifecycle/groups.py
computes it from the members' observed InferenceReplicas; the planner reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegitops.model.state import Json

ROLLING, BLUE_GREEN = "rolling", "blueGreen"


@dataclass(frozen=True)
class GroupView:
    """The group as one member sees it this pass (see the module)."""

    name: str
    members: tuple[str, ...]
    allowed: int
    waits_for: str | None
    why: str
    surge_room: int | None
    unavailable_room: int | None
    # Another member can still move: a member the group holds stays under way.
    moving: bool
    # Blue-green: every member's new set comes up beside the old, out of rotation, and
    # serving switches to it at once once ``switch`` (every member's new set Available).
    blue_green: bool = False
    switch: bool = False

    def for_fingerprint(self) -> list[Any]:
        return [self.name, self.members, self.allowed, self.waits_for, self.why,
                self.surge_room, self.unavailable_room, self.moving, self.blue_green,
                self.switch]

    def for_storage(self) -> Json:
        """``status.group``."""
        return {"name": self.name, "members": list(self.members), "replicas": self.allowed,
                "waitingFor": self.waits_for, "reason": self.why,
                "strategy": BLUE_GREEN if self.blue_green else ROLLING,
                "switch": self.switch}
