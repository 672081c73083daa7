"""The rollout partition: which Instances it keeps on their revision.

update-strategies.txt: "partition: 1 ... with two Instances, the next change to
the pod template moves one Instance and holds the other". Everything outside
the rollout itself that asks which Instances a partition holds (the Staged
condition, the plan's count of Instances to move, the status report) asks here,
so the arithmetic lives in one place.
"""

from __future__ import annotations

from collections.abc import Iterable


def partition_held(indices: Iterable[int], partition: int) -> list[int]:
    """The Instances of ``indices`` (the component's own, not surge replacements) that
    ``partition`` keeps on their revision, lowest index first: those whose index is
    below it, as a StatefulSet keeps the ordinals below its partition."""
    return sorted(index for index in set(indices) if index < partition)

