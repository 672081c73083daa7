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

from omegitops.lifecycle.repairs import RESTARTING, UNROUTE, step_restart
from omegitops.lifecycle.work import RESTART, Work

REVISION_MISSING = "RevisionMissing"


def missing_revisions(work: Work, rows: list[dict]) -> dict[str, list[int]]:
    """``{revision: [Instance indices]}`` of the revisions rows run or move to that
    nothing can build any more."""
    missing: dict[str, list[int]] = {}
    for row in rows:
        wanted = {row.get("revision"), (row.get("operation") or {}).get("targetRevision")}
        for revision in sorted(r for r in wanted if r and not work.has_templates(r)):
            missing.setdefault(revision, []).append(row["index"])
    return missing


def ready_to_build(work: Work, row: dict) -> bool:
    """Whether the Instance's missing pods may be created now, at ``row["revision"]``.

    When that revision's templates are gone and pods are missing, the row moves to
    the desired revision first. A gang whose surviving pods run the lost revision is
    restarted whole (Unroute, DeletePods, WaitGone, CreatePods one incarnation
    higher) at the desired revision: False, the restart has taken this pass's step.
    """
    lost = row["revision"]
    if work.has_templates(lost):
        return True
    instance = work.instance(row)
    live = instance.live
    if len(live) >= instance.needed:
        return True  # nothing to build: the pods that run it keep running
    newest = work.desired.revision
    operation = row["operation"]
    if live:
        work.event("Warning", REVISION_MISSING, row["index"], (
            f"revision {lost} has no ControllerRevision, so its missing pods cannot be "
            f"built; restarting the whole Instance at {newest}"))
        row["phase"] = RESTARTING
        if operation.get("type") != RESTART:
            row["incarnation"] += 1  # a restart of one pod raised it already
        row["operation"] = work.operation(RESTART, UNROUTE, target=newest, mode="Instance")
        step_restart(work, row)
        return False
    work.event("Warning", REVISION_MISSING, row["index"], (
        f"revision {lost} has no ControllerRevision, so nothing can be rebuilt at it; "
        f"building at {newest} instead"))
    row["revision"] = newest
    if operation.get("targetRevision"):
        operation["targetRevision"] = newest
    return True
