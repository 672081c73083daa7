"""Stored revisions: one ControllerRevision per distinct set of pod templates.

A revision keeps the templates and the runtime config they were rendered
from, so a service that pins its runtime can be rendered again from the
runtime it pinned. History is pruned to ``revisionHistoryLimit`` revisions
besides those in use (keep every one when nothing sets the limit), and a
revision in use is never pruned.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from omegitops.model.actions import Action, ApplyObject, DeleteObject
from omegitops.model.state import Json, Row
from omegitops.render.templates import LABEL_COMPONENT, LABEL_ISVC, MANAGED_BY, MANAGER
from omegitops.util.copying import Packed

KIND = "ControllerRevision"


def revision_object(desired: Any, number: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": KIND,
        "metadata": {
            "name": desired.revision,
            "namespace": desired.namespace,
            "labels": {LABEL_ISVC: desired.isvc, LABEL_COMPONENT: desired.component,
                       MANAGED_BY: MANAGER},
        },
        "revision": number,
        # desired.runtime_config is the loaded manifest's own data, shared: the stored
        # revision gets a copy of its own.
        "data": {"templates": desired.templates,
                 "runtimeConfig": copy.deepcopy(desired.runtime_config)},
    }


def pack_revision(revision: Json) -> Json:
    """A shallow copy of an observed ControllerRevision with its ``data`` packed.

    Each holds its component's templates and runtime config: 15 KB as Python
    objects, a fifth of what a pass observes. A pass reads them only for a revision
    Instances run that is not the desired one, or a pinned runtime's config."""
    data = revision.get("data")
    if data is None or isinstance(data, Packed):
        return revision
    return {**revision, "data": Packed(data)}


def revision_data(revision: Json) -> Json:
    """A revision's ``data``, packed or not; {} when it has none."""
    data = revision.get("data")
    if isinstance(data, Packed):
        data = data.unpack()
    return data if isinstance(data, dict) else {}


def stored_templates(revisions: Iterable[Json], name: str) -> Json | None:
    for revision in revisions:
        if revision["metadata"]["name"] == name:
            return revision_data(revision).get("templates")
    return None


def stored_runtime_config(revisions: Iterable[Json], name: str) -> Json | None:
    for revision in revisions:
        if revision["metadata"]["name"] == name:
            return revision_data(revision).get("runtimeConfig")
    return None


def plan_revisions(desired: Any, stored: list[Json], rows: Iterable[Row]) -> list[Action]:
    """Store the desired revision if it is new; prune what history allows."""
    actions: list[Action] = []
    names = {r["metadata"]["name"] for r in stored}
    numbers = [int(r.get("revision") or 0) for r in stored]
    if desired.revision not in names:
        actions.append(ApplyObject(revision_object(desired, max(numbers, default=0) + 1),
                                   exists=False))
    limit = desired.lifecycle.settings.revision_history_limit
    if limit is None:
        return actions
    in_use = {desired.revision} | {row.revision for row in rows}
    in_use |= {row.operation.target_revision for row in rows if row.operation is not None}
    history = sorted(
        (r for r in stored if r["metadata"]["name"] not in in_use),
        key=lambda r: int(r.get("revision") or 0),
        reverse=True,
    )
    for old in history[limit:]:
        actions.append(DeleteObject(KIND, desired.namespace, old["metadata"]["name"]))
    return actions
