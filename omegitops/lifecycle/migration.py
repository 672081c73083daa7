"""Migrations: moving a Ready Instance off a node that is going away, make-before-break.

instances.txt names migration off a node among what acts on whole Instances, and
says how the replacement is numbered: "A migration ... starts the replacement at a
new index and then removes the old Instance", at incarnation 1. A node is going
away when it is cordoned (``spec.unschedulable``, the first thing ``kubectl drain``
does) or carries a NoSchedule or NoExecute taint the Instance's pods do not
tolerate. A node that stopped reporting is not: its Instances restart, as the
restart policy says (its unreachable and not-ready taints never start a migration).

A migration is an operation of type Migrate, the source ``Migrating`` throughout,
along a gang surge's steps, for a single pod too: SurgeCreate (the replacement
Instance, at the lowest free index, kept off the node by node affinity),
SurgeWaitReady, SurgeWaitAvailable (minReadySeconds, inside the replacement's own
deadline), HandOver, DrainOld, WaitDrained; then the source leaves the record.

Budgets: a replacement holds a surge slot. Under SurgeThenDrain migrations start
while the slots in use stay below maxSurge (at least one, so a component with
maxSurge 0 still moves one Instance at a time); under the other strategies one
migration at a time. A failed replacement is deleted, the source keeps serving,
and the next attempt waits the steering backoff; autoMigrate.maxAttempts (three,
the chart's, when the operator sets none) bounds the attempts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from omegitops.capacity.nodes import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    is_ready,
    tolerates,
)
from omegitops.lifecycle import availability
from omegitops.lifecycle.bringup import new_row
from omegitops.lifecycle.operations import open_delete, step_create
from omegitops.lifecycle.retries import record_failure, start_wait
from omegitops.lifecycle.updates import (
    abandon_grace,
    drain_old,
    hand_over,
    lowest_free_index,
    stopped_serving,
    wait_drained,
)
from omegitops.lifecycle.work import Work, steering
from omegitops.model.budgets import scaled_value
from omegitops.model.state import (
    Json,
    Mode,
    OperationType,
    Outcome,
    Phase,
    Row,
    Step,
    Strategy,
)
from omegitops.render import pods as P
from omegitops.util.times import format_time

# The chart's autoMigrate.maxAttempts, when the operator's settings name none.
DEFAULT_MAX_ATTEMPTS = 3
# Taints that say a node stopped reporting: a restart's business, never a migration's.
_SILENT = (UNREACHABLE_TAINT, NOT_READY_TAINT)
MIGRATING, MIGRATED, MIGRATION_FAILED = "InstanceMigrating", "InstanceMigrated", "MigrationFailed"


# -- what starts one ------------------------------------------------------------------


def leaving_node(work: Work, row: Row) -> tuple[str, str] | None:
    """(the node, why) when a live pod of ``row`` runs on a node that is going away and
    some other node takes pods; None otherwise, and for a node that stopped reporting."""
    nodes = work.observed.nodes
    if nodes is None:
        return None
    for pod in work.instance(row).live:
        name = P.node_of(pod)
        node = nodes.get(name or "")
        if name is None or node is None or not is_ready(node):
            continue
        why = _going_away(node, pod)
        if why is not None and _elsewhere(nodes.get("") or {}, name):
            return name, why
    return None


def _elsewhere(others: Json, name: str) -> bool:
    """Whether a node other than ``name`` takes pods: one of the component's own
    (``open``), or any beyond them (``elsewhere``; ``app/passes.py`` files both)."""
    return bool(others.get("elsewhere")) or any(n != name for n in others.get("open", []))


def _going_away(node: Json, pod: Json) -> str | None:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    for taint in spec.get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute") \
                or taint.get("key") in (*_SILENT, UNSCHEDULABLE_TAINT):
            continue
        matching = [t for t in (pod.get("spec") or {}).get("tolerations") or []
                    if tolerates(t, taint)]
        # A NoExecute taint tolerated for a while only evicts the pod later.
        if not matching or (taint["effect"] == "NoExecute" and all(
                t.get("tolerationSeconds") is not None for t in matching)):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint['effect']}"
    return None


def max_attempts(work: Work) -> int:
    return work.settings.auto_migrate_max_attempts or DEFAULT_MAX_ATTEMPTS


def plan_migrations(work: Work) -> None:
    """Start the migrations the budget allows, lowest indices first."""
    if work.settings.migration_mode == "Never" or work.desired.teardown:
        return
    room = _room(work)
    for index in sorted(work.rows):
        row = work.rows[index]
        if index in work.moved or row.surge_of is not None \
                or not availability.is_ready(work, row):
            continue
        leaving = leaving_node(work, row)
        if leaving is None or not _may_try(work, row):
            continue
        if room <= 0:
            return
        room -= 1
        work.moved.add(index)
        work.put(open_migration(work, row, *leaving))


def _may_try(work: Work, row: Row) -> bool:
    """Attempts left, and the backoff after the last failed one over (waking then)."""
    if (row.attempts or 0) >= max_attempts(work):
        return False
    allowed, wake = start_wait(work, row, row.revision)
    work.wake(wake)
    return allowed


def _room(work: Work) -> int:
    """How many more migrations may start now (the module's docstring says the rule)."""
    running = sum(1 for r in work.rows.values()
                  if r.operation is not None and r.operation.type == OperationType.MIGRATE)
    if work.lifecycle.strategy != Strategy.SURGE_THEN_DRAIN:
        return 1 - running
    surge = scaled_value(work.settings.max_surge, work.lifecycle.replicas)
    if surge is None:
        return work.lifecycle.replicas - running
    return max(1, surge) - availability.surge_in_use(work)[0]


def budget_pods(work: Work) -> int | None:
    """The pods the component's PodDisruptionBudget lets a drain evict at once: none
    while migrations can move every Instance a drain would take down (the drain waits,
    omegitops moves them and deletes the source pods itself), else maxUnavailable's
    Instances in pods (None: unbounded, no budget), as with migrationPolicy Never."""
    if work.settings.migration_mode != "Never" and not any(
            (row.attempts or 0) >= max_attempts(work) and leaving_node(work, row)
            for row in work.rows.values() if row.operation is None):
        return 0
    instances = scaled_value(work.settings.max_unavailable, work.lifecycle.replicas)
    return None if instances is None else instances * work.needed


def open_migration(work: Work, row: Row, node: str, why: str) -> Row:
    operation = work.operation(OperationType.MIGRATE, Step.SURGE_CREATE,
                               target=row.revision, mode=Mode.SURGE)
    operation = replace(operation, leaving=node, leaving_why=why)
    work.event("Normal", MIGRATING, row.index, (
        f"migrating off node {node} ({why}): a replacement Instance starts on other "
        "nodes; this one serves until it hands over"))
    return step_migrate(work, row.but(phase=Phase.MIGRATING, operation=operation))[0]


# -- its steps ------------------------------------------------------------------------


def step_migrate(work: Work, row: Row) -> tuple[Row, Outcome]:
    operation = row.op
    if operation.step == Step.SURGE_CREATE:
        return _create_replacement(work, row), Outcome.KEPT
    found = work.rows.get(operation.replacement) \
        if operation.replacement is not None else None
    if found is None or (operation.handed_over and stopped_serving(work, found)):
        return _replacement_lost(work, row, found), Outcome.KEPT
    if not operation.handed_over and found.phase in (Phase.FAILED, Phase.DELETING):
        return _replacement_failed(work, row, found), Outcome.KEPT
    return MIGRATE_STEPS.get(operation.step, _wait_drained)(work, row, found)


def _create_replacement(work: Work, row: Row) -> Row:
    """The replacement Instance at the lowest free index, incarnation 1, on the source's
    revision, kept off the node it leaves (and those earlier attempts failed on)."""
    if any(r.surge_of == row.index for r in work.rows.values()):
        return row  # an abandoned replacement of an earlier attempt goes first
    index = lowest_free_index(work)
    revision = row.revision
    avoid = tuple(dict.fromkeys((*steering(row, revision), row.op.leaving or "")))
    replacement = new_row(index, 1, revision, Phase.CREATING,
                          work.operation(OperationType.CREATE, Step.CREATE_PODS))
    work.put(replacement.but(surge_of=row.index, avoid_nodes=avoid, avoid_for=revision))
    work.put(step_create(work, work.rows[index]))
    return row.step_to(Step.SURGE_WAIT_READY, replacement=index)


def _wait_ready(work: Work, row: Row, replacement: Row) -> tuple[Row, Outcome]:
    operation = replacement.operation
    if replacement.phase == Phase.READY or (
            operation is not None and operation.step == Step.WAIT_AVAILABLE):
        return row.step_to(Step.SURGE_WAIT_AVAILABLE), Outcome.KEPT
    return row, Outcome.KEPT


def _wait_available(work: Work, row: Row, replacement: Row) -> tuple[Row, Outcome]:
    # The replacement's own WaitAvailable holds it for minReadySeconds.
    if replacement.phase == Phase.READY:
        return row.step_to(Step.HAND_OVER), Outcome.KEPT
    return row, Outcome.KEPT


def _hand_over(work: Work, row: Row, replacement: Row) -> tuple[Row, Outcome]:
    if stopped_serving(work, replacement):
        return row.step_to(Step.SURGE_WAIT_AVAILABLE), Outcome.KEPT
    return hand_over(work, row, work.instance(row).live), Outcome.KEPT


def _drain_old(work: Work, row: Row, replacement: Row) -> tuple[Row, Outcome]:
    return drain_old(work, row, work.pods_of(row.index)), Outcome.KEPT


def _wait_drained(work: Work, row: Row, replacement: Row) -> tuple[Row, Outcome]:
    waiting = wait_drained(work, row, work.pods_of(row.index))
    if waiting is not None:
        return waiting, Outcome.KEPT
    work.put(replacement.but(surge_of=None))
    work.event("Normal", MIGRATED, row.index, (
        f"migrated off node {row.op.leaving}: Instance {replacement.index} "
        f"(incarnation {replacement.incarnation}) serves in its place"))
    return row, Outcome.GONE


# A migration past its SurgeCreate, by step.
MIGRATE_STEPS: dict[Step, Callable[[Work, Row, Row], tuple[Row, Outcome]]] = {
    Step.SURGE_WAIT_READY: _wait_ready,
    Step.SURGE_WAIT_AVAILABLE: _wait_available,
    Step.HAND_OVER: _hand_over,
    Step.DRAIN_OLD: _drain_old,
    Step.WAIT_DRAINED: _wait_drained,
}


# -- when it goes wrong ---------------------------------------------------------------


def _replacement_failed(work: Work, row: Row, replacement: Row) -> Row:
    """Before the hand-over: the replacement goes, the source keeps serving, and the
    next attempt waits the backoff (steered off where this one ran)."""
    node = row.op.leaving
    failure = replacement.last_failure or {
        "pod": None, "container": None, "reason": "ReplacementLost", "exitCode": None,
        "message": "the replacement Instance is gone", "time": format_time(work.now)}
    if replacement.phase != Phase.DELETING:
        served = any(P.gate_set(p) for p in work.pods_of(replacement.index))
        gone = open_delete(work, replacement, f"migration off node {node} failed")
        work.put(gone if served else gone.with_op(abandon_grace=abandon_grace(work)))
    row = record_failure(work, row.but(operation=None, phase=Phase.READY), row.revision,
                         failure, work.pods_of(replacement.index))
    attempts = row.attempts or 0
    limit = max_attempts(work)
    after = "no further attempt" if attempts >= limit else (
        f"attempt {attempts} of {limit}; the next after {row.retry_at}")
    work.event("Warning", MIGRATION_FAILED, row.index, (
        f"migration off node {node} failed: replacement Instance {replacement.index}: "
        f"{failure.get('reason')}: {failure.get('message')}; the Instance keeps serving "
        f"on {node}; {after}"))
    return row


def _replacement_lost(work: Work, row: Row, replacement: Row | None) -> Row:
    """After the hand-over the replacement stopped serving: the source's pods that still
    stand serve again; with none left the Instance starts over from scratch."""
    if replacement is not None and replacement.phase != Phase.DELETING:
        work.put(open_delete(work, replacement, "replacement lost"))
    standing = [p for p in work.instance(row).live if not P.is_terminating(p)]
    node = row.op.leaving
    if standing and not row.op.handed_over:
        return _replacement_failed(work, row, replacement) if replacement is not None \
            else row.but(operation=None, phase=Phase.READY)
    if standing:
        work.route(standing, True)
        work.event("Warning", MIGRATION_FAILED, row.index, (
            f"migration off node {node} lost its replacement after the hand-over; the "
            f"Instance serves again on {node}"))
        return row.but(operation=None, phase=Phase.READY)
    work.event("Warning", MIGRATION_FAILED, row.index, (
        f"migration off node {node} lost its replacement after the hand-over and no "
        f"source pod stands; the Instance starts over at revision {work.desired.revision}"))
    return row.but(operation=None, phase=Phase.FAILED, rebuild=True)
