"""What validation accepts, the planner can plan: values checked against their use.

The schemas check types and shapes. These check each value against what the
planner will do with it, once, at load, so that an object either fails here
with its file, line and field, or plans: a duration a Go duration can hold
(the manager's type), counts that are not negative and that a cluster could
run, pods that would have a container image, and labels the API server takes.
``tests/test_plannable.py`` holds the two to the same answers on generated
values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from omegitops.lifecycle.durations import DurationError, parse_duration
from omegitops.lifecycle.names import template_names
from omegitops.lifecycle.resolve import (
    GANG,
    HISTORY_ANNOTATION,
    RUNTIME_CONFIG,
    ComponentLifecycle,
    dig,
)
from omegitops.lifecycle.templates import ome_pod_metadata, render_templates
from omegitops.manifests.repository import INFERENCE_SERVICE, Manifest, ManifestError

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
    if isinstance(value, str) and value.strip().isdigit():
        return []
    shown = value if len(str(value)) <= 40 else f"{str(value)[:37]}..."
    return [manifest.error(path, f"{shown!r} is not a whole number of revisions (>= 0)")]


def component_errors(service: Manifest, runtime: Manifest | None,
                     lifecycle: ComponentLifecycle,
                     rendered: dict | None = None) -> list[ManifestError]:
    """Checks of one OMENative component on its effective values (service over runtime).

    The counts come first: the names and templates checked after them are rendered
    per worker, which a worker count of a billion would make endless. The templates
    rendered go into ``rendered["templates"]`` when it is given, so that planning need
    not render them again.
    """
    errors = _count_errors(service, runtime, lifecycle)
    if errors:
        return errors
    templates = render_templates(service.data, runtime.data if runtime else None, lifecycle)
    if rendered is not None:
        rendered["templates"] = templates
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
_OVERCOMMITTED = ("cpu", "memory", "ephemeral-storage", "hugepages-")
# All of a pod's annotations together (metadata validation).
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _overcommitted(resource: str) -> bool:
    return "/" not in resource and resource.startswith(_OVERCOMMITTED)


def _pod_field_errors(service: Manifest, runtime: Manifest | None,
                      lifecycle: ComponentLifecycle,
                      templates: dict[str, dict]) -> list[ManifestError]:
    """Fields of a rendered pod the API server refuses on every pass, with its words:
    quantities (negative, requests over limits, an extended resource's requests not
    equal to its limits or not whole), ports outside 1-65535, an image with surrounding
    spaces, an env name with '=', node selector labels it refuses, annotations over
    256 KiB."""
    component = lifecycle.component
    for runner, template in templates.items():
        spec = template["spec"]
        pods = "pods" if runner == "default" else f"{runner} pods"
        found = None
        for container in (c for key in ("initContainers", "containers")
                          for c in spec.get(key) or [] if isinstance(c, dict)):
            found = found or _container_field(container)
        found = found or _selector_field(spec.get("nodeSelector"))
        annotations = template["metadata"].get("annotations") or {}
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
        if not found and size > ANNOTATIONS_MAX_BYTES:
            limit = f"may not be more than {ANNOTATIONS_MAX_BYTES} bytes"
            found = (f"annotations of {size} bytes", limit, "annotations")
        if found:
            what, rule, field = found
            return [service.error(("spec", component), (
                f"component {component}'s {pods} would have {what}, and the API server "
                f"refuses them: {rule}; fix {field} "
                f"{_volumes_where(component, runner, runtime)}"))]
    return []


def _container_field(container: dict) -> tuple[str, str, str] | None:
    name = container.get("name") or "(unnamed)"
    image = container.get("image")
    if isinstance(image, str) and image != image.strip():
        return (f"image {image!r} in container {name}",
                "must not have leading or trailing whitespace", "the image")
    for env in container.get("env") or []:
        if isinstance(env, dict) and "=" in str(env.get("name", "")):
            return (f"env name {env.get('name')!r} in container {name}",
                    "a valid environment variable name must not contain '='", "env")
    for port in container.get("ports") or []:
        for key in ("containerPort", "hostPort"):
            value = port.get(key) if isinstance(port, dict) else None
            if value is not None and not (isinstance(value, int) and 1 <= value <= 65535):
                return (f"{key} {value!r} in container {name}",
                        "must be between 1 and 65535, inclusive", "ports")
    return _resource_field(container.get("resources") or {}, name)


def _resource_field(resources: dict, name: str) -> tuple[str, str, str] | None:
    from omegitops.cluster.quantities import parse_milli

    amounts: dict[str, dict[str, int]] = {}
    for kind in ("requests", "limits"):
        for resource, value in (resources.get(kind) or {}).items():
            try:
                milli = parse_milli(value)
            except (TypeError, ValueError):
                continue  # the schema's to refuse
            if milli < 0:
                return (f"{kind} {resource}: {value} in container {name}",
                        "must be greater than or equal to 0", "resources")
            amounts.setdefault(kind, {})[resource] = milli
    requests, limits = amounts.get("requests", {}), amounts.get("limits", {})
    for resource, milli in requests.items():
        limit = limits.get(resource)
        if _overcommitted(resource):
            if limit is not None and milli > limit:
                return (f"requests {resource} over its limit in container {name}",
                        f"must be less than or equal to {resource} limit", "resources")
            continue
        if limit is None or milli != limit:
            return (f"requests {resource} not equal to its limit in container {name}",
                    f"must be equal to {resource} limit (not overcommittable)", "resources")
    for resource, milli in {**requests, **limits}.items():
        if not _overcommitted(resource) and milli % 1000:
            return (f"a fractional {resource} in container {name}",
                    f"{resource} must be a whole number", "resources")
    return None


def _selector_field(selector: Any) -> tuple[str, str, str] | None:
    from omegitops.lifecycle.names import LABEL_KEY, LABEL_VALUE

    for key, value in (selector or {}).items() if isinstance(selector, dict) else ():
        for rule, text in ((LABEL_KEY, str(key)), (LABEL_VALUE, str(value))):
            if not rule.allows(text):
                shown = text if len(text) <= 70 else f"{text[:67]}..."
                return (f"node selector {rule.title} {shown!r}",
                        f"{rule.title} is at most {rule.limit} characters and {rule.form}",
                        "nodeSelector")
    return None


def _duplicates(items: Any, key: Any) -> list:
    """The values of ``key`` that more than one item of ``items`` has."""
    seen, twice = set(), []
    for item in items or []:
        value = key(item) if isinstance(item, dict) else None
        if value in (None, "") or value in seen:
            if value not in (None, "") and value not in twice:
                twice.append(value)
            continue
        seen.add(value)
    return twice


def _duplicate_errors(service: Manifest, runtime: Manifest | None,
                      lifecycle: ComponentLifecycle,
                      templates: dict[str, dict]) -> list[ManifestError]:
    """What the API server refuses as a ``Duplicate value`` in a pod, on every pass:
    two containers or two volumes of one name, two mounts at one path in a container,
    two ports of one name in a container, one host port taken twice."""
    component = lifecycle.component
    for runner, template in templates.items():
        spec = template["spec"]
        pods = "pods" if runner == "default" else f"{runner} pods"
        containers = [c for key in ("initContainers", "containers")
                      for c in spec.get(key) or [] if isinstance(c, dict)]
        found = [("container name", v, "containers")
                 for v in _duplicates(containers, lambda c: c.get("name"))]
        found += [("volume name", v, "volumes")
                  for v in _duplicates(spec.get("volumes"), lambda v: v.get("name"))]
        found += [("host port", f"{v[0]}/{v[1]}", "ports") for v in _duplicates(
            [p for c in containers for p in c.get("ports") or []],
            lambda p: (p.get("hostPort"), p.get("protocol") or "TCP") if p.get("hostPort")
            else None)]
        for container in containers:
            cname = container.get("name") or "(unnamed)"
            found += [(f"mount path in container {cname}", v, "volumeMounts") for v in
                      _duplicates(container.get("volumeMounts"), lambda m: m.get("mountPath"))]
            found += [(f"port name in container {cname}", v, "ports")
                      for v in _duplicates(container.get("ports"), lambda p: p.get("name"))]
        if found:
            what, value, field = found[0]
            return [service.error(("spec", component), (
                f"component {component}'s {pods} would have the {what} {value!r} twice, "
                f"and the API server refuses them (Duplicate value): keep one in {field} "
                f"{_volumes_where(component, runner, runtime)}"))]
    return []


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
    would refuse, with the rules of ``lifecycle/names.py``; OME's own labels too (the
    model's name is one)."""
    component = lifecycle.component
    ome = ome_pod_metadata(service.data, runtime.data if runtime else None, component)
    for name in template_names({**templates, "every": {"metadata": ome, "spec": {}}}):
        if name.rule.allows(name.value):
            continue
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
