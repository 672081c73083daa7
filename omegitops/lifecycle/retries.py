"""Retrying failed updates: the revision's own backoff and hold, and a per-Instance pause.

A failure the revision causes (an image that can't be pulled) counts
toward the revision's attempts: with updateRetry the second attempt waits
``initialBackoff``, the third twice that, and after ``maxAttempts`` the
revision is held until a newer one replaces it or it is released. Without
updateRetry the first such failure holds it. Any other failure (a crash
loop, a lost node) never counts toward a hold, but the Instance pauses before
its next attempt, so a crashing gang is not recreated in a tight loop.
"""

from __future__ import annotations

from omegitops.lifecycle.failures import revision_caused
from omegitops.lifecycle.work import Work, steering
from omegitops.model.state import Json, Row
from omegitops.render import pods as P
from omegitops.util.times import format_time, parse_time

PAUSE_FIRST, PAUSE_MAX = 30.0, 300.0


def record_failure(work: Work, row: Row, target: str, failure: Json,
                   attempt: list[Json]) -> Row:
    """The row with ``failure`` recorded: against the revision when the revision caused
    it (``work.retries``), else as the Instance's own pause before its next attempt,
    steered off the node the failed attempt's pods (``attempt``) ran on."""
    row = row.but(last_failure=failure)
    if revision_caused(failure):
        _count_against_revision(work, row, failure, target)
        return row
    attempts = int(row.attempts or 0) + 1
    avoid = _steer(work, row, target, attempt)
    return row.but(attempts=attempts, avoid_nodes=avoid, avoid_for=target if avoid else None,
                   retry_at=format_time(work.now + min(PAUSE_MAX,
                                                       PAUSE_FIRST * 2 ** (attempts - 1))))


def _count_against_revision(work: Work, row: Row, failure: Json, target: str) -> None:
    entry = work.retries.setdefault(target, {"attempts": 0, "held": False})
    entry["attempts"] += 1
    retry = work.settings.update_retry
    if retry and entry["attempts"] < retry.max_attempts:
        entry["nextAttemptAt"] = format_time(
            work.now + retry.delay_before(entry["attempts"] + 1))
        return
    if not entry["held"]:
        entry["held"] = True
        work.event("Warning", "RevisionHeld", row.index,
                   f"holding revision {target} after {entry['attempts']} failed "
                   f"attempt{'s' if entry['attempts'] != 1 else ''}: "
                   f"{failure['reason']}")


def start_wait(work: Work, row: Row, target: str) -> tuple[bool, float | None]:
    """(whether an update of ``row`` toward ``target`` may start now, when it may if it
    has to wait for a backoff); reads only."""
    entry = work.retries.get(target) or {}
    if entry.get("held"):
        return False, None
    for key in (entry.get("nextAttemptAt"), row.retry_at):
        if key and work.now < parse_time(key):
            return False, parse_time(key)
    return True, None


def may_start(work: Work, row: Row, target: str) -> bool:
    """Whether an update of ``row`` toward ``target`` may start now (waking when it may)."""
    allowed, wake = start_wait(work, row, target)
    work.wake(wake)
    return allowed


def held(work: Work, target: str) -> bool:
    return bool((work.retries.get(target) or {}).get("held"))


def _steer(work: Work, row: Row, target: str,
           attempt: list[Json]) -> tuple[str, ...] | None:
    """The nodes the next attempt at ``target`` avoids (instances.txt: "When a failure
    didn't come from the revision, and the attempt's pods all ran on one node, OME steers
    the next attempt off that node"; autoMigrate.maxAttempts moves per Instance,
    migrationPolicy.mode Never turns it off).

    Only the failed attempt's own pods say where it ran, never another pod of the
    Instance (the old pod of a surge, a pod created in the same pass). The exclusions
    keep no more nodes than the moves allow: a new one drops the oldest. And steering
    never leaves the Instance nowhere to run: when an attempt kept off those nodes could
    not be placed at all, the oldest exclusion goes, so a pod that fits on few nodes
    gets them back one by one."""
    limit = work.settings.auto_migrate_max_attempts
    if not limit or work.settings.migration_mode == "Never":
        return None
    avoid = steering(row, target)
    placed = {node for node in map(P.node_of, attempt) if node is not None}
    if attempt and not placed:
        return avoid[1:] or None
    if len(placed) != 1:
        return avoid or None
    node = placed.pop()
    return (*[n for n in avoid if n != node], node)[-limit:]
