"""What the API server refuses in a pod, as pure checks of its spec and metadata.

``validate`` reads them to refuse a component whose rendered pods would be refused on
every pass (naming the file and field), and ``sim:`` refuses the same pods at create
time, as a real API server does (a control-plane test holds the two to a server-side
dry run, case by case). Each check returns ``(what, rule, field)``: what the pod would
have, the API server's rule, and the field to fix; None when the pod passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegitops.model.kubenames import LABEL_KEY, LABEL_VALUE
from omegitops.model.state import Json
from omegitops.util.quantities import parse_milli

# All of a pod's annotations together (metadata validation).
ANNOTATIONS_MAX_BYTES = 256 * 1024

Problem = tuple[str, str, str]


def native(resource: str) -> bool:
    """A resource in the kubernetes.io namespace (``cpu``, ``kubernetes.io/x``), as
    Kubernetes' ``IsNativeResource`` reads names."""
    return "/" not in resource or "kubernetes.io/" in resource


def overcommit_allowed(resource: str) -> bool:
    """Requests may be below limits: native resources except hugepages
    (``IsOvercommitAllowed``)."""
    return native(resource) and not resource.startswith("hugepages-")


def extended(resource: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): whole numbers only."""
    return not native(resource) and not resource.startswith("requests.")


def field_problem(spec: Json, metadata: Json) -> Problem | None:
    """Quantities (negative, requests over limits, a resource that cannot be overcommitted
    with requests not equal to its limits, an extended resource not whole), ports outside
    1-65535, an image with surrounding spaces, an env name with '=', node selector labels
    the API server refuses, annotations over 256 KiB."""
    for container in containers(spec):
        found = _container_field(container)
        if found:
            return found
    found = _selector_field(spec.get("nodeSelector"))
    if found:
        return found
    annotations = metadata.get("annotations") or {}
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        return (f"annotations of {size} bytes",
                f"may not be more than {ANNOTATIONS_MAX_BYTES} bytes", "annotations")
    return None


def duplicate_problem(spec: Json) -> Problem | None:
    """What the API server refuses as a ``Duplicate value``: two containers or two volumes
    of one name, two mounts at one path or two ports of one name in a container, one host
    port taken twice. ``what`` is ``the <thing> '<value>' twice``."""
    every = containers(spec)
    found = [("container name", v, "containers") for v in _duplicates(every, _name)]
    found += [("volume name", v, "volumes") for v in _duplicates(spec.get("volumes"), _name)]
    found += [("host port", f"{v[0]}/{v[1]}", "ports") for v in _duplicates(
        [p for c in every for p in c.get("ports") or []],
        lambda p: (p.get("hostPort"), p.get("protocol") or "TCP") if p.get("hostPort")
        else None)]
    for container in every:
        cname = container.get("name") or "(unnamed)"
        found += [(f"mount path in container {cname}", v, "volumeMounts") for v in
                  _duplicates(container.get("volumeMounts"), lambda m: m.get("mountPath"))]
        found += [(f"port name in container {cname}", v, "ports")
                  for v in _duplicates(container.get("ports"), _name)]
    if not found:
        return None
    what, value, field = found[0]
    return f"the {what} {value!r} twice", "Duplicate value", field


def containers(spec: Json) -> list[Json]:
    """Init containers, then containers (the order the API server reports them in)."""
    return [c for key in ("initContainers", "containers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def _name(item: Json) -> Any:
    return item.get("name")


def _container_field(container: Json) -> Problem | None:
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
    resources = container.get("resources")
    return _resource_field(resources if isinstance(resources, dict) else {}, name)


def _resource_field(resources: Json, name: str) -> Problem | None:
    amounts: dict[str, dict[str, int]] = {}
    for kind in ("requests", "limits"):
        given = resources.get(kind)
        for resource, value in (given.items() if isinstance(given, dict) else ()):
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
        if overcommit_allowed(resource):
            if limit is not None and milli > limit:
                return (f"requests {resource} over its limit in container {name}",
                        f"must be less than or equal to {resource} limit", "resources")
            continue
        if limit is None or milli != limit:
            return (f"requests {resource} not equal to its limit in container {name}",
                    f"must be equal to {resource} limit (not overcommittable)", "resources")
    for resource, milli in {**requests, **limits}.items():
        if extended(resource) and milli % 1000:
            return (f"a fractional {resource} in container {name}",
                    f"{resource} must be a whole number", "resources")
    return None


def _selector_field(selector: Any) -> Problem | None:
    for key, value in (selector or {}).items() if isinstance(selector, dict) else ():
        for rule, text in ((LABEL_KEY, str(key)), (LABEL_VALUE, str(value))):
            if not rule.allows(text):
                shown = text if len(text) <= 70 else f"{text[:67]}..."
                return (f"node selector {rule.title} {shown!r}",
                        f"{rule.title} is at most {rule.limit} characters and {rule.form}",
                        "nodeSelector")
    return None


def _duplicates(items: Any, key: Callable[[Json], Any]) -> list[Any]:
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
