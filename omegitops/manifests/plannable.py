"""What validation accepts, the planner can plan: values checked against their use.

The schemas check types and shapes. These check each value against what the
planner will do with it, once, at load, so that an object either fails here
with its file, line and field, or plans: a duration a Go duration can hold
(the manager's type), counts that are not negative and that a cluster could
run, pods that would have a container image, and labels the API server takes.
``tests/manifests/test_plannable.py`` holds the two to the same answers on generated
values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from omegitops.manifests.repository import INFERENCE_SERVICE, Manifest, ManifestError
from omegitops.model import podrules
from omegitops.model.durations import DurationError, parse_duration
from omegitops.render.names import first_refused_template_name
from omegitops.render.resolve import (
    GANG,
    HISTORY_ANNOTATION,
    RUNTIME_CONFIG,
    ComponentLifecycle,
    dig,
)
from omegitops.render.templates import (
    NOT_POD_SPEC,
    ome_pod_metadata,
    render_templates,
    revision_hash,
)
from omegitops.util.copying import Packed
from omegitops.util.goint import atoi

# Kubernetes' documented scalability limit ("no more than 150,000 total pods"): a
# component needing more could never run, and planning its Instances one by one
# would take hours on every pass.
MAX_CLUSTER_PODS = 150_000
DURATION_FIELDS = ("instanceReadyTimeout",)
COUNT_FIELDS = (("minReplicas",), ("maxReplicas",), ("worker", "size"))

FieldPath = tuple[str | int, ...]


def component_blocks(manifest: Manifest) -> Iterable[tuple[str, FieldPath, dict]]:
    """(component, path, block) of each component spec (a service's ``spec.engine``)
    or runtime component config (``spec.engineConfig``) the object has."""
    service = manifest.id.kind == INFERENCE_SERVICE
    for component, config in RUNTIME_CONFIG.items():
        path = ("spec", component if service else config)
        block = dig(manifest.data, path)
        if isinstance(block, dict):
            yield component, path, block


def lifecycle_blocks(manifest: Manifest) -> Iterable[tuple[FieldPath, dict]]:
    for _, path, block in component_blocks(manifest):
        lifecycle = block.get("lifecycle")
        if isinstance(lifecycle, dict):
            yield path + ("lifecycle",), lifecycle


def value_errors(manifest: Manifest) -> list[ManifestError]:
    """The values of one object that no plan could use, each at its own line."""
    errors = []
    for path, block in lifecycle_blocks(manifest):
        for key in DURATION_FIELDS:
            value = block.get(key)
            if isinstance(value, str):
                try:
                    parse_duration(value)
                except DurationError as err:
                    errors.append(manifest.error(path + (key,), str(err)))
    for _, path, block in component_blocks(manifest):
        for sub in COUNT_FIELDS:
            value = dig(block, sub)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                errors.append(manifest.error(path + sub, f"{value} is less than the minimum "
                                                         "of 0"))
    errors.extend(_history_errors(manifest))
    return errors


def _history_errors(manifest: Manifest) -> list[ManifestError]:
    """The revision-history annotation is a string: it must hold a whole number >= 0."""
    path = ("metadata", "annotations", HISTORY_ANNOTATION)
    value = dig(manifest.data, path)
    if value is None or manifest.id.kind != INFERENCE_SERVICE:
        return []
    # Read as OME reads it, with Go's strconv.Atoi: no spaces, ASCII digits (not "٣"),
    # within 64 bits.
    number = atoi(value) if isinstance(value, str) else None
    if number is not None and number >= 0:
        return []
    shown = value if len(str(value)) <= 40 else f"{str(value)[:37]}..."
    return [manifest.error(path, f"{shown!r} is not a whole number of revisions (>= 0)")]


class Rendered(NamedTuple):
    """A component's pod templates as validation rendered them, packed and hashed once."""

    # Shared by every service of the same shape: read, never changed.
    templates: dict[str, dict]
    packed: Packed
    revision_hash: str


# What ``render_templates`` reads of a component's block besides its pod fields, its
# runners, labels and annotations: nothing. Counts and lifecycles vary from service to
# service; left out of a shape's key, services that differ only there share it.
_NOT_RENDERED = NOT_POD_SPEC - {"runner", "leader", "worker", "labels", "annotations"}


def shape_key(service: Manifest, runtime: Manifest | None,
              lifecycle: ComponentLifecycle) -> tuple | None:
    """Everything ``render_templates`` reads for this component: the runtime (the same
    object for every service of a run), the service's labels, annotations and component
    block but for what is not rendered, and the lifecycle's shape. None when the block
    is not plain JSON (it is then rendered apart)."""
    meta = service.data.get("metadata") or {}
    block = dig(service.data, ("spec", lifecycle.component))
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k not in _NOT_RENDERED}
    try:
        read = json.dumps([meta.get("labels"), meta.get("annotations"), block],
                          sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return (id(runtime), lifecycle.component, lifecycle.shape, lifecycle.worker_size, read)


def component_errors(service: Manifest, runtime: Manifest | None,
                     lifecycle: ComponentLifecycle,
                     rendered: dict | None = None,
                     shapes: dict[tuple, Rendered] | None = None) -> list[ManifestError]:
    """Checks of one OMENative component on its effective values (service over runtime).

    The counts come first: the names and templates checked after them are rendered
    per worker, which a worker count of a billion would make endless. The templates
    rendered go into ``rendered["templates"]`` (a ``Rendered``) when it is given, so
    that planning need not render them again. ``shapes`` holds the templates of each
    shape (``shape_key``) whose checks passed: a service of a shape seen before takes
    them, and only the checks of its own names are made again.
    """
    errors = _count_errors(service, runtime, lifecycle)
    if errors:
        return errors
    key = shape_key(service, runtime, lifecycle) if shapes is not None else None
    known = shapes.get(key) if shapes is not None and key is not None else None
    if known is not None:
        if rendered is not None:
            rendered["templates"] = known
        # The templates' names passed with the shape; OME's labels name the service.
        return _label_errors(service, lifecycle, {}, runtime)
    templates = render_templates(service.data, runtime.data if runtime else None, lifecycle)
    errors = _template_errors(service, runtime, lifecycle, templates)
    if errors:
        return errors
    done = Rendered(templates, Packed(templates), revision_hash(templates))
    if rendered is not None:
        rendered["templates"] = done
    if shapes is not None and key is not None:
        shapes[key] = done
    return errors


def _template_errors(service: Manifest, runtime: Manifest | None,
                     lifecycle: ComponentLifecycle,
                     templates: dict[str, dict]) -> list[ManifestError]:
    return _container_errors(service, runtime, lifecycle, templates) + \
        _pod_field_errors(service, runtime, lifecycle, templates) + \
        _duplicate_errors(service, runtime, lifecycle, templates) + \
        _volume_errors(service, runtime, lifecycle, templates) + \
        _label_errors(service, lifecycle, templates, runtime)


def _effective(service: Manifest, runtime: Manifest | None, component: str,
               sub: FieldPath) -> tuple[Any, FieldPath | None]:
    """A count's value and, when the service sets it, its path in the service."""
    own = ("spec", component, *sub)
    if dig(service.data, own) is not None:
        return dig(service.data, own), own
    return dig(runtime.data if runtime else None, ("spec", RUNTIME_CONFIG[component], *sub)), None


def _count_errors(service: Manifest, runtime: Manifest | None,
                  lifecycle: ComponentLifecycle) -> list[ManifestError]:
    component = lifecycle.component
    low, low_path = _effective(service, runtime, component, ("minReplicas",))
    high, high_path = _effective(service, runtime, component, ("maxReplicas",))
    if isinstance(low, int) and isinstance(high, int) and low > high:
        where = low_path or high_path or ("spec", "runtime", "name")
        return [service.error(where, (
            f"{low} is more than maxReplicas {high}{_from(runtime, low_path)}: "
            "the component could never run its minimum"))]
    pods = 1 + lifecycle.worker_size if lifecycle.shape == GANG else 1
    # At least one Instance: at zero replicas the names and templates are still built
    # for one (a billion workers made validation run out of memory), and the component
    # could never be scaled up.
    instances = max(lifecycle.replicas, 1)
    if instances * pods > MAX_CLUSTER_PODS:
        # Point at the factor that is out of reach by itself: a worker count, or the replicas.
        _, size_path = _effective(service, runtime, component, ("worker", "size"))
        where = (size_path if pods > MAX_CLUSTER_PODS else low_path) or \
            ("spec", component, "worker" if pods > MAX_CLUSTER_PODS else "minReplicas")
        count = "1 Instance" if instances == 1 else f"{instances} Instances"
        shape = f"of {pods} pods" if pods > 1 else "of one pod"
        verb = "needs" if instances == 1 else "need"
        return [service.error(where, (
            f"{count} {shape} {verb} {instances * pods} pods, more than a Kubernetes "
            f"cluster can run (at most {MAX_CLUSTER_PODS} pods)"))]
    return []


def _container_errors(service: Manifest, runtime: Manifest | None,
                      lifecycle: ComponentLifecycle,
                      templates: dict[str, dict]) -> list[ManifestError]:
    """Pods the API server would refuse on every pass: no container, or no image."""
    component = lifecycle.component
    for runner, template in templates.items():
        spec = template["spec"]
        if not spec.get("containers"):
            return [service.error(("spec", component), (
                f"component {component}'s {runner} pods would have no container: set a "
                f"runner {_where(component, runner, runtime)}"))]
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or []:
                if not isinstance(container, dict) or not container.get("image"):
                    name = container.get("name") if isinstance(container, dict) else None
                    return [service.error(("spec", component), (
                        f"component {component}'s {runner} pods would have a container "
                        f"{name or '(unnamed)'} with no image: set its image "
                        f"{_where(component, runner, runtime)}"))]
    return []


# Resources the API server lets a container overcommit (requests below limits); any
# other, an extended resource such as nvidia.com/gpu, needs requests equal to limits,
# in whole units (core/v1 validation).
def _pod_field_errors(service: Manifest, runtime: Manifest | None,
                      lifecycle: ComponentLifecycle,
                      templates: dict[str, dict]) -> list[ManifestError]:
    """Fields of a rendered pod the API server refuses on every pass, with its words
    (``model/podrules.py``)."""
    component = lifecycle.component
    for runner, template in templates.items():
        found = podrules.field_problem(template["spec"], template["metadata"])
        if found:
            what, rule, field = found
            # The field and where to fix it first: a message is shown up to 300
            # characters, and the API server's rule can be long.
            return [service.error(("spec", component), (
                f"component {component}'s {_pods(runner)} would have {what}, and the API "
                f"server refuses them; fix {field} "
                f"{_volumes_where(component, runner, runtime)}: {rule}"))]
    return []


def _duplicate_errors(service: Manifest, runtime: Manifest | None,
                      lifecycle: ComponentLifecycle,
                      templates: dict[str, dict]) -> list[ManifestError]:
    """What the API server refuses as a ``Duplicate value`` in a pod, on every pass."""
    component = lifecycle.component
    for runner, template in templates.items():
        found = podrules.duplicate_problem(template["spec"])
        if found:
            what, _, field = found
            return [service.error(("spec", component), (
                f"component {component}'s {_pods(runner)} would have {what}, and the API "
                f"server refuses them (Duplicate value): keep one in {field} "
                f"{_volumes_where(component, runner, runtime)}"))]
    return []


def _pods(runner: str) -> str:
    return "pods" if runner == "default" else f"{runner} pods"


def _volume_errors(service: Manifest, runtime: Manifest | None,
                   lifecycle: ComponentLifecycle,
                   templates: dict[str, dict]) -> list[ManifestError]:
    """A container that mounts a volume its pod does not define: the API server refuses
    the pod (``volumeMounts[0].name: Not found``) on every pass. The catalogue's own
    deepseek-rdma runtime does this: its leader mounts the volumes only its worker
    declares."""
    component = lifecycle.component
    for runner, template in templates.items():
        spec = template["spec"]
        defined = {volume.get("name") for volume in spec.get("volumes") or []
                   if isinstance(volume, dict)}
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                if not isinstance(container, dict):
                    continue
                for mount in container.get("volumeMounts") or []:
                    name = mount.get("name") if isinstance(mount, dict) else None
                    if name in defined:
                        continue
                    pods = "pods" if runner == "default" else f"{runner} pods"
                    return [service.error(("spec", component), (
                        f"component {component}'s {pods} would mount volume {name!r} in "
                        f"container {container.get('name') or '(unnamed)'} but define no "
                        f"such volume, and the API server refuses them: add it to volumes "
                        f"{_volumes_where(component, runner, runtime)}"))]
    return []


def _label_errors(service: Manifest, lifecycle: ComponentLifecycle,
                  templates: dict[str, dict],
                  runtime: Manifest | None = None) -> list[ManifestError]:
    """Label keys and values, annotation keys and container names the API server
    would refuse, with the rules of ``render/names.py``; OME's own labels too (the
    model's name is one)."""
    component = lifecycle.component
    ome = ome_pod_metadata(service.data, runtime.data if runtime else None, component)
    name = first_refused_template_name({**templates, "every": {"metadata": ome, "spec": {}}})
    if name is not None:
        shown = name.value if len(name.value) <= 70 else f"{name.value[:67]}..."
        length = f" is at most {name.rule.limit} characters and" if name.too_long else ""
        return [service.error(("spec", component), (
            f"component {component}'s {name.what} {shown!r} would be refused by the API "
            f"server: {name.rule.title}{length} {name.rule.form}"))]
    return []


def _where(component: str, runner: str, runtime: Manifest | None) -> str:
    """Where a runner's container is set: the service's component, or its runtime's."""
    part = ".runner" if runner == "default" else f".{runner}.runner (or runner)"
    return _in_service_or_runtime(component, part, runtime)


def _volumes_where(component: str, runner: str, runtime: Manifest | None) -> str:
    """Where a runner's pod volumes are set: the service's component, or its runtime's."""
    return _in_service_or_runtime(component, "" if runner == "default" else f".{runner}",
                                  runtime)


def _in_service_or_runtime(component: str, part: str, runtime: Manifest | None) -> str:
    here = f"in spec.{component}{part}"
    if runtime is None:
        return here
    return f"{here}, or in {runtime.id} at spec.{RUNTIME_CONFIG[component]}{part}"


def _from(runtime: Manifest | None, own: FieldPath | None) -> str:
    return f" (from {runtime.id})" if runtime is not None and own is None else ""
