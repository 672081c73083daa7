"""A rollout forecast: the real reconcile passes, run on a throw-away simulated cluster.

``run_until_idle`` is the ``reconcile --until-idle`` loop: after a pass that
wrote, the cluster gets up to a second to react; after one that did not, the
clock jumps to the next planned wake-up or simulated transition, within a
time budget. ``forecast`` runs it on a cluster that nobody keeps (the caller
opens a copy) and records, after every pass, the time, the pods, each
component's serving Instances and each Instance's operation. The rest is
pure: ``operation_spans``, ``lowest_capacity`` and ``gantt`` turn those
samples into the summary a pull request shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from omegitops.app.passes import PassResult
from omegitops.app.untilidle import BUDGET_SPENT, IDLE, run_until_idle
from omegitops.capacity.nodes import GPU
from omegitops.capacity.scheduler import pod_requests
from omegitops.cluster.base import Cluster
from omegitops.manifests.load import ServiceComponent
from omegitops.model.durations import format_duration
from omegitops.model.state import Operation, Phase
from omegitops.preview.cadence import Cadence
from omegitops.render.templates import MANAGED
from omegitops.util.times import format_time, parse_time

DEFAULT_BUDGET_SECONDS = 7200.0


# -- samples -----------------------------------------------------------------------


SeriesKey = tuple[str, str]  # (namespace/service, component): one line of the forecast
InstanceKey = tuple[str, str, int]


@dataclass(frozen=True)
class InstanceState:
    phase: Phase | None
    operation: tuple[str, str, str] | None  # (type, mode, startedAt)
    label: str = ""


@dataclass(frozen=True)
class Sample:
    """What one pass saw: its time, the pods after it, serving vs desired, the Instances."""

    at: float
    pods: int
    capacity: dict[SeriesKey, tuple[int, int]] = field(default_factory=dict)
    instances: dict[InstanceKey, InstanceState] = field(default_factory=dict)
    # Instances on the component's newest revision, and the Ready condition's message.
    updated: dict[SeriesKey, tuple[int, str]] = field(default_factory=dict)
    # GPUs the pods after it ask for (terminating ones too: they hold theirs until gone).
    gpus: int = 0
    # A canary step waiting on its pause, per component: (step, pause, since when).
    pauses: dict[SeriesKey, tuple[int, str, str]] = field(default_factory=dict)


def usage(pods: list[dict[str, Any]]) -> tuple[int, int]:
    """(pods, GPUs they ask for): what a cluster must hold for them."""
    gpus = sum(pod_requests(pod).get(GPU, 0) for pod in pods)
    return len(pods), -(-gpus // 1000)


def sample_pass(result: PassResult, pods: int, gpus: int = 0) -> Sample:
    """A Sample from one pass's plans (their InferenceReplica status); pure."""
    capacity: dict[SeriesKey, tuple[int, int]] = {}
    instances: dict[InstanceKey, InstanceState] = {}
    updated: dict[SeriesKey, tuple[int, str]] = {}
    pauses: dict[SeriesKey, tuple[int, str, str]] = {}
    for _, plan in result.plans:
        replica = plan.replica
        key = (f"{replica['metadata']['namespace']}/{replica['spec']['inferenceService']}",
               plan.component)
        status = plan.replica.get("status") or {}
        capacity[key] = (int(status.get("servingReplicas") or 0),
                         int(status.get("desiredReplicas") or 0))
        ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
                     {})
        updated[key] = (int(status.get("updatedReplicas") or 0), ready.get("message") or "")
        canary = status.get("canary") or {}
        if canary.get("reachedAt") and canary.get("pause") and not canary.get("done"):
            pauses[key] = (int(canary["step"]), str(canary["pause"]), str(canary["reachedAt"]))
        for row in plan.rows:
            operation = row.operation
            op = None
            label = ""
            if operation is not None:
                op = (operation.type.value, operation.mode.value if operation.mode else "",
                      operation.started_at or "")
                label = span_label(row.index, operation, row.surge_of)
            instances[(*key, row.index)] = InstanceState(row.phase, op, label)
    return Sample(result.now.timestamp(), pods, capacity, instances, updated, gpus, pauses)


def span_label(index: int, operation: Operation, surge_of: int | None = None) -> str:
    """``Instance 0 Update (Surge)``; a gang's replacement says whom it replaces."""
    label = f"Instance {index} {operation.type.value}"
    if operation.mode is not None:
        label += f" ({operation.mode.value})"
    if surge_of is not None:
        label += f" replacing {surge_of}"
    if operation.leaving:
        label += f" off {operation.leaving}"
    return label


# -- what the samples say -------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One Instance operation from its start to the pass that saw it end."""

    service: str
    component: str
    index: int
    label: str
    start: float
    end: float
    outcome: str  # done, failed, running

    def to_dict(self) -> dict[str, Any]:
        return {"service": self.service, "component": self.component, "index": self.index,
                "operation": self.label, "start": format_time(self.start),
                "end": format_time(self.end), "seconds": round(self.end - self.start),
                "outcome": self.outcome}


def operation_spans(samples: list[Sample]) -> list[Span]:
    """Each Instance operation's span; one still open at the last sample is ``running``."""
    open_spans: dict[InstanceKey, tuple[tuple[Any, ...], float, str]] = {}
    spans: list[Span] = []

    def close(key: InstanceKey, at: float, outcome: str) -> None:
        _, start, label = open_spans.pop(key)
        spans.append(Span(key[0], key[1], key[2], label, start, max(at, start), outcome))

    for sample in samples:
        for key in sorted(set(open_spans) | set(sample.instances)):
            state = sample.instances.get(key)
            failed = state is not None and state.phase == Phase.FAILED
            current = state.operation if state is not None and not failed else None
            if key in open_spans and open_spans[key][0] != current:
                same = state is not None and state.operation == open_spans[key][0]
                close(key, sample.at, "failed" if failed and same else "done")
            if current is not None and key not in open_spans:
                start = _started(current[2], sample.at)
                open_spans[key] = (current, start, cast(InstanceState, state).label)
    if samples:
        for key in sorted(open_spans):
            close(key, samples[-1].at, "running")
    return sorted(spans, key=lambda s: (s.service, s.component, s.start, s.index))


def pause_bars(samples: list[Sample]) -> list[Bar]:
    """Each canary step's pause, from the step's Instances reaching the new revision to
    the pass that saw it end (``running`` when the forecast ends in it: a promotion
    nothing in the forecast gives)."""
    seen: dict[tuple[SeriesKey, int], tuple[str, float, float]] = {}
    ended: set[tuple[SeriesKey, int]] = set()
    for sample in samples:
        for key, (step, pause, since) in sample.pauses.items():
            first = seen.get((key, step))
            start = first[1] if first else _started(since, sample.at)
            seen[(key, step)] = (pause, start, sample.at)
        for held, (pause, start, _) in list(seen.items()):
            current = sample.pauses.get(held[0])
            if held not in ended and (current is None or current[0] != held[1]):
                ended.add(held)
                seen[held] = (pause, start, sample.at)
    bars = []
    for (key, step), (pause, start, end) in seen.items():
        label = (f"Canary step {step} waits for promotion" if pause == "promotion"
                 else f"Canary step {step} pause {pause}")
        bars.append(Bar(key[0], key[1], label, start, max(end, start),
                        "done" if (key, step) in ended else "running"))
    return sorted(bars, key=lambda b: (b.service, b.component, b.start))


def _started(text: str, fallback: float) -> float:
    try:
        return min(parse_time(text), fallback)
    except ValueError:
        return fallback


def lowest_capacity(samples: list[Sample]) -> list[dict[str, Any]]:
    """Per component, the pass with the fewest serving Instances relative to desired,
    and how many serve at the end."""
    lowest: dict[SeriesKey, tuple[float, int, int, float]] = {}
    for sample in samples:
        for key, (serving, desired) in sample.capacity.items():
            fraction = serving / desired if desired else 1.0
            if key not in lowest or fraction < lowest[key][0]:
                lowest[key] = (fraction, serving, desired, sample.at)
    final = samples[-1].capacity if samples else {}
    return [{"service": key[0], "component": key[1], "serving": serving, "desired": desired,
             "text": f"{serving}/{desired}", "fraction": round(fraction, 4),
             "at": format_time(at), "end": "{}/{}".format(*final.get(key, (0, 0)))}
            for key, (fraction, serving, desired, at) in sorted(lowest.items())]


def not_updated(samples: list[Sample]) -> list[dict[str, Any]]:
    """Components that end the forecast with Instances off their newest revision
    (a stalled rollout, a partition, a failure)."""
    if not samples:
        return []
    last = samples[-1]
    out = []
    for key, (updated, ready) in sorted(last.updated.items()):
        desired = last.capacity.get(key, (0, 0))[1]
        if updated < desired:
            out.append({"service": key[0], "component": key[1], "updated": updated,
                        "desired": desired, "text": f"{updated}/{desired}", "ready": ready})
    return out


# Past this many Instance operations, the gantt draws one bar per batch.
MAX_BARS = 30


@dataclass(frozen=True)
class Bar:
    """One bar of the gantt: an Instance operation, or a batch of them started together."""

    service: str
    component: str
    label: str
    start: float
    end: float
    outcome: str


def batches(spans: list[Span]) -> list[Bar]:
    """Spans of one component started by the same pass, as one bar each."""
    groups: dict[tuple[str, str, float, str], list[Span]] = {}
    for span in spans:
        kind = span.label.split(" ", 2)[-1] if span.label.startswith("Instance ") else span.label
        groups.setdefault((span.service, span.component, span.start, kind), []).append(span)
    bars = []
    for (service, component, start, kind), members in groups.items():
        indices = sorted(m.index for m in members)
        who = (f"Instance {indices[0]}" if len(indices) == 1
               else f"{len(indices)} Instances ({_ranges(indices)})")
        outcome = next((o for o in ("failed", "running") if any(m.outcome == o for m in members)),
                       "done")
        bars.append(Bar(service, component, f"{who} {kind}", start,
                        max(m.end for m in members), outcome))
    return sorted(bars, key=lambda b: (b.service, b.component, b.start, b.label))


def _ranges(indices: list[int]) -> str:
    """``0-3, 6``."""
    out, first, last = [], indices[0], indices[0]
    for index in indices[1:] + [None]:
        if index is not None and index == last + 1:
            last = index
            continue
        out.append(str(first) if first == last else f"{first}-{last}")
        if index is not None:
            first = last = index
    return ", ".join(out)


def gantt_bars(spans: list[Span]) -> tuple[list[Bar], int]:
    """The gantt's bars, in the order drawn: an Instance operation each, a batch each
    past ``MAX_BARS``, a component's whole rollout each past that (the longest
    ``MAX_BARS`` of them); and how many rollouts were left out."""
    bars = [Bar(s.service, s.component, s.label, s.start, s.end, s.outcome) for s in spans]
    if len(bars) > MAX_BARS:
        bars = batches(spans)
    left_out = 0
    if len(bars) > MAX_BARS:
        bars = rollouts(spans)
        # The longest rollouts are the ones a reviewer needs to see.
        kept = sorted(bars, key=lambda b: (b.start - b.end, b.service, b.component))[:MAX_BARS]
        left_out = len(bars) - len(kept)
        bars = sorted(kept, key=lambda b: (b.service, b.component))
    return bars, left_out


def bar_times(bar: Bar, origin: float) -> tuple[int, int]:
    """(start, end) of a bar in whole seconds since ``origin``, at least a second long:
    what the chart draws and the plan's JSON says."""
    offset = max(0, round(bar.start - origin))
    return offset, offset + max(1, round(bar.end - bar.start))


def gantt(spans: list[Span], origin: float | None = None,
          pauses: list[Bar] | None = None) -> str | None:
    """A Mermaid gantt chart: a section per component, a bar per Instance operation (per
    batch past ``MAX_BARS``), on an axis of time since the rollout's start (``origin``,
    by default the first span's start), so that it reads as durations, not dates.

    Times are milliseconds (``dateFormat x``): with seconds (``X``) Mermaid 11 and 12
    draw a bar that starts past zero from zero (tests/preview/test_gantt_rendered.py renders
    the charts with the real Mermaid and measures each bar)."""
    if not spans:
        return None
    origin = min(s.start for s in spans) if origin is None else origin
    bars, left_out = _with_pauses(spans, pauses)
    longest = max(b.end for b in bars) - origin
    # Mermaid draws dates in the reader's time zone; a whole-hour offset leaves minutes and
    # seconds since the start unchanged, which is what the axis shows under an hour.
    axis = "%M:%S" if longest < 3600 else "%H:%M"
    # Room on the left for the longest section title (Mermaid's default fits 10
    # characters; a longer title runs into the bars).
    titles = [_mermaid_text(f"{b.service} {b.component}") for b in bars]
    padding = max(75, 8 * max(len(t) for t in titles))
    lines = [f"%%{{init: {{'gantt': {{'leftPadding': {padding}}}}}}}%%", "gantt",
             "    dateFormat x", f"    axisFormat {axis}", "    todayMarker off"]
    section = None
    for number, bar in enumerate(bars, start=1):
        title = f"{bar.service} {bar.component}"
        if title != section:
            lines.append(f"    section {_mermaid_text(title)}")
            section = title
        tags = {"failed": "crit, ", "running": "active, "}.get(bar.outcome, "")
        start, end = bar_times(bar, origin)
        lines.append(f"    {_mermaid_text(bar.label)} ({format_duration(end - start)}) "
                     f":{tags}op{number}, {start * 1000}, {end * 1000}")
    if left_out:
        lines.append(f"    section {left_out} shorter rollouts not drawn")
    return "\n".join(lines)


def _with_pauses(spans: list[Span], pauses: list[Bar] | None) -> tuple[list[Bar], int]:
    """The gantt's bars with each canary pause among its component's (pauses are few:
    they are always drawn)."""
    bars, left_out = gantt_bars(spans)
    if not pauses:
        return bars, left_out
    order = {(b.service, b.component): n for n, b in enumerate(bars)}
    merged = sorted([*bars, *pauses], key=lambda b: (
        order.get((b.service, b.component), len(order)), b.service, b.component, b.start))
    return merged, left_out


def gantt_json(spans: list[Span], origin: float,
               pauses: list[Bar] | None = None) -> list[dict[str, Any]]:
    """The gantt's bars as the plan's JSON gives them: ``op<N>`` as in the chart, and
    seconds since the rollout's start."""
    if not spans:
        return []
    out = []
    for number, bar in enumerate(_with_pauses(spans, pauses)[0], start=1):
        start, end = bar_times(bar, origin)
        out.append({"id": f"op{number}", "service": bar.service, "component": bar.component,
                    "label": bar.label, "start": start, "end": end, "outcome": bar.outcome})
    return out


def rollouts(spans: list[Span]) -> list[Bar]:
    """One bar per component: its whole rollout, with how many operations and batches."""
    groups: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        groups.setdefault((span.service, span.component), []).append(span)
    bars = []
    for (service, component), members in sorted(groups.items()):
        batches_ = len({m.start for m in members})
        outcome = next((o for o in ("failed", "running") if any(m.outcome == o for m in members)),
                       "done")
        label = (f"{len(members)} Instance operation{'' if len(members) == 1 else 's'} in "
                 f"{batches_} batch{'' if batches_ == 1 else 'es'}")
        bars.append(Bar(service, component, label, min(m.start for m in members),
                        max(m.end for m in members), outcome))
    return bars


def component_forecasts(spans: list[Span], lows: list[dict[str, Any]],
                        origin: float) -> dict[str, dict[str, Any]]:
    """Per component (``service component``): Instance operations, batches, when its
    rollout starts and ends relative to the forecast's start, and its lowest capacity."""
    out: dict[str, dict[str, Any]] = {}
    by_key: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        by_key.setdefault((span.service, span.component), []).append(span)
    low_by_key = {(low["service"], low["component"]): low for low in lows}
    for key, members in sorted(by_key.items()):
        first = min(m.start for m in members)
        last = max(m.end for m in members)
        out[f"{key[0]} {key[1]}"] = {
            "operations": len(members),
            "batches": len({m.start for m in members}),
            "failed": sum(1 for m in members if m.outcome == "failed"),
            "startsAfter": format_duration(first - origin) if first > origin else None,
            "seconds": round(last - first),
            "duration": format_duration(last - first),
            "lowest": low_by_key.get(key),
        }
    return out


def _mermaid_text(text: str) -> str:
    """Mermaid reads ``:`` as the start of a task's data and ``#``/``;`` specially."""
    return text.replace(":", " ").replace(";", " ").replace("#", " ")


def summarize(samples: list[Sample], stop: str, errors: list[str],
              initial: tuple[int, int], runs: int = 1,
              cadence: Cadence | None = None) -> dict[str, Any]:
    """The forecast as JSON; pure. ``initial`` is (pods, GPUs) before the first pass."""
    spans = operation_spans(samples)
    pauses = pause_bars(samples)
    lows = lowest_capacity(samples)
    start = samples[0].at if samples else 0.0
    end = samples[-1].at if samples else 0.0
    for low in lows:
        low["after"] = format_duration(max(0.0, parse_time(low["at"]) - start))
    peak = max([initial[0], *(s.pods for s in samples)])
    peak_gpus = max([initial[1], *(s.gpus for s in samples)])
    overall = min(lows, key=lambda c: (c["fraction"], c["service"], c["component"]),
                  default=None)
    return {
        "start": format_time(start) if samples else None,
        "end": format_time(end) if samples else None,
        "seconds": round(end - start),
        "duration": format_duration(end - start),
        "passes": len(samples),
        "runs": runs,
        "cadence": None if cadence is None else {
            "schedule": cadence.schedule, "periodSeconds": cadence.period,
            "jobSeconds": cadence.job_seconds, "text": cadence.describe()},
        "idle": stop == IDLE,
        "stopReason": stop,
        "peakPods": peak,
        "peakGpus": peak_gpus,
        # What the rollout needs beyond what runs before it: the surge's headroom.
        "extraPods": max(0, peak - initial[0]),
        "extraGpus": max(0, peak_gpus - initial[1]),
        "lowestCapacity": lows,
        "lowest": overall,
        "failedOperations": sum(1 for span in spans if span.outcome == "failed"),
        "notUpdated": not_updated(samples),
        "spans": [span.to_dict() for span in spans],
        "components": component_forecasts(spans, lows, start),
        "mermaid": gantt(spans, start, pauses),
        "bars": gantt_json(spans, start, pauses),
        "errors": errors,
    }


def forecast(cluster: Cluster, items: list[ServiceComponent],
             max_seconds: float = DEFAULT_BUDGET_SECONDS,
             cadence: Cadence | None = None) -> dict[str, Any]:
    """Run the rollout on ``cluster`` (a throw-away copy: this writes to it) and summarize.

    With a ``cadence``, as the scheduled job runs it: ``--until-idle`` for at most
    ``cadence.job_seconds``, then nothing until the next schedule tick, while the
    cluster goes on (pods start, windows pass), then the next run; ``max_seconds`` of
    simulated time in all."""
    samples: list[Sample] = []
    errors: list[str] = []
    initial = usage(cluster.list_pods(MANAGED))

    def record(result: PassResult) -> None:
        errors.extend(result.errors)
        samples.append(sample_pass(result, *usage(cluster.list_pods(MANAGED))))

    first = run_start = cluster.now().timestamp()
    deadline = first + max_seconds
    runs = 0
    while True:
        runs += 1
        budget = deadline - run_start
        if cadence is not None:
            budget = min(budget, cadence.job_seconds)
        stop = run_until_idle(cluster, items, budget, record)
        if cadence is None or stop != BUDGET_SPENT:
            break
        # The run waited out its budget and exited; the next starts at the next tick.
        run_start = cadence.next_start(first, run_start + cadence.job_seconds)
        if run_start >= deadline:
            break
        cluster.advance(max(0.0, run_start - cluster.now().timestamp()))
    return summarize(samples, stop, errors, initial, runs, cadence)


def assumptions(outlook: dict[str, Any], pull_seconds: float) -> list[str]:
    """What the forecast takes for granted, said in the plan beside it; pure."""
    said = [
        (f"Durations are the simulated cluster's: an image pull takes {pull_seconds:.0f} s, a "
        "container is ready as soon as its readiness probe's initialDelaySeconds and "
        "periodSeconds allow, and a pod goes when its grace period ends. A real model "
        "server also loads its weights, often for minutes: add that to every batch."),
        ("Times are counted from the rollout's first write; the simulator's own clock is "
        "not the time it will happen."),
    ]
    cadence = outlook.get("cadence")
    if cadence:
        runs = outlook.get("runs") or 1
        said.append(f"The job runs as the shipped pipelines do, or as given: "
                    f"{cadence['text']}; this rollout takes {runs} run"
                    f"{'' if runs == 1 else 's'}, and the time between runs is counted.")
    said.append(
        "The cluster is a simulated one sized to hold the fleet at its peak, so room is "
        f"never short here: at its peak the rollout needs {outlook.get('extraPods', 0)} more "
        f"pod{'' if outlook.get('extraPods') == 1 else 's'} and "
        f"{outlook.get('extraGpus', 0)} more GPU{'' if outlook.get('extraGpus') == 1 else 's'} "
        "than run before it; check that your nodes have them.")
    return said
