"""The status report: ``status.json`` (machine-readable) and ``STATUS.md`` (Jinja2).

``build_report`` is pure: it takes the loaded repository, the InferenceReplicas
and Events already listed, and the cluster's ``now``, so that tests need no
cluster. ``write_report`` lists them, validates the report against
``schemas/status-report.schema.json`` and writes both files atomically.

The output is deterministic: everything is sorted, and the only time in it
is the cluster's, so that a commit step can commit the report only when its
content changed. (``generatedAt`` moves with the cluster clock; a commit step
that wants to ignore a run that changed nothing else should compare
``content_key`` of the two reports instead of their bytes.)

Health of a component (one word, most severe first):

- ``Degraded``: an Instance is Failed, or the Ready condition is False with
  reason InstanceFailed, or a Warning event about the component was seen in
  the last ``RECENT_WARNING_SECONDS`` (10 minutes) of cluster time;
- ``Progressing``: otherwise, when it is not yet settled: no InferenceReplica
  yet, an operation in flight, a rollout hold, or current, ready, available or
  updated differing from desired, or currentRevision differing from revision;
- ``Staged``: otherwise, when the InferenceReplica's Ready condition says Staged
  (update-strategies.txt): every Instance the partition lets move has moved,
  and the others wait on their revision for a person to lower the partition;
- ``Healthy``: otherwise (ready == available == desired, nothing in flight,
  no failure).

A service's health is the worst of its OMENative components; components in
other deployment modes are listed as not managed and have no health.

What only a person can move (a staged rollout, a held revision, a change InPlaceOnly
refuses) is listed under the component's ``needsPerson``, with what to do, and first
in STATUS.md.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from omegitops.cluster.base import EVENT, INFERENCE_REPLICA
from omegitops.lifecycle.scaling import AUTOSCALER, GIT
from omegitops.manifests.load import Loaded, ServiceComponent, resolved_components
from omegitops.manifests.schemas import is_valid, validator
from omegitops.model.partition import partition_held
from omegitops.model.replica import decode_rows, encode_rows, replica_name
from omegitops.model.state import OperationType, Phase, Row
from omegitops.render.resolve import RUNTIME, RUNTIME_CONFIG, ComponentLifecycle
from omegitops.render.templates import MANAGED
from omegitops.report import markdown
from omegitops.report.views import (
    WARNING,
    about_component,
    about_service,
    event_view,
    replica_view,
    sort_events,
)
from omegitops.util.errors import OmegitopsError, os_error_text
from omegitops.util.files import replace_atomically, unwritable_folder
from omegitops.util.gcpause import without_gc_pauses
from omegitops.util.times import format_time, parse_time

API_VERSION = "omegitops.io/v1alpha1"
KIND = "StatusReport"
JSON_FILE, MARKDOWN_FILE = "status.json", "STATUS.md"
TEMPLATE = "report.md.j2"
TEMPLATES = Path(__file__).resolve().parent / "templates"

HEALTHY, STAGED, PROGRESSING, DEGRADED = "Healthy", "Staged", "Progressing", "Degraded"
SEVERITY = {HEALTHY: 0, STAGED: 1, PROGRESSING: 2, DEGRADED: 3}
RECENT_WARNING_SECONDS = 600
EVENTS_PER_SERVICE = 5
# Validation errors and warnings the report lists, each (sorted: the first ones); the
# rest are counted (``validationErrorsLeftOut``), as the plan counts what it leaves
# out: a file of 100,000 tiny bad documents made a 30 MB report for the job to commit.
# ``omegitops validate`` lists them all. The Markdown lists the first LISTED_MARKDOWN.
LISTED = 1000
LISTED_MARKDOWN = 50
LEFT_OUT = {"validationErrors": "validationErrorsLeftOut",
            "validationWarnings": "validationWarningsLeftOut"}
# Phases in the order a reader wants them: at rest and fine, in flight, at rest and not fine.
PHASE_ORDER = ("Ready", "Creating", "Updating", "Restarting", "Migrating", "Deleting",
               "Pending", "Failed")
# The status each condition has when all is well; any other condition is well when False.
GOOD_STATUS = {"Ready": "True", "EngineReady": "True", "DecoderReady": "True",
               "RouterReady": "True"}
# Reasons that call for a person even with the condition in its good state: a staged
# rollout serves, and waits for the partition to be lowered.
ATTENTION_REASONS = {"Staged"}
# The annotation that gives a held revision its attempts back (docs/operations.md).
RELEASE_REVISION = "ome.io/release-revision"


class ReportError(OmegitopsError):
    """The report does not match its own schema (a bug, never written out)."""


# -- building -------------------------------------------------------------------


@without_gc_pauses
def build_report(loaded: Loaded, replicas: list[dict], events: list[dict], now: datetime,
                 repository: str | None = None, revision: str | None = None,
                 owns: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """The report as a dict; pure. ``events`` are raw core/v1 Events. ``owns`` keeps
    the services of some namespaces only (a ``--shard``'s)."""
    by_name = {(r["metadata"].get("namespace"), r["metadata"]["name"]): r for r in replicas}
    views = sort_events([event_view(e) for e in events])
    components = _components_by_service(loaded)
    if owns is not None:
        components = {key: items for key, items in components.items() if owns(key[0])}
    # Events grouped by the service they are about in one pass (order kept), instead of
    # scanning every event for every service: with 1,000 services and 12,000 events the
    # scan made 12 million about_service calls and was most of a pass.
    by_service: dict[tuple[str, str], list[dict]] = {}
    for view in views:
        by_service.setdefault((view["namespace"], view["object"]["name"]), []).append(view)
    services = []
    for key in sorted(components):
        namespace, name = key
        service_events = [v for v in by_service.get(key, ()) if about_service(v, namespace, name)]
        entries = [_component(item, by_name, service_events, now) for item in components[key]]
        services.append(_service(components[key][0], entries, service_events))
    known = {(s["namespace"], replica_name(s["name"], c["component"]))
             for s in services for c in s["components"]}
    report: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "generatedAt": format_time(now.timestamp()),
        "repository": repository if repository is not None else loaded.root.as_posix(),
        # The commit of the manifests reconciled, as Argo CD and Flux show the synced one.
        "revision": revision,
        "summary": None,
        "services": services,
        "unknownReplicas": sorted(f"{ns}/{name}" for ns, name in by_name
                                  if (ns, name) not in known),
    }
    _list_bounded(report, "validationErrors", _manifest_errors(loaded.result.errors))
    _list_bounded(report, "validationWarnings", _manifest_errors(loaded.result.warnings))
    report["summary"] = _summary(report)
    return report


def _list_bounded(report: dict, key: str, entries: list, left_out: int = 0) -> None:
    """Put the first ``LISTED`` of ``entries`` under ``key``, and how many more there
    are (with ``left_out`` already left out) under its ``LEFT_OUT`` key when any."""
    report[key] = entries[:LISTED]
    more = left_out + max(0, len(entries) - LISTED)
    if more:
        report[LEFT_OUT[key]] = more
    else:
        report.pop(LEFT_OUT[key], None)


def listed_and_left_out(report: dict, key: str) -> int:
    """All the report counts under ``key``: those listed and those left out."""
    return len(report[key]) + report.get(LEFT_OUT[key], 0)


def _namespace(item: ServiceComponent) -> str:
    # The same default as the reconciler uses for a service without a namespace.
    return item.service.data["metadata"].get("namespace") or "default"


def _components_by_service(loaded: Loaded) -> dict[tuple[str, str], list[ServiceComponent]]:
    grouped: dict[tuple[str, str], list[ServiceComponent]] = {}
    for item in resolved_components(loaded):
        key = (_namespace(item), item.service.data["metadata"]["name"])
        grouped.setdefault(key, []).append(item)
    return grouped


def _service(item: ServiceComponent, components: list[dict], events: list[dict]) -> dict:
    health = [c["health"] for c in components if c["managed"]]
    warnings = [v for v in events if v["type"] == WARNING]
    return {
        "namespace": _namespace(item),
        "name": item.service.data["metadata"]["name"],
        "path": item.service.path,
        "runtime": item.runtime.id.name if item.runtime else None,
        "health": max(health, key=SEVERITY.__getitem__) if health else None,
        "components": components,
        "events": warnings[-EVENTS_PER_SERVICE:],
    }


def _component(item: ServiceComponent, replicas: dict, events: list[dict],
               now: datetime) -> dict:
    lifecycle = item.lifecycle
    base = {"component": lifecycle.component, "managed": lifecycle.managed,
            "deploymentMode": lifecycle.mode.value}
    if not lifecycle.managed:
        return base
    name = replica_name(item.service.data["metadata"]["name"], lifecycle.component)
    replica = replicas.get((_namespace(item), name))
    if replica is None:
        return {**base, **_missing(name, lifecycle.replicas, lifecycle.min_ready_seconds),
                **_count_range(lifecycle)}
    view = replica_view(replica)
    # Read, never changed, here: the rows may share their values with the replica.
    decoded = decode_rows((replica.get("status") or {}).get("instances"), copy=False)
    rows = sorted((Row.from_storage(row) for row in decoded), key=lambda row: row.index)
    mine = [v for v in events if about_component(v, lifecycle.component)]
    staged = staged_view(replica, view, rows, lifecycle.settings.partition)
    health, reason = component_health(view, rows, mine, now, staged)
    phases = phase_counts(rows)
    # A StatefulSet's current revision is the one its partition keeps until the rollout
    # finishes: a staged canary's is the held Instances', whatever most Instances run.
    current = staged["heldRevision"] if staged else view["currentRevision"]
    return {
        **base,
        "inferenceReplica": name,
        "found": True,
        "health": health,
        "healthReason": reason,
        **{key: view[key] for key in ("desired", "current", "ready", "available", "updated",
                                      "serving", "minReadySeconds", "revision")},
        # The count the job last kept (``desired``, what plan --base starts from) and who
        # owns it; the range is Git's as this report's manifests have it.
        **_count_range(lifecycle),
        "countFrom": view["countFrom"],
        "currentRevision": current,
        "phases": phases,
        "phaseSummary": phase_summary(phases),
        "operations": sum(1 for row in rows if row.operation is not None),
        "failedInstances": [row.index for row in rows if row.phase == Phase.FAILED],
        "rolloutHold": _hold(view["rolloutHold"]),
        "canary": _canary(view.get("canary")),
        "conditions": unhealthy_conditions(view["conditions"]),
        "staged": staged,
        "needsPerson": needs_person(item, name, view, staged),
        # What plan --base starts from: the Instances as stored, which no replay of the
        # manifests can show (a partition, a held or failed revision, a pinned runtime).
        "state": instance_state(replica, decoded),
    }


# What a report keeps of a pod in an Instance row: enough to build it again, nothing that
# says where it ran (a node, a restart count), so that the report of one fleet is the
# same however its pods were placed.
STATE_POD_FIELDS = ("name", "runner", "ordinal", "ready", "serving")


def instance_state(replica: dict, decoded: list[dict] | None = None) -> dict[str, Any]:
    """The InferenceReplica's rows and revision retries, as ``plan --base`` seeds a
    simulated cluster with them; rows re-encoded in the smaller encoding, whichever one
    the status had, with their pods cut to ``STATE_POD_FIELDS`` (``decoded``: the rows,
    when the caller has decoded them already; they are not changed)."""
    status = replica.get("status") or {}
    if decoded is None:
        decoded = decode_rows(status.get("instances"))
    rows = []
    for row in sorted(decoded, key=lambda r: r["index"]):
        # An absent field and a null one are the same row (ColumnarV2 keeps no nulls).
        kept = {k: row[k] for k in sorted(row)
                if row[k] is not None or k in ("operation", "lastFailure")}
        kept["pods"] = [{k: p[k] for k in STATE_POD_FIELDS if k in p}
                        for p in row.get("pods") or [] if isinstance(p, dict)]
        rows.append(kept)
    retries = status.get("revisionRetries")
    return {"instances": encode_rows(rows),
            "revisionRetries": retries if isinstance(retries, dict) else {}}


def _count_range(lifecycle: ComponentLifecycle) -> dict:
    """minReplicas and maxReplicas as Git sets them, and who owns the count."""
    low, high = lifecycle.bounds or (lifecycle.replicas, lifecycle.replicas)
    owner = GIT if lifecycle.bounds is None else AUTOSCALER
    return {"minReplicas": low, "maxReplicas": high, "countFrom": owner}


def _missing(name: str, desired: int, min_ready: int) -> dict:
    """A managed component without an InferenceReplica: the reconcile has not made it yet."""
    return {
        "inferenceReplica": name, "found": False, "health": PROGRESSING,
        "healthReason": "no InferenceReplica yet",
        "desired": desired, "current": 0, "ready": 0, "available": 0, "updated": 0,
        "serving": 0, "minReadySeconds": min_ready, "revision": None, "currentRevision": None,
        "phases": [], "phaseSummary": "", "operations": 0, "failedInstances": [],
        "rolloutHold": None, "conditions": [], "staged": None, "needsPerson": [],
    }


def component_health(view: dict, rows: list[Row], events: list[dict],
                     now: datetime, staged: dict | None = None) -> tuple[str, str]:
    """The health word and why; the rule is in the module docstring."""
    failed = [str(row.index) for row in rows if row.phase == Phase.FAILED]
    if failed:
        return DEGRADED, f"Instances {', '.join(failed)} Failed"
    ready = _condition(view, "Ready")
    if ready and ready.get("status") == "False" and ready.get("reason") == "InstanceFailed":
        return DEGRADED, f"Ready is False: {ready.get('message') or 'InstanceFailed'}"
    recent = [v for v in events if v["type"] == WARNING and v["lastTimestamp"]
              and parse_time(v["lastTimestamp"]) >= now.timestamp() - RECENT_WARNING_SECONDS]
    if recent:
        last = recent[-1]
        return DEGRADED, f"Warning {last['reason']} at {last['lastTimestamp']}"
    unsettled = _unsettled(view, rows, staged is not None)
    if unsettled:
        return PROGRESSING, "; ".join(unsettled)
    if staged:
        return STAGED, staged_text(staged).removeprefix("Staged ")
    text = f"{view['ready']}/{view['desired']} Instances ready and available"
    paused = _paused(view["rolloutHold"])
    return HEALTHY, f"{text}; {paused}" if paused else text


def _unsettled(view: dict, rows: list[Row], staged: bool = False) -> list[str]:
    """What keeps the component from rest; a staged one is at rest short of the
    Instances its partition holds, so those do not count."""
    reasons = []
    in_flight = sum(1 for row in rows if row.operation is not None)
    if in_flight:
        reasons.append(f"{in_flight} operation{'s' if in_flight != 1 else ''} in flight")
    reasons.extend(migrating_texts(rows))
    want = view["desired"]
    lagging = [f"{key} {view[key]}/{want}" for key in ("current", "ready", "available", "updated")
               if view[key] != want and not (staged and key == "updated")]
    if lagging:
        reasons.append(", ".join(lagging))
    if view["revision"] and view["currentRevision"] != view["revision"] and not staged:
        current = view["currentRevision"]
        reasons.append(f"current revision {current} is not {view['revision']}" if current
                       else f"no Instance runs {view['revision']} yet")
    canary = _canary(view.get("canary"))
    if canary is not None:
        reasons.append(f"canary step {canary['step']}/{canary['steps']} "
                       f"({canary['replicas']} on the new revision) waits for "
                       f"{canary['waitingFor']}")
    paused = _paused(view["rolloutHold"])
    if paused:
        # A pause alone leaves the component at rest: it says so without unsettling it.
        if reasons:
            reasons.append(paused)
    elif view["rolloutHold"] and canary is None:
        hold = view["rolloutHold"]
        # A member its rollout group holds says whom it waits for.
        reasons.append(f"held: {hold.get('reason')}" if hold.get("gate") == "Group"
                       else "rollout held")
    return reasons


CANARY_FIELDS = ("step", "steps", "replicas", "pause", "target", "startedAt", "reachedAt",
                 "endsAt", "waitingFor", "promotedBy")


def _canary(stored: Any) -> dict | None:
    """The canary's current step as the report shows it; None when none moves the
    component or it is past its last step."""
    if not isinstance(stored, dict) or stored.get("done") or "step" not in stored:
        return None
    return {key: stored.get(key) for key in CANARY_FIELDS}


def migrating_texts(rows: list[Row]) -> list[str]:
    """Each migration in flight: which Instance leaves which node, and why."""
    return [f"Instance {row.index} migrating off node {row.op.leaving} ({row.op.leaving_why})"
            for row in rows if row.operation is not None
            and row.operation.type == OperationType.MIGRATE]


def _paused(hold: dict | None) -> str | None:
    """Who paused the rollout and since when, while a pause holds it."""
    if not hold or hold.get("gate") != "Paused":
        return None
    return f"rollout paused by {hold.get('by') or 'unknown'} since {hold.get('since') or '-'}"


def _condition(view: dict, kind: str) -> dict | None:
    return next((c for c in view["conditions"] if c.get("type") == kind), None)


def staged_view(replica: dict, view: dict, rows: list[Row],
                partition: int) -> dict[str, Any] | None:
    """A staged rollout, read from the live InferenceReplica: its Ready condition says
    Staged, and the Instances its partition holds off the update revision are named
    with the revision they run. None when the rollout is not staged."""
    ready = _condition(view, "Ready")
    if not ready or ready.get("status") != "True" or ready.get("reason") != "Staged":
        return None
    rolling = ((((replica.get("spec") or {}).get("lifecycle") or {}).get("updateStrategy")
                or {}).get("rollingUpdate") or {})
    live = rolling.get("partition")
    if isinstance(live, int) and not isinstance(live, bool):
        partition = live
    own = [row for row in rows if row.surge_of is None and row.phase != Phase.DELETING]
    update = view["revision"]
    kept = set(partition_held(own, update, partition))
    held = [row for row in own if row.index in kept and row.revision != update]
    revisions = Counter(row.revision for row in held if row.revision)
    return {
        "partition": partition,
        "heldInstances": [row.index for row in held],
        "heldRevision": min(revisions, key=lambda r: (-revisions[r], r)) if revisions
        else view["currentRevision"],
        "updateRevision": update,
        "updatedInstances": sum(1 for row in own if row.revision == update),
        "desired": view["desired"],
        "message": ready.get("message") or "",
    }


def staged_text(staged: dict) -> str:
    """``Staged at partition 1: Instance 0 held on rev-a; 1/2 Instances on rev-b``."""
    held = staged["heldInstances"]
    return (f"Staged at partition {staged['partition']}: "
            f"Instance{'s' if len(held) != 1 else ''} {', '.join(map(str, held))} held on "
            f"{staged['heldRevision']}; {staged['updatedInstances']}/{staged['desired']} "
            f"Instances on {staged['updateRevision']}")


def needs_person(item: ServiceComponent, name: str, view: dict,
                 staged: dict | None) -> list[dict[str, str]]:
    """What waits for a person, each with what to do (update-strategies.txt, and
    docs/troubleshooting.md for a held revision); empty when nothing does."""
    out = []
    component = item.lifecycle.component
    if staged:
        out.append({"reason": STAGED, "text": staged_text(staged),
                    "action": f"set {_partition_field(item)} to 0, or remove it, to finish "
                              "the rollout"})
    stalled = _condition(view, "RolloutStalled")
    if stalled and stalled.get("status") == "True":
        reason = str(stalled.get("reason") or "")
        if reason == "RevisionHeld":
            out.append({"reason": reason, "text": str(stalled.get("message") or ""),
                        "action": "fix the cause and push a new revision, or release this one: "
                                  f"kubectl annotate inferencereplica {name} -n "
                                  f"{_namespace(item)} {RELEASE_REVISION}={view['revision']}"})
        elif reason == "InPlaceUpdateNotPossible":
            out.append({"reason": reason, "text": str(stalled.get("message") or ""),
                        "action": f"change spec.{component}.lifecycle.updateStrategy.type "
                                  "(to InPlaceIfPossible, say), or undo the change"})
    return out


def _partition_field(item: ServiceComponent) -> str:
    """Where the component's partition is set: the service, or its runtime."""
    component = item.lifecycle.component
    field = item.lifecycle.fields.get("updateStrategy.rollingUpdate.partition")
    if field is not None and field.source == RUNTIME and item.runtime is not None:
        return (f"spec.{RUNTIME_CONFIG[component]}.lifecycle.updateStrategy.rollingUpdate."
                f"partition in runtime {item.runtime.id.name}")
    return (f"spec.{component}.lifecycle.updateStrategy.rollingUpdate.partition in "
            f"{item.service.path}")


def unhealthy_conditions(conditions: list[dict]) -> list[dict]:
    """Conditions not in their good state, or whose reason asks for a person (Staged),
    sorted by type."""
    out = []
    for cond in conditions:
        if (cond.get("status") != GOOD_STATUS.get(str(cond.get("type")), "False")
                or cond.get("reason") in ATTENTION_REASONS):
            out.append({key: cond.get(key) for key in
                        ("type", "status", "reason", "message", "lastTransitionTime")})
    return sorted(out, key=lambda c: c["type"] or "")


def phase_counts(rows: list[Row]) -> list[dict]:
    counts = Counter(row.phase.value for row in rows)
    order = {phase: i for i, phase in enumerate(PHASE_ORDER)}
    phases = sorted(counts, key=lambda p: (order.get(p, len(order)), p))
    return [{"phase": phase, "count": counts[phase]} for phase in phases]


def phase_summary(phases: list[dict]) -> str:
    """``Ready ×2, Creating ×1``."""
    return ", ".join(f"{p['phase']} ×{p['count']}" for p in phases)


def _hold(hold: dict | None) -> dict | None:
    if not hold:
        return None
    shown = {key: hold.get(key) for key in ("gate", "reason", "target", "since")}
    if hold.get("by"):
        shown["by"] = hold["by"]  # who or what paused it (a Paused hold)
    return shown


def _manifest_errors(errors: list) -> list[dict]:
    return sorted((error.to_dict() for error in errors), key=_error_order)


def _error_order(error: dict) -> tuple:
    return error["path"], error["line"] or 0, error["field"] or "", error["message"]


def _summary(report: dict) -> dict:
    components = [c for s in report["services"] for c in s["components"]]
    managed = [c for c in components if c["managed"]]
    health = {word: sum(1 for c in managed if c["health"] == word) for word in SEVERITY}
    summary = {
        "services": len(report["services"]),
        "components": len(components),
        "managed": len(managed),
        "notManaged": len(components) - len(managed),
        "health": health,
        "validationErrors": listed_and_left_out(report, "validationErrors"),
    }
    summary["text"] = summary_line(summary)
    return summary


def summary_line(summary: dict) -> str:
    """``5 services, 7 components (7 managed, 0 not managed): 6 Healthy, ...``."""
    health = ", ".join(f"{count} {word}" for word, count in summary["health"].items())
    errors = summary["validationErrors"]
    return (f"{summary['services']} services, {summary['components']} components "
            f"({summary['managed']} managed, {summary['notManaged']} not managed): {health}; "
            f"{errors} validation error{'s' if errors != 1 else ''}")


def content_key(report: dict) -> bytes:
    """The report without its time stamp and the commit read, for "did anything change"
    checks. A run reads the commit the previous run's report made, so counting the
    commit as a change would commit a new report on every run. Written by orjson, keys
    sorted (the standard library took 0.1 s for a report of 1,000 services, and a run
    compares two), by the standard library what orjson refuses (an integer past 64
    bits); compared only with another key of this function."""
    kept = {k: v for k, v in report.items() if k not in ("generatedAt", "revision")}
    try:
        return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(kept, sort_keys=True).encode()


# -- rendering and writing -----------------------------------------------------


def validate_report(report: dict) -> None:
    """Refuse a report its schema does not allow. The compiled yes/no answers first
    (the report of 10,000 services is checked in a fraction of what jsonschema takes);
    only a report that fails is walked by jsonschema, for the path and message."""
    if is_valid("StatusReport")(report):
        return
    errors = sorted(validator("StatusReport").iter_errors(report),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        raise ReportError(f"status report does not match its schema at {where}: "
                          f"{first.message}")


class _ReportEnvironment(Environment):
    """Jinja as the report and plan templates use it: ``a.b`` on a dict of the
    report's looks the key up first. Jinja tries the attribute first, and a dict has
    none of those names: at 10,000 services that was 650,000 AttributeErrors raised and
    caught, a third of rendering STATUS.md. The answer is Jinja's own: a name a dict
    has as a method (``get``, ``items``) still goes Jinja's way."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                pass
        return super().getattr(obj, attribute)


_DICT_ATTRIBUTES = frozenset(dir(dict))


def environment() -> Environment:
    # auto_reload off: the templates are the package's own and never change during a
    # run, and with it on, each service's include looked at its file again (a stat each).
    env = _ReportEnvironment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=StrictUndefined, auto_reload=False)
    # Every value a template quotes from manifests or the cluster goes through these.
    return markdown.register(env)


def render_markdown(report: dict) -> str:
    return environment().get_template(TEMPLATE).render(
        report=report, listed=LISTED_MARKDOWN, waiting=waiting_for_a_person(report),
        errors=listed_and_left_out(report, "validationErrors"),
        warnings=listed_and_left_out(report, "validationWarnings"))


def waiting_for_a_person(report: dict) -> list[tuple[dict, dict, dict]]:
    """(service, component, what it needs) of everything only a person can move, in the
    report's order: what STATUS.md lists first."""
    return [(service, component, need) for service in report["services"]
            for component in service["components"] if component["managed"]
            for need in component.get("needsPerson") or []]


def render_json(report: dict) -> str:
    """The report as indented JSON. orjson writes the very text ``json.dumps(indent=2)``
    does, in C: the standard library's encoder is pure Python once it indents, and at
    1,000 services that was a second of the job. Data orjson refuses (an integer past
    64 bits) is written by the standard library."""
    try:
        return orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n"
    except TypeError:
        return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def write_atomic(path: Path, text: str) -> bool:
    """Write ``text`` via a temporary file and os.replace; False when it was already there."""
    data = text.encode("utf-8")
    if path.exists() and path.read_bytes() == data:
        return False
    # A report is for people and tools to read: the mode the user's umask gives a new
    # file (0644 under the usual 022), not the temporary file's 0600.
    replace_atomically(path, data, mode=0o666 & ~_umask())
    return True


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def report_dir_problem(report_dir: str | os.PathLike, base: Path | None = None) -> str | None:
    """Why the report could not be written into ``report_dir``, or None; paths are
    named relative to ``base`` when given (a clone's temporary folder means nothing).

    Asked before the run touches the cluster: found only when the report is
    written, a file where the folder should be failed the run after the
    reconcile was applied, and on every run after it.
    """
    target = Path(report_dir)

    def shown(path: Path) -> str:
        return path.relative_to(base).as_posix() if base and path.is_relative_to(base) \
            else str(path)

    for folder in (target, *target.parents):
        if base is not None and not folder.is_relative_to(base):
            break
        if folder.is_symlink() and not folder.exists():
            return f"{shown(folder)} is a symbolic link to nothing"
        if folder.exists() or folder.is_symlink():
            if not folder.is_dir():
                return f"{shown(folder)} is a file, not a folder"
            break
    if base is not None:
        # A link in the repository (a committed ``status`` link, one on the way to
        # --report-dir) must not carry the report, or a commit of it, out of the clone.
        for path in (target, target / JSON_FILE, target / MARKDOWN_FILE):
            if not path.resolve().is_relative_to(base.resolve()):
                return (f"{shown(path)} leads out of the repository through a symbolic "
                        "link")
    for name in (JSON_FILE, MARKDOWN_FILE):
        if (target / name).is_dir():
            return f"{shown(target / name)} is a folder, not a file"
    refused = unwritable_folder(target)
    if refused is not None:
        return f"{shown(target)} cannot be written ({refused.strerror or refused})"
    return None


class ReportNotWritten(OmegitopsError):
    """The report's files could not be written (a full disk, a folder made read-only)."""


def write_report(report_dir: str | os.PathLike, loaded: Loaded, cluster: Any,
                 repository: str | None = None, revision: str | None = None,
                 replicas: list[dict] | None = None) -> dict:
    """List what the report needs (the InferenceReplicas unless the caller has just
    listed them), build, validate and write it; returns the report. A cluster scoped
    to a shard's namespaces gives the shard's report."""
    report = run_report(loaded, cluster, repository, revision, replicas)
    return write_built_report(report_dir, report)


def run_report(loaded: Loaded, cluster: Any, repository: str | None = None,
               revision: str | None = None, replicas: list[dict] | None = None) -> dict:
    """The report of the cluster as it stands (one LIST of Warning events, and of the
    InferenceReplicas unless the caller has them), built, not written."""
    if replicas is None:
        replicas = cluster.list_objects(INFERENCE_REPLICA, MANAGED)
    events = report_events(cluster)
    return build_report(loaded, replicas, events, cluster.now(), repository, revision,
                        owns=getattr(cluster, "namespace_scope", None))


def report_events(cluster: Any) -> list[dict]:
    """The events a report reads: Warnings only (what a service shows, and what makes a
    component Degraded), chosen by the API server. A rollout leaves two Normal events
    per Instance, so a fleet at rest has thousands that no report shows."""
    return cluster.list_objects(EVENT, MANAGED, fields={"type": WARNING})


def write_built_report(report_dir: str | os.PathLike, report: dict) -> dict:
    """Validate a built report and write its JSON and Markdown into ``report_dir``."""
    validate_report(report)
    markdown = render_markdown(report)
    target = Path(report_dir)
    try:
        target.mkdir(parents=True, exist_ok=True)
        write_atomic(target / JSON_FILE, render_json(report))
        write_atomic(target / MARKDOWN_FILE, markdown)
    except OSError as err:
        raise ReportNotWritten(f"the report could not be written: {os_error_text(err)}") \
            from err
    return report


def merge_reports(reports: list[dict]) -> dict:
    """One report of the whole fleet from the reports of its shards; pure.

    The shards' namespaces do not overlap, so their services are put together
    (sorted as one report sorts them); each shard read the same manifests, so
    their validation errors and warnings are the same and are kept once. The
    report is as new as its newest shard. Shards that read different commits of
    the repository are refused: their reports do not describe one state.
    """
    if not reports:
        raise ValueError("no shard reports to merge")
    revisions = {r.get("revision") for r in reports}
    if len(revisions) > 1:
        raise ValueError(f"the shards reconciled different commits: "
                         f"{', '.join(sorted(str(v) for v in revisions))}")
    first = reports[0]
    merged = {
        "apiVersion": first["apiVersion"],
        "kind": first["kind"],
        "generatedAt": max(r["generatedAt"] for r in reports),
        "repository": first["repository"],
        "revision": first.get("revision"),
        "summary": None,
        "services": sorted((s for r in reports for s in r["services"]),
                           key=lambda s: (s["namespace"], s["name"])),
        "unknownReplicas": sorted({n for r in reports for n in r["unknownReplicas"]}),
        # Each shard checked its own services and every runtime: runtime errors come
        # from every shard, and are kept once, in the order one report has them.
    }
    # What a shard left out is not known error by error: a runtime's errors come from
    # every shard. The merge counts the most any shard left out, a lower bound.
    for key, left_out in LEFT_OUT.items():
        _list_bounded(merged, key, _once(e for r in reports for e in r[key]),
                      max(r.get(left_out, 0) for r in reports))
    merged["summary"] = _summary(merged)
    return merged


def _once(entries) -> list:
    seen, kept = set(), []
    for entry in entries:
        key = json.dumps(entry, sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return sorted(kept, key=_error_order)
