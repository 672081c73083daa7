"""Validation: JSON Schemas per object, then the checks that span objects.

The result keeps valid and invalid apart: an invalid object is never acted
on, and it never stops the valid ones.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegitops.capacity import sizing
from omegitops.capacity.scheduler import pod_requests
from omegitops.manifests import findings
from omegitops.manifests.findings import Resolution
from omegitops.manifests.memo import LoadMemo, content_key
from omegitops.manifests.plannable import (
    Rendered,
    component_errors,
    lifecycle_blocks,
    value_errors,
)
from omegitops.manifests.repository import (
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    SERVING_RUNTIME,
    Manifest,
    ManifestError,
    Repository,
)
from omegitops.manifests.schemas import is_valid, validator
from omegitops.model import budgets
from omegitops.model.ids import ResourceId
from omegitops.render.names import derived_names, derived_names_fit, longest_fitting
from omegitops.render.operator import OperatorSettings
from omegitops.render.resolve import (
    GANG,
    OMENATIVE,
    SURGE_THEN_DRAIN,
    ComponentLifecycle,
    Resolutions,
    components_of,
    dig,
    resolve_component,
    resolve_mode,
)
from omegitops.render.templates import LEADER, WORKER

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

log = logging.getLogger(__name__)

MAX_ERRORS_PER_OBJECT = 20
BUDGET_FIELDS = ("maxSurge", "maxUnavailable")


@dataclass
class Catalog:
    """The valid objects of a repository, with runtime look-up as OME does it."""

    services: list[Manifest] = field(default_factory=list)
    runtimes: dict[ResourceId, Manifest] = field(default_factory=dict)

    def runtime_for(self, service: Manifest) -> Manifest | None:
        """A service's runtime: a ServingRuntime in its namespace first, then a
        ClusterServingRuntime, unless ``spec.runtime.kind`` names one of them."""
        return _find_runtime(self.runtimes, service)


@dataclass
class ValidationResult:
    catalog: Catalog
    valid: list[Manifest]
    errors: list[ManifestError]
    warnings: list[ManifestError] = field(default_factory=list)
    # What validation resolved and rendered for each OMENative component of a valid
    # service, by (service id, component): planning uses it instead of doing it again.
    resolved: dict[tuple[ResourceId, str], Resolution] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def _find_runtime(runtimes: dict[ResourceId, Any], service: Manifest) -> Any:
    ref = dig(service.data, ("spec", "runtime")) or {}
    name = ref.get("name") if isinstance(ref, dict) else None
    if not name:
        return None
    kind = ref.get("kind")
    candidates = []
    if kind in (None, SERVING_RUNTIME):
        candidates.append(ResourceId(SERVING_RUNTIME, service.id.namespace, name))
    if kind in (None, CLUSTER_SERVING_RUNTIME):
        candidates.append(ResourceId(CLUSTER_SERVING_RUNTIME, "", name))
    for rid in candidates:
        if rid in runtimes:
            return runtimes[rid]
    return None


def schema_errors(manifest: Manifest) -> list[ManifestError]:
    """Every schema error of one object, each located at its field's line."""
    if is_valid(manifest.id.kind)(manifest.data):
        return []
    found = sorted(
        validator(manifest.id.kind).iter_errors(manifest.data),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    errors = [_schema_error(manifest, err) for err in found[:MAX_ERRORS_PER_OBJECT]]
    if len(found) > MAX_ERRORS_PER_OBJECT:
        errors.append(manifest.error((), f"... and {len(found) - MAX_ERRORS_PER_OBJECT} more"))
    return errors


def _schema_error(manifest: Manifest, err: ValidationError) -> ManifestError:
    path = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted((err.schema.get("properties") or {}).keys())
        extras = [k for k in err.instance if k not in allowed]
        if extras:
            field_path = path + (extras[0],)
            hint = f"; expected one of: {', '.join(allowed)}" if 0 < len(allowed) <= 12 else ""
            return manifest.error(field_path, f"unknown field{hint}")
    message = err.message
    shown = repr(err.instance)
    if len(shown) > 80 and shown in message:
        # jsonschema quotes the value whole; a hostile one would drown the message.
        message = message.replace(shown, shown[:60] + "...", 1)
    if err.context:
        hints = list(dict.fromkeys(sub.message for sub in err.context))[:3]
        message = f"{message} ({'; '.join(hints)})"
    if len(message) > 300:
        message = message[:297] + "..."
    return manifest.error(path, message)


def percentage_errors(manifest: Manifest) -> list[ManifestError]:
    """Budgets and canary steps over 100% (the schema accepts any ``N%``), and a
    percentage whose number no 64-bit integer holds (Kubernetes' ``strconv.Atoi``
    refuses it)."""
    found: list[tuple[tuple[str | int, ...], object]] = []
    for path, block in lifecycle_blocks(manifest):
        for key in BUDGET_FIELDS:
            where = ("updateStrategy", "rollingUpdate", key)
            found.append((path + where, dig(block, where)))
    steps = dig(manifest.data, CANARY_STEPS)
    if isinstance(steps, list):
        # A step lets at most every Instance onto the new revision.
        found.extend((CANARY_STEPS + (number, "replicas"), step.get("replicas"))
                     for number, step in enumerate(steps) if isinstance(step, dict))
    errors = []
    for field_path, value in found:
        error = _percentage_error(manifest, field_path, value)
        if error is not None:
            errors.append(error)
    return errors


CANARY_STEPS: tuple[str | int, ...] = ("spec", "rollout", "canary", "steps")


def _percentage_error(manifest: Manifest, field_path: tuple[str | int, ...],
                      value: object) -> ManifestError | None:
    if isinstance(value, str) and re.fullmatch(r"[0-9]+%", value):
        try:
            budgets.parse_int_or_percent(value)
        except budgets.BudgetError:
            shown = value if len(value) <= 40 else f"{value[:37]}..."
            return manifest.error(field_path, (
                f"{shown!r} is not a percentage: its number is larger than a "
                "64-bit integer"))
    if isinstance(value, int | str) and budgets.is_over_100_percent(value):
        return manifest.error(field_path, f"{value} is more than 100%")
    return None


def service_errors(
    service: Manifest, runtime: Manifest | None, runtimes: dict, operator: OperatorSettings,
    warnings: list[ManifestError] | None = None,
    resolved: dict[tuple[ResourceId, str], Resolution] | None = None,
    shapes: dict[tuple, Rendered] | None = None,
    lifecycles: Resolutions | None = None,
) -> list[ManifestError]:
    """Checks that need the service's runtime and the operator settings; what a valid
    OMENative component may do but will regret goes into ``warnings``, from the same
    resolution, and each component's resolution and templates into ``resolved``.
    ``shapes`` is ``component_errors``': the templates each shape rendered, shared;
    ``lifecycles`` is ``resolve_component``'s memo, the resolutions shared."""
    ref_path = ("spec", "runtime", "name")
    name = dig(service.data, ref_path)
    errors = []
    if name and runtime is None:
        if _find_runtime(runtimes, service) is not None:
            message = f"runtime {name!r} is invalid (see its errors)"
        else:
            message = _not_found(service, name, runtimes)
        errors.append(service.error(ref_path, message))
        return errors
    if runtime is not None and dig(runtime.data, ("spec", "disabled")) is True:
        # OME refuses a disabled runtime with these words.
        errors.append(service.error(ref_path, f"specified runtime {name} is disabled "
                                              f"({runtime.path}: spec.disabled: true)"))
        return errors
    runtime_data = runtime.data if runtime else None
    errors.extend(group_errors(service, runtime_data, operator))
    for component in components_of(service.data, runtime_data):
        mode = resolve_mode(service.data, runtime_data, component, operator)
        if mode.value != OMENATIVE:
            continue
        if not name:
            errors.append(service.error(
                ("spec", "runtime"),
                f"component {component} runs on OMENative but the service names no runtime "
                "(set spec.runtime.name)",
            ))
            return errors
        lifecycle = resolve_component(service.data, runtime_data, component, operator,
                                      lifecycles)
        rendered: dict = {}
        planned = component_errors(service, runtime, lifecycle, rendered, shapes)
        if planned:
            # Names and budgets read the counts these refused (a billion workers).
            errors.extend(planned)
            continue
        done: Rendered = rendered["templates"]
        if resolved is not None:
            resolved[(service.id, component)] = Resolution(lifecycle, done.packed,
                                                           done.revision_hash)
        errors.extend(_derived_name_errors(service, lifecycle))
        if warnings is not None:
            warnings.extend(_stuck_budget_warnings(service, lifecycle))
            warnings.extend(_image_warnings(service, lifecycle, done.templates))
            warnings.extend(_gang_fit_warnings(service, lifecycle, done.templates))
    return errors


GROUPS: tuple[str | int, ...] = ("spec", "rollout", "groups")


def group_errors(service: Manifest, runtime: dict[str, Any] | None,
                 operator: OperatorSettings) -> list[ManifestError]:
    """Rollout groups whose members cannot move as one: a component in two groups, one
    the service does not run, one not on OMENative (nothing of omegitops moves it), and a
    canary that moves only some members of a group (docs/behaviour.md "Rollout groups")."""
    groups = dig(service.data, GROUPS)
    if not isinstance(groups, list):
        return []
    runs = components_of(service.data, runtime)
    canary = dig(service.data, ("spec", "rollout", "canary"))
    canaried = canary.get("components") if isinstance(canary, dict) else None
    first: dict[str, str] = {}
    errors = []
    for number, group in enumerate(groups):
        if not isinstance(group, dict):
            continue
        name = group.get("name")
        members = group.get("components") or []
        for place, member in enumerate(members):
            where = (*GROUPS, number, "components", place)
            if member in first:
                errors.append(service.error(where, (
                    f"{member} is in rollout group {first[member]} already: a component "
                    "moves in one group")))
                continue
            first[member] = str(name)
            if member not in runs:
                errors.append(service.error(where, (
                    f"{member} is not a component of the service (it runs "
                    f"{', '.join(runs) or 'none'})")))
            elif resolve_mode(service.data, runtime, member, operator).value != OMENATIVE:
                errors.append(service.error(where, (
                    f"{member} does not run on OMENative: omegitops moves only OMENative "
                    "components, so it cannot move in a group")))
            elif group.get("strategy") == "blueGreen":
                errors.extend(_blue_green_member_errors(
                    service, where, resolve_component(service.data, runtime, member,
                                                      operator)))
        if group.get("strategy") == "blueGreen":
            errors.extend(_blue_green_errors(service, number, group, canary, canaried))
        if isinstance(canaried, list):
            partly = [m for m in members if m in canaried]
            if partly and len(partly) < len(members):
                errors.append(service.error((*GROUPS, number, "components"), (
                    f"the canary (spec.rollout.canary.components) moves "
                    f"{', '.join(partly)} but not the rest of rollout group {name}: "
                    "a group's members take the canary's steps together")))
    return errors


def _blue_green_errors(service: Manifest, number: int, group: dict[str, Any],
                       canary: object, canaried: object) -> list[ManifestError]:
    """A blue-green group switches at once: no canary steps, no budget of its own."""
    errors = []
    members = group.get("components") or []
    if isinstance(canary, dict) and (not isinstance(canaried, list)
                                     or any(m in canaried for m in members)):
        errors.append(service.error((*GROUPS, number, "strategy"), (
            f"rollout group {group.get('name')} switches at once (blueGreen): a canary's "
            "steps cannot move it; leave its members out of spec.rollout.canary.components")))
    for key in BUDGET_FIELDS:
        if key in group:
            errors.append(service.error((*GROUPS, number, key), (
                f"a blueGreen group brings up every member's whole new set at once: "
                f"{key} has nothing to bound")))
    return errors


def _blue_green_member_errors(service: Manifest, where: tuple[str | int, ...],
                              lifecycle: ComponentLifecycle) -> list[ManifestError]:
    """A blue-green member surges each Instance beside its old one (a single pod's new
    pod, a gang's replacement Instance): under SurgeThenDrain."""
    member = lifecycle.component
    if lifecycle.settings.strategy != SURGE_THEN_DRAIN:
        return [service.error(where, (
            f"{member} updates by {lifecycle.settings.strategy}: a blueGreen group "
            f"brings its new set up beside the old, which takes SurgeThenDrain"))]
    return []


def _not_found(service: Manifest, name: str, runtimes: dict) -> str:
    """Why no runtime answers ``spec.runtime``, as its ``kind`` asks for one."""
    kind = dig(service.data, ("spec", "runtime", "kind"))
    namespaced = ResourceId(SERVING_RUNTIME, service.id.namespace, name)
    cluster = ResourceId(CLUSTER_SERVING_RUNTIME, "", name)
    if kind == SERVING_RUNTIME:
        hint = (f"; a ClusterServingRuntime {name} exists: set spec.runtime.kind to "
                f"{CLUSTER_SERVING_RUNTIME}" if cluster in runtimes else "")
        return (f"runtime {name!r} not found: no ServingRuntime {service.id.namespace}/{name} "
                f"(spec.runtime.kind: {kind}){hint}")
    if kind == CLUSTER_SERVING_RUNTIME:
        hint = (f"; a ServingRuntime {service.id.namespace}/{name} exists: set "
                f"spec.runtime.kind to {SERVING_RUNTIME}" if namespaced in runtimes else "")
        return (f"runtime {name!r} not found: no ClusterServingRuntime {name} "
                f"(spec.runtime.kind: {kind}){hint}")
    if kind is not None:
        return (f"spec.runtime.kind {kind!r} is neither {SERVING_RUNTIME} nor "
                f"{CLUSTER_SERVING_RUNTIME}")
    return (f"runtime {name!r} not found: no ServingRuntime {service.id.namespace}/{name} "
            f"and no ClusterServingRuntime {name}")


def _namespace_warnings(service: Manifest) -> list[ManifestError]:
    if (service.data.get("metadata") or {}).get("namespace"):
        return []
    return [service.error(("metadata",), (
        f"InferenceService {service.id.name} has no metadata.namespace: defaulted to "
        "default, where its InferenceReplicas and pods go"))]


def _derived_name_errors(service: Manifest, lifecycle: ComponentLifecycle) -> list[ManifestError]:
    """A name that fits an InferenceService but not the objects made from it (a gang's
    pod hostname, a Service name, the ``ome.io/revision`` label...), which the API
    server would refuse on every pass."""
    name, component = service.id.name, lifecycle.component
    if derived_names_fit(name, lifecycle):
        return []
    derived = derived_names(service.id.namespace, name, lifecycle)
    errors = []
    long = sorted((d for d in derived if d.too_long), key=lambda d: -d.excess)
    if long:
        worst, others = long[0], len(long) - 1
        more = f" ({others} more derived name{'s are' if others > 1 else ' is'} too)" \
            if others else ""
        fit = longest_fitting(service.id.namespace, lifecycle, len(name))
        errors.append(service.error(("metadata", "name"), (
            f"{len(name)} characters is too long for OMENative component {component}: its "
            f"{worst.what} {worst.value} would be {len(worst.value)} characters, over the "
            f"{worst.rule.limit} of {worst.rule.title}{more}; use a name of at most {fit} "
            "characters")))
    malformed = [d for d in derived if d.malformed]
    if malformed:
        bad = malformed[0]
        errors.append(service.error(("metadata", "name"), (
            f"OMENative component {component}'s {bad.what} {bad.value} would not be "
            f"{bad.rule.title}: it {bad.rule.form}")))
    return errors


# An image reference as the kubelet parses it (distribution's reference grammar): a
# domain, slash-separated lower-case path components, a tag, a digest.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?"
    rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")


def _image_warnings(service: Manifest, lifecycle: ComponentLifecycle,
                    templates: dict[str, dict]) -> list[ManifestError]:
    """An image the API server takes but the kubelet cannot pull by that name (a Helm
    placeholder left unrendered, ``{{ .Values.image }}``): every pod of it would sit in
    InvalidImageName. A warning: the API server takes the pod."""
    component = lifecycle.component
    for runner, template in templates.items():
        for container in template["spec"].get("containers") or []:
            image = container.get("image") if isinstance(container, dict) else None
            if isinstance(image, str) and image.strip() and not IMAGE_REFERENCE.match(image):
                return [service.error(("spec", component), (
                    f"component {component}'s {runner} pods name the image {image!r}, "
                    "which is no image reference: the kubelet would fail them as "
                    "InvalidImageName"))]
    return []


def _gang_fit_warnings(service: Manifest, lifecycle: ComponentLifecycle,
                       templates: dict[str, dict]) -> list[ManifestError]:
    """A pod, or one gang, that no cluster the plan sizes can hold (GangCannotFit): a pod
    asking more CPU or memory than a node offers (128 CPUs, 2 TiB), or a gang needing more
    nodes than a Kubernetes cluster has (5,000). A gang scheduler never starts it; without
    one, its pods take GPUs from every other service. A warning: the API server takes it."""
    component = lifecycle.component
    counts = {LEADER: 1, WORKER: lifecycle.worker_size} if lifecycle.shape == GANG else {}
    nodes = 0
    for runner, template in templates.items():
        requests = pod_requests(template)
        short = sizing.short_of(requests)
        if short:
            return [service.error(("spec", component), (
                f"GangCannotFit: component {component}'s {runner} pods ask for more "
                f"{' and '.join(short)} than a node holds (128 CPUs, 2 TiB of memory): no "
                "node of any cluster the plan sizes can run them"))]
        nodes += sizing.nodes_for(requests, counts.get(runner, 0))
    if nodes > sizing.MAX_CLUSTER_NODES:
        return [service.error(("spec", component, "worker", "size"), (
            f"GangCannotFit: one Instance of component {component} ({1 + lifecycle.worker_size} "
            f"pods) needs {nodes} nodes, more than a Kubernetes cluster has "
            f"({sizing.MAX_CLUSTER_NODES}): a gang scheduler never starts it, and without one "
            "its pods take GPUs from every other service"))]
    return []


def _stuck_budget_warnings(service: Manifest,
                           lifecycle: ComponentLifecycle) -> list[ManifestError]:
    """Budgets with which no Instance can move (BudgetsCannotMove)."""
    component = lifecycle.component
    surge = lifecycle.fields.get("updateStrategy.rollingUpdate.maxSurge")
    unavailable = lifecycle.fields["updateStrategy.rollingUpdate.maxUnavailable"]
    strategy = lifecycle.strategy
    where = ("spec", component, "lifecycle", "updateStrategy", "rollingUpdate")
    held = "every change holds at the Budget gate"
    if strategy == SURGE_THEN_DRAIN:
        if surge and budgets.is_zero(surge.value) and budgets.is_zero(unavailable.value):
            return [service.error(where, (
                f"BudgetsCannotMove: maxSurge {surge.value} (from {surge.source}) and "
                f"maxUnavailable {unavailable.value} (from {unavailable.source}) under "
                f"SurgeThenDrain: no Instance can move and {held}; allow at least one of them"
            ))]
    elif budgets.is_zero(unavailable.value):
        return [service.error(where + ("maxUnavailable",), (
            f"BudgetsCannotMove: maxUnavailable {unavailable.value} (from "
            f"{unavailable.source}) under {strategy}, which reads only maxUnavailable: no "
            f"serving Instance can move and {held}"
        ))]
    return []


def _is_managed(service: Manifest, runtime: Manifest | None, operator: OperatorSettings) -> bool:
    """Whether any component of ``service`` runs on OMENative."""
    data = runtime.data if runtime else None
    return any(
        resolve_mode(service.data, data, component, operator).value == OMENATIVE
        for component in components_of(service.data, data)
    )


# Other definitions a duplicate's message names: with 2,000 copies, naming every other
# one in each message made four million strings.
SHOWN_COPIES = 3


def _duplicate_message(copies: list[Manifest], copy: Manifest) -> str:
    others = [m for m in copies[:SHOWN_COPIES + 1] if m is not copy][:SHOWN_COPIES]
    shown = ", ".join(f"{m.path}:{m.line}" for m in others)
    more = len(copies) - 1 - len(others)
    return f"duplicate object, also defined at {shown}" + (f" and {more} more" if more else "")


def _own_errors(manifest: Manifest, memo: LoadMemo | None) -> list[ManifestError]:
    """A manifest's checks of its own: the schema, budgets over 100%, its values."""
    if memo is not None and memo.own_checks_passed(manifest.source):
        return []
    own = schema_errors(manifest) or percentage_errors(manifest) or value_errors(manifest)
    if not own and memo is not None:
        memo.remember_own_checks_passed(manifest.source)
    return own


def _service_errors(service: Manifest, runtime: Manifest | None, runtimes: dict,
                    operator: OperatorSettings, warnings: list[ManifestError],
                    resolved: dict, memo: LoadMemo | None, settings: str,
                    shapes: dict[tuple, Rendered] | None = None,
                    lifecycles: Resolutions | None = None,
                    ) -> tuple[list[ManifestError], bool]:
    """``service_errors`` and whether the service is managed, answered by the memo when
    the service, its runtime and the operator settings are as they were when it last
    passed."""
    key = _service_key(service, runtime, settings) if memo is not None else None
    known = _remembered(memo, key)
    if known is not None:
        regrets, found, managed = known
        warnings.extend(regrets)
        resolved.update(found)
        return [], managed
    problems = service_errors(service, runtime, runtimes, operator, warnings, resolved, shapes,
                              lifecycles)
    managed = not problems and _is_managed(service, runtime, operator)
    if not problems and memo is not None and key is not None:
        packed = findings.pack((warnings, resolved, managed))
        if packed is not None:
            memo.remember_service(key, packed)
    return problems, managed


def _remembered(memo: LoadMemo | None, key: str | None) -> findings.Finding | None:
    """What the memo found for the service's key; None when it has nothing, or
    something this code did not write (checked anew, then)."""
    raw = memo.service(key) if memo is not None and key is not None else None
    if raw is None:
        return None
    try:
        return findings.unpack(raw)
    except findings.NotAFinding as err:
        log.debug("load memo entry not read: %s", err)
        return None


def _service_key(service: Manifest, runtime: Manifest | None, settings: str) -> str | None:
    """What a service's checks read: the service and its runtime (each its file's
    content, its place there and the file's path, which errors name) and the operator
    settings (``settings``: their repr)."""
    if service.source is None or (runtime is not None and runtime.source is None):
        return None
    parts = (service.source, service.path, service.id,
             runtime.source if runtime else None, runtime.path if runtime else None,
             runtime.id if runtime else None, settings)
    return content_key(repr(parts).encode())


def validate_repository(repo: Repository, operator: OperatorSettings,
                        owns: Callable[[str], bool] | None = None,
                        memo: LoadMemo | None = None) -> ValidationResult:
    """Validate every manifest of ``repo``; pure apart from reading the schemas.

    Two definitions of one object are an error when omegitops would have to
    pick one to act on: an OMENative service, or a runtime such a service
    uses. Duplicates that nothing managed depends on (a catalogue of
    alternative samples, say) are reported as warnings.

    ``owns`` (a ``--shard``'s namespaces) leaves the services of other namespaces
    out: neither checked nor in the catalog; their own shard checks them.

    ``memo`` answers the checks of one object, or of a service with its runtime, that
    passed before on the same input (``memo.py``).
    """
    errors = list(repo.errors)
    warnings: list[ManifestError] = []
    copies: dict[ResourceId, list[Manifest]] = {}
    for manifest in repo.manifests:
        copies.setdefault(manifest.id, []).append(manifest)
    candidates: list[Manifest] = []
    for manifest in repo.manifests:
        if owns is not None and manifest.id.kind == INFERENCE_SERVICE \
                and not owns(manifest.id.namespace):
            continue
        own = _own_errors(manifest, memo)
        if own:
            errors.extend(own)
        elif copies[manifest.id][0] is manifest:
            candidates.append(manifest)
    runtimes = {m.id: m for m in candidates if m.id.kind != INFERENCE_SERVICE}
    all_runtimes = {ids[0].id: ids[0] for ids in copies.values()
                    if ids[0].id.kind != INFERENCE_SERVICE}
    catalog = Catalog(runtimes=runtimes)
    valid = []
    resolved: dict[tuple[ResourceId, str], Resolution] = {}
    ambiguous: set[ResourceId] = set()
    settings = repr(operator)  # what the memo's service keys read of the settings
    shapes: dict[tuple, Rendered] = {}  # each shape's templates, rendered once a run
    # Each lifecycle resolved once a run (keyed by its runtime's object, alive as long).
    lifecycles: Resolutions = {}
    for service in (m for m in candidates if m.id.kind == INFERENCE_SERVICE):
        runtime = catalog.runtime_for(service)
        regrets: list[ManifestError] = []
        found: dict[tuple[ResourceId, str], Resolution] = {}
        problems, managed = _service_errors(service, runtime, all_runtimes, operator,
                                            regrets, found, memo, settings, shapes,
                                            lifecycles)
        if len(copies[service.id]) > 1 and (managed or any(
                _is_managed(copy, catalog.runtime_for(copy), operator)
                for copy in copies[service.id][1:])):
            # Any copy that would be OMENative makes the choice matter: a Kustomize patch
            # file beside its service (no deploymentMode, read as RawDeployment) must not
            # stand for the service, or --prune would tear the running one down.
            ambiguous.add(service.id)
            continue
        if managed and runtime is not None and len(copies[runtime.id]) > 1:
            ambiguous.add(runtime.id)
            problems = [service.error(("spec", "runtime", "name"), (
                f"runtime {runtime.id.name!r} is defined more than once; "
                "omegitops cannot tell which one to use"))]
        if problems:
            errors.extend(problems)
        else:
            catalog.services.append(service)
            valid.append(service)
            resolved.update(found)
            if managed:
                # update-strategies.txt makes only an invalid operator default an error:
                # a zero budget in a service or runtime is legal, and holds at the Budget
                # gate.
                warnings.extend(_namespace_warnings(service) + regrets)
    for rid, defined in copies.items():
        if len(defined) < 2:
            continue
        target = errors if rid in ambiguous else warnings
        for copy in defined:
            target.append(copy.error((), _duplicate_message(defined, copy)))
    valid.extend(m for m in candidates if m.id.kind != INFERENCE_SERVICE)
    errors.sort(key=lambda e: (e.path, e.line or 0))
    warnings.sort(key=lambda e: (e.path, e.line or 0))
    return ValidationResult(catalog=catalog, valid=valid, errors=errors, warnings=warnings,
                            resolved=resolved)
