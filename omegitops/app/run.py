"""A run of the job: its passes (one, or until idle) over an open cluster, stopped in
order by a signal, and what they left for the table and the report.

The command (``commands/reconcile.py``) opens the cluster, calls ``run_passes`` and
prints; the rule for what ``--prune`` may tear down (``pruning``) lives here, beside
the passes that obey it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from omegitops.app.passes import PassResult, Pruning, component_key, run_pass
from omegitops.app.stopping import Interrupted, defer_signals, interrupted_by
from omegitops.app.untilidle import IDLE, PASS_LIMIT, run_until_idle
from omegitops.cluster.base import INFERENCE_REPLICA, Cluster
from omegitops.cluster.errors import LeaseLost
from omegitops.manifests.load import Loaded, ServiceComponent
from omegitops.manifests.repository import INFERENCE_SERVICE
from omegitops.model.ids import ComponentKey
from omegitops.render.templates import MANAGED
from omegitops.util.errors import print_errors

log = logging.getLogger("omegitops")


def pruning(prune: bool, loaded: Loaded) -> tuple[Pruning | None, bool]:
    """(what --prune may tear down, whether pruning was refused).

    As Argo CD refuses to prune to an empty application, a repository that
    yields no services, or that has a file that failed to load (whatever it
    defined is unknown), prunes nothing: a broken checkout must not tear the
    fleet down. Services whose manifest is present but invalid are kept.
    """
    if not prune:
        return None, False
    if not loaded.result.catalog.services:
        log.error("refusing to prune: the repository yields no services")
        return None, True
    unreadable = sorted({e.path for e in loaded.repo.errors})
    if unreadable:
        log.error("refusing to prune: %s could not be read", ", ".join(unreadable))
        return None, True
    return Pruning(keep=frozenset(present_but_invalid(loaded))), False


def present_but_invalid(loaded: Loaded) -> set[tuple[str, str]]:
    """Services whose manifest is in the repository but invalid this run."""
    valid = {m.id for m in loaded.result.catalog.services}
    return {(m.id.namespace, m.id.name) for m in loaded.repo.manifests
            if m.id.kind == INFERENCE_SERVICE and m.id not in valid}


@dataclass
class RunOutcome:
    """What a run's passes left: how many ran, how they ended, and the InferenceReplicas
    as the last one left them (for the table and the report)."""

    passes: int = 0
    failed: bool = False
    # The signal that stopped the run (its number), or None.
    interrupted: int | None = None
    # Another run took the cluster's Lease: nothing more was written.
    lost: LeaseLost | None = None
    # The last pass met only the cluster's passing faults.
    outage: bool = False
    replicas: list[dict[str, Any]] = field(default_factory=list)
    now: datetime | None = None
    # What the passes wrote, and the errors they met (the run's metrics).
    writes: int = 0
    errors: int = 0

    @property
    def passes_text(self) -> str:
        return f"{self.passes} pass" if self.passes == 1 else f"{self.passes} passes"


def run_passes(cluster: Cluster, items: list[ServiceComponent], loaded: Loaded, *,
               until_idle: bool, max_seconds: float, prune: Pruning | None,
               refused: bool = False) -> RunOutcome:
    """The run's passes on ``cluster``; what they applied is kept (a simulated cluster
    saves it) whatever stops them, and the InferenceReplicas they left are listed.

    A signal stops the passes; later ones wait for the save and the report (inside
    ``app.stopping.orderly_stop()``, as the command line runs every command)."""
    outcome = RunOutcome(failed=refused)
    progress = _Progress(outcome, loaded, items)
    try:
        if until_idle:
            _until_idle(cluster, items, max_seconds, progress, outcome, prune)
        else:
            progress(run_pass(cluster, items, prune))
    except (KeyboardInterrupt, Interrupted) as stop_signal:
        # What the passes applied stays applied (and, on sim:, saved: the cluster is
        # left normally); a pass cut here is one the next run carries on from.
        outcome.interrupted = interrupted_by(stop_signal)
    # From here on a signal waits: the save and the report must not be cut short, or
    # the two would disagree (app/stopping.py).
    defer_signals()
    # What the passes applied is kept whatever fails after them (the report, say):
    # a simulated cluster saves it now, as a real one holds it already.
    save = getattr(cluster, "save", None)
    if save is not None:
        save()
    last = progress.last
    # The InferenceReplicas as the last pass left them; one LIST when that pass did not
    # know them all (it watched, or a write failed, or the run was cut in one).
    if last is not None and last.replicas is not None and outcome.interrupted is None \
            and outcome.lost is None:
        outcome.replicas = [last.replicas[key] for key in sorted(last.replicas)]
    else:
        outcome.replicas = cluster.list_objects(INFERENCE_REPLICA, MANAGED)
    outcome.now = cluster.now()
    return outcome


def _until_idle(cluster: Cluster, items: list[ServiceComponent], max_seconds: float,
                progress: Callable[[PassResult], None], outcome: RunOutcome,
                prune: Pruning | None) -> None:
    try:
        stop = run_until_idle(cluster, items, max_seconds, progress, prune)
    except LeaseLost as err:
        # Another run holds the cluster now: write nothing more, but report what the
        # passes done so far left (reads need no Lease).
        outcome.lost, stop = err, IDLE
    if stop == PASS_LIMIT:
        # Something moved on every pass without the work ever ending: never a success,
        # whatever the passes' own errors said.
        print(f"error: --until-idle stopped: {stop}; the components that stayed busy are "
              "in the table below", file=sys.stderr)
        outcome.failed = True
    elif stop != IDLE:
        log.warning("stopping: %s", stop)


class _Progress:
    """Called after every pass: counts it, says what it did, and warns once a run about
    each InferenceReplica whose component the repository no longer has."""

    def __init__(self, outcome: RunOutcome, loaded: Loaded, items: list[ServiceComponent]):
        self.outcome = outcome
        self.last: PassResult | None = None
        self.warned: set[str] = set()
        self.invalid = present_but_invalid(loaded)
        # Components the repository has in another mode (RawDeployment, say).
        self.other_modes = {component_key(item): item.lifecycle.mode.value for item in items
                            if not item.lifecycle.managed}

    def __call__(self, result: PassResult) -> None:
        outcome = self.outcome
        outcome.passes += 1
        outcome.writes += result.applied
        outcome.errors += len(result.errors)
        self.last = result
        if result.passing_faults_only:
            # The cluster's passing fault (an API server restarting, a timeout): the
            # next pass carries on, and the run fails only if it ends in one.
            for error in result.errors:
                log.warning("%s; the next pass tries again", error)
        else:
            print_errors(result.errors)
            outcome.failed |= bool(result.errors)
        outcome.outage = bool(result.errors) and result.passing_faults_only
        if result.carried and not result.plans:
            return  # a pass on watches with nothing to plan: not worth a line
        busy = [plan.component for _, plan in result.all_plans if plan.busy]
        planned = f", {len(result.plans)} planned" if result.carried else ""
        log.info("pass %d at %s: %d writes, %d of %d components busy%s", outcome.passes,
                 result.now.strftime("%Y-%m-%dT%H:%M:%SZ"), result.applied, len(busy),
                 len(result.all_plans), planned)
        for orphan, owner in result.orphans:
            self._warn_orphan(orphan, owner)

    def _warn_orphan(self, orphan: str, owner: ComponentKey) -> None:
        if orphan in self.warned:
            return  # once per run, not once per pass
        self.warned.add(orphan)
        if owner[:2] in self.invalid:
            log.warning("InferenceReplica %s: the manifest of InferenceService %s/%s is "
                        "invalid, kept (an invalid manifest never tears anything down)",
                        orphan, *owner[:2])
        elif owner in self.other_modes:
            log.warning("InferenceReplica %s: InferenceService %s/%s %s is %s in the "
                        "repository now, which omegitops does not manage; its OMENative "
                        "Instances keep serving until --prune tears them down", orphan,
                        *owner, self.other_modes[owner])
        else:
            log.warning("InferenceReplica %s: its component is no longer in the "
                        "repository; --prune tears it down", orphan)
