"""A paused rollout: who or what holds it, read from the desired and observed state.

update-strategies.txt "Pause and resume a rollout: stop rollout work and continue it
later"; min-ready-seconds.txt: "hold a rollout in progress ... and continue it with
resume". A rollout is paused in either of two places, and either one pauses it:

- in Git, by the component's ``lifecycle.paused: true`` (resolved with its source by
  render/resolve.py, so the service's own field wins over its runtime's), or by the
  service's ``spec.rollout.paused: true``, which pauses every component;
- on the cluster, by the InferenceReplica's ``ome.io/rollout-paused`` annotation that
  ``omegitops rollout pause`` writes (``{"by": ..., "since": ...}``) and ``resume``
  removes: an emergency stop that needs no commit.

While paused no Update operation opens; an operation already open goes on to its end,
and repairs, restarts and scaling go on (docs/behaviour.md "Pause and resume").
Pure: nothing here reads the clock or the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from omegitops.render.resolve import ComponentLifecycle

PAUSE_ANNOTATION = "ome.io/rollout-paused"
GIT, CLUSTER = "git", "cluster"


@dataclass(frozen=True)
class Pause:
    """One thing that pauses the rollout: where (``git`` or ``cluster``), who or what
    (``by``), and since when (the annotation's time; None for Git, whose pause dates
    from the pass that first saw it)."""

    where: str
    by: str
    since: str | None = None
    # The field that declares a Git pause.
    field: str | None = None


def annotation_value(by: str, since: str) -> str:
    """The annotation ``omegitops rollout pause`` writes."""
    return json.dumps({"by": by, "since": since}, sort_keys=True)


def cluster_pause(annotations: dict[str, Any] | None) -> Pause | None:
    """The pause the InferenceReplica's annotation records. One written by hand in
    another form still pauses: an emergency stop is never ignored for its spelling."""
    value = (annotations or {}).get(PAUSE_ANNOTATION)
    if value is None:
        return None
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return Pause(CLUSTER, f"annotation {PAUSE_ANNOTATION}={value!s}")
    since = parsed.get("since")
    return Pause(CLUSTER, str(parsed.get("by") or "unknown"),
                 since if isinstance(since, str) and since else None)


def git_pause(lifecycle: ComponentLifecycle, namespace: str, isvc: str,
              at: str | None = None) -> Pause | None:
    """The pause the repository declares: the field that set it, on which object, and
    ``at`` which file and line when the caller knows it."""
    if not lifecycle.settings.paused:
        return None
    found = lifecycle.fields.get("paused")
    path = ".".join(str(p) for p in found.path) if found and found.path else (
        f"spec.{lifecycle.component}.lifecycle.paused")
    owner = "the runtime of " if found and found.source == "runtime" else ""
    where = f" ({at})" if at else ""
    return Pause(GIT, f"Git: {path} of {owner}InferenceService {namespace}/{isvc}{where}",
                 field=path)


def pauses(lifecycle: ComponentLifecycle, namespace: str, isvc: str,
           annotations: dict[str, Any] | None, at: str | None = None) -> tuple[Pause, ...]:
    """Everything that pauses the component, the cluster's first (the one a person set
    last, and the one ``resume`` lifts); ``at``: where Git declares its pause."""
    found = (cluster_pause(annotations), git_pause(lifecycle, namespace, isvc, at))
    return tuple(pause for pause in found if pause is not None)


def described(found: tuple[Pause, ...]) -> str:
    """Who or what paused it, every one of them."""
    return "; ".join(pause.by for pause in found)


def how_to_resume(found: tuple[Pause, ...], isvc: str, namespace: str,
                  component: str) -> str:
    """What lifts each pause in force."""
    ways = []
    for pause in found:
        if pause.where == CLUSTER:
            ways.append(f"omegitops rollout resume {isvc} -c {component} -n {namespace}")
        else:
            ways.append(f"remove {pause.field} in Git")
    return " and ".join(ways)
