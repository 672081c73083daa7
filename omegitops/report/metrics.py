"""The run's figures in Prometheus's text format, at the end of each run: a file for
node-exporter's textfile collector (``--metrics-file``), or a push to a Pushgateway
(``--metrics-push``), since a CronJob's pod lives too short to be scraped. Built from
the status report, so the figures and STATUS.md never disagree.

prometheus_client writes the format (label escaping, the atomic file, the push's
grouping key) as every Prometheus tool reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from omegitops.report.status import SEVERITY

COMPONENT = ("namespace", "service", "component")


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What the run did, beside what its report says of the fleet."""

    seconds: float
    passes: int
    writes: int
    errors: int
    exit_code: int
    finished_at: float  # Unix time


def registry(report: dict[str, Any], run: RunFigures) -> CollectorRegistry:
    """Every gauge of one run; pure."""
    found = CollectorRegistry()
    _fleet(found, report)
    _run(found, run)
    return found


def _fleet(found: CollectorRegistry, report: dict[str, Any]) -> None:
    health = Gauge("omegitops_component_health", "1 for the component's health in the "
                   "status report (Healthy, Staged, Progressing, Degraded), 0 for the others",
                   [*COMPONENT, "health"], registry=found)
    instances = Gauge("omegitops_instances", "The component's Instances by phase",
                      [*COMPONENT, "phase"], registry=found)
    desired = Gauge("omegitops_instances_desired", "The count of Instances the job keeps",
                    COMPONENT, registry=found)
    serving = Gauge("omegitops_instances_serving", "Instances in the routing Service",
                    COMPONENT, registry=found)
    held = Gauge("omegitops_revision_held", "1 while the component's rollout is stopped on "
                 "a held revision", COMPONENT, registry=found)
    person = Gauge("omegitops_needs_person", "Things in the component only a person can "
                   "move (STATUS.md's \"Needs a person\")", COMPONENT, registry=found)
    errors = Gauge("omegitops_validation_errors", "Manifest errors the run found",
                   registry=found)
    errors.set(report["summary"]["validationErrors"])
    for service in report["services"]:
        for component in service["components"]:
            if not component["managed"]:
                continue
            key = (service["namespace"], service["name"], component["component"])
            for word in SEVERITY:
                health.labels(*key, word).set(1 if component["health"] == word else 0)
            for phase in component.get("phases") or []:
                instances.labels(*key, phase["phase"]).set(phase["count"])
            desired.labels(*key).set(component.get("desired") or 0)
            serving.labels(*key).set(component.get("serving") or 0)
            needs = component.get("needsPerson") or []
            held.labels(*key).set(int(any(n["reason"] == "RevisionHeld" for n in needs)))
            person.labels(*key).set(len(needs))


def _run(found: CollectorRegistry, run: RunFigures) -> None:
    for name, text, value in (
        ("omegitops_run_duration_seconds", "How long the run took, wall clock", run.seconds),
        ("omegitops_run_passes", "Reconcile passes the run made", run.passes),
        ("omegitops_run_writes", "Writes the passes made to the cluster", run.writes),
        ("omegitops_run_errors", "Errors the passes met (the cluster's API included)",
         run.errors),
        ("omegitops_run_exit_code", "The run's exit code", run.exit_code),
        ("omegitops_run_finished_timestamp_seconds", "When the run ended (Unix time)",
         run.finished_at),
    ):
        Gauge(name, text, registry=found).set(value)


def write(found: CollectorRegistry, path: str) -> None:
    """The file, replaced whole (the textfile collector never reads half of it)."""
    write_to_textfile(path, found)


def push(found: CollectorRegistry, gateway: str, grouping: dict[str, str]) -> None:
    """Replace this job's group on the Pushgateway (one group per shard)."""
    push_to_gateway(gateway, job="omegitops", registry=found, grouping_key=grouping,
                    timeout=10)
