"""Revisions whose ControllerRevision is gone (deleted by hand, or lost).

A revision's templates live only in its ControllerRevision, so once that is
gone nothing can be built at it. Pods that still run it keep running: they
are left alone, and the Instances they make up still count as being on it.
An Instance of such a revision that must be (re)built is built at the
desired revision instead and labelled so, since a pod never carries a
revision label whose template it does not run. A gang moves whole, so one
that lost some pods is restarted whole rather than completed at a second
revision. The ``RevisionMissing`` condition names the revisions while any
Instance still runs one, and a Warning event of the same reason names each
rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable

from omegitops.lifecycle.work import Work
from omegitops.model.state import Row

REVISION_MISSING = "RevisionMissing"


def missing_revisions(work: Work, rows: Iterable[Row]) -> dict[str, list[int]]:
    """``{revision: [Instance indices]}`` of the revisions rows run or move to that
    nothing can build any more (the rebuilds themselves: lifecycle/bringup.py)."""
    missing: dict[str, list[int]] = {}
    for row in rows:
        wanted = {row.revision, row.operation.target_revision if row.operation else None}
        for revision in sorted(r for r in wanted if r and not work.has_templates(r)):
            missing.setdefault(revision, []).append(row.index)
    return missing
