"""From a resolved component to what the planner aims at: templates and revision."""

from __future__ import annotations

from typing import Any

from omegitops.model.state import Json
from omegitops.render.component import DesiredComponent
from omegitops.render.operator import OperatorSettings
from omegitops.render.resolve import RUNTIME_CONFIG, ComponentLifecycle, dig, resolve_component
from omegitops.render.revisions import stored_runtime_config
from omegitops.render.templates import ome_pod_metadata, render_templates, revision_name


def build_desired(
    isvc: dict[str, Any],
    runtime: dict[str, Any] | None,
    lifecycle: ComponentLifecycle,
    revisions: list[Json],
    replica: Json | None,
    operator: OperatorSettings | None = None,
    templates: dict[str, Json] | None = None,
    templates_hash: str | None = None,
) -> DesiredComponent:
    """Render the component's templates; pure.

    A service that pins its runtime (``spec.runtime.autoSync: false``) is
    rendered from the runtime config stored with the revision it runs, so a
    runtime edit leaves its pods alone and only sets RuntimeDrifted. Its
    lifecycle is resolved again from that config too (given the operator
    settings): min-ready-seconds.txt, a pinned service "gets the change once you
    move the pin", the runtime's lifecycle as well as its templates.

    ``templates``, when given, are the ones rendered from the live runtime (by
    validation); they stand unless a pinned runtime has drifted, and so does their
    revision hash ``templates_hash`` (computed with them) when given.
    """
    component = lifecycle.component
    key = RUNTIME_CONFIG[component]
    live_config = dig(runtime, ("spec", key)) or {}
    pinned = dig(isvc, ("spec", "runtime", "autoSync")) is False
    config, drifted = live_config, False
    current = dig(replica, ("spec", "revision"))
    if pinned and current:
        stored = stored_runtime_config(revisions, current)
        if stored is not None:
            config, drifted = stored, stored != live_config
    source = dict(runtime) if runtime else {"spec": {}}
    source["spec"] = {**source.get("spec", {}), key: config}
    if drifted and operator is not None:
        lifecycle = resolve_component(isvc, source, component, operator)
    # Shallow copies only: render_templates never changes its inputs (it merges into new
    # dicts and copies leaves), and a deep copy of the whole runtime per component was
    # over a third of a pass's planning time on a 1,000-service fleet.
    if templates is None or drifted:
        templates, templates_hash = render_templates(isvc, source, lifecycle), None
    meta = isvc.get("metadata") or {}
    name = meta["name"]
    return DesiredComponent(
        namespace=meta.get("namespace") or "default",
        isvc=name,
        component=component,
        lifecycle=lifecycle,
        templates=templates,
        revision=revision_name(name, component, templates, templates_hash),
        # Shared with the loaded manifest, read-only: revision_object copies it when a
        # revision is stored (once per template change, not on every pass).
        runtime_config=config,
        pinned=pinned,
        drifted=drifted,
        pod_metadata=ome_pod_metadata(isvc, runtime, component),
    )
