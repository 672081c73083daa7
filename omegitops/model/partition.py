"""The rollout partition: which Instances it keeps on their revision.

update-strategies.txt: "partition: 1 ... with two Instances, the next change to
the pod template moves one Instance and holds the other". Everything that asks
which Instances a partition holds (the rollout, the Staged condition, the plan's
count of Instances to move, the status report) asks here, so the rule lives in
one place.
"""

from __future__ import annotations

from collections.abc import Iterable

from omegitops.model.state import OperationType, Phase, Row


def partition_held(rows: Iterable[Row], target: str, partition: int) -> list[int]:
    """The Instances ``partition`` keeps on their revision, lowest index first: that
    many, the lowest-indexed of those the rollout toward ``target`` has not reached.

    A partition read as an index (a StatefulSet's ordinal) holds nothing once the
    indices drift, and they do: a gang's surge or a migration starts the replacement
    at a new index, and a scale-down keeps Ready Instances first, so Instances [2, 3]
    or [1, 2] both moved at partition 1. Counted in index order, the partition holds
    exactly that many, the lower end as a StatefulSet's does, and the count is stable:
    a replacement that takes a lower free index is on ``target`` and never counted,
    so the Instance it held stays held. A gang surge's replacement and an Instance
    being deleted fill no place of their own here; one whose update builds
    ``target`` (a retry after a failure included) has been reached already.
    """
    if partition <= 0:
        return []
    waiting = sorted(row.index for row in rows
                     if row.revision != target and row.surge_of is None
                     and row.phase != Phase.DELETING and not _bound_for(row, target))
    return waiting[:partition]


def _bound_for(row: Row, target: str) -> bool:
    """An Instance whose update moves it to ``target``."""
    operation = row.operation
    return (operation is not None and operation.type == OperationType.UPDATE
            and operation.target_revision == target)
