"""Pod templates: one per runner, rendered from the runtime and the service.

A component's pod template is the runtime's component config overlaid by
the InferenceService's component, field by field (the service's runner
container over the runtime's, env and volumes merged by name). A gang has a
``leader`` and a ``worker`` template, each built from the component's common
pod fields plus its own. The per-Instance parts (names, index, incarnation,
OME_* environment) are added by ``instance_pod`` and never enter the hash.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from omegitops.lifecycle.copying import json_copy
from omegitops.lifecycle.resolve import RUNTIME_CONFIG, ComponentLifecycle, dig

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "omegitops"
LABEL_ISVC = "ome.io/inferenceservice"
LABEL_COMPONENT = "ome.io/component"
LABEL_INDEX = "ome.io/instance-index"
LABEL_INCARNATION = "ome.io/instance-incarnation"
LABEL_RUNNER = "ome.io/runner"
LABEL_REVISION = "ome.io/revision"
# Leader and single pods take requests; workers never do (instances.txt).
LABEL_ENTRY = "ome.io/entry"
SERVING_GATE = "ome.io/serving"
MAIN_CONTAINER = "ome-container"

DEFAULT, LEADER, WORKER = "default", "leader", "worker"

# Keys of a component config that are not pod spec fields.
_NOT_POD_SPEC = {
    "runner", "leader", "worker", "annotations", "labels", "minReplicas", "maxReplicas",
    "lifecycle", "scaleMetric", "scaleTarget", "kedaConfig", "canaryTrafficPercent",
    "containerConcurrency", "timeoutSeconds", "deploymentStrategy", "maxUnavailable",
    "minAvailable", "acceleratorOverride", "config", "size", "restartPolicy",
}
# Lists whose items are merged by name rather than replaced.
_NAMED_LISTS = {"env", "volumes", "volumeMounts", "containers", "initContainers", "ports"}


def merge(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``: mappings field by field, named lists by name."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            if value is None:
                continue
            if key in out and key in _NAMED_LISTS:
                out[key] = _merge_named(out[key], value)
            else:
                out[key] = merge(out.get(key), value)
        return out
    # json_copy: marshal's round trip, several times faster than copy.deepcopy on these
    # leaves (falls back to it for anything not JSON-shaped).
    return json_copy(over) if over is not None else json_copy(base)


def _merge_named(base: Any, over: Any) -> Any:
    if not (isinstance(base, list) and isinstance(over, list)):
        return copy.deepcopy(over)
    merged = {item.get("name"): item for item in base if isinstance(item, dict)}
    order = [item.get("name") for item in base if isinstance(item, dict)]
    for item in over:
        if not isinstance(item, dict):
            continue
        name = item.get("name")
        if name in merged:
            merged[name] = merge(merged[name], item)
        else:
            merged[name] = copy.deepcopy(item)
            order.append(name)
    return [merged[name] for name in order]


def _pod_part(config: dict) -> tuple[dict, dict, dict]:
    """(pod spec fields, labels, annotations) of a component or runner config."""
    # No deep copy here: the only caller hands ``spec`` to ``merge``, which copies every
    # value it takes from ``over`` (a second copy of each layer cost a tenth of planning).
    spec = {k: v for k, v in config.items() if k not in _NOT_POD_SPEC}
    return spec, dict(config.get("labels") or {}), dict(config.get("annotations") or {})


def _template(layers: list[dict]) -> dict:
    """Merge config layers (lowest first) into one pod template."""
    spec: dict = {}
    labels: dict = {}
    annotations: dict = {}
    runner: dict = {}
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        part, layer_labels, layer_annotations = _pod_part(layer)
        spec = merge(spec, part)
        labels.update(layer_labels)
        annotations.update(layer_annotations)
        if isinstance(layer.get("runner"), dict):
            runner = merge(runner, layer["runner"])
    containers = list(spec.pop("containers", None) or [])
    if runner:
        runner.setdefault("name", MAIN_CONTAINER)
        containers = [c for c in containers if c.get("name") != runner["name"]]
        containers.insert(0, runner)
    spec["containers"] = containers
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def render_templates(
    isvc: dict[str, Any], runtime: dict[str, Any] | None, lifecycle: ComponentLifecycle
) -> dict[str, dict]:
    """``{runner: pod template}``: ``default``, or ``leader`` and ``worker``."""
    component = lifecycle.component
    runtime_config = dig(runtime, ("spec", RUNTIME_CONFIG[component])) or {}
    service_config = dig(isvc, ("spec", component)) or {}
    if lifecycle.shape != "gang":
        return {DEFAULT: normalize(_template([runtime_config, service_config]))}
    templates = {}
    for runner in (LEADER, WORKER):
        layers = [runtime_config, runtime_config.get(runner) or {},
                  service_config, service_config.get(runner) or {}]
        templates[runner] = normalize(_template(layers))
    return templates


# Fields Kubernetes fills in when they are left out: spelling one out is not a change.
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                   "failureThreshold": 3, "initialDelaySeconds": 0}
_CONTAINER_DEFAULTS = {"terminationMessagePath": "/dev/termination-log",
                       "terminationMessagePolicy": "File"}
_SPEC_DEFAULTS = {"terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                  "schedulerName": "default-scheduler", "restartPolicy": "Always"}


def normalize(template: dict) -> dict:
    """A canonical form: defaults dropped, env and named lists sorted, quantities as strings.

    Two templates that mean the same pod (env reordered, defaults spelled
    out) normalize to the same value, and so hash to the same revision.
    """
    spec = template["spec"]
    for key, default in _SPEC_DEFAULTS.items():
        if spec.get(key) == default:
            del spec[key]
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            _normalize_container(container)
    if spec.get("volumes"):
        spec["volumes"] = sorted(spec["volumes"], key=lambda v: str(v.get("name")))
    metadata = template["metadata"]
    for key in ("labels", "annotations"):
        metadata[key] = {k: str(v) for k, v in sorted((metadata.get(key) or {}).items())}
    return template


def _normalize_container(container: dict) -> None:
    for key, default in _CONTAINER_DEFAULTS.items():
        if container.get(key) == default:
            del container[key]
    if container.get("env"):
        container["env"] = sorted(container["env"], key=lambda e: str(e.get("name")))
    for key in ("volumeMounts", "ports"):
        if container.get(key):
            container[key] = sorted(container[key], key=lambda e: json.dumps(e, sort_keys=True))
    for port in container.get("ports") or []:
        if port.get("protocol") == "TCP":
            del port["protocol"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if isinstance(container.get(probe), dict):
            for key, default in _PROBE_DEFAULTS.items():
                if container[probe].get(key) == default:
                    del container[probe][key]
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        if isinstance(resources.get(kind), dict):
            resources[kind] = {k: str(v) for k, v in resources[kind].items()}
    if container.get("imagePullPolicy") == _default_pull_policy(container.get("image", "")):
        del container["imagePullPolicy"]


def _default_pull_policy(image: str) -> str:
    tag = image.rsplit("/", 1)[-1]
    return "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent"


def revision_hash(templates: dict[str, dict]) -> str:
    """Eight hex digits of a stable hash of the normalized templates."""
    canonical = json.dumps(templates, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def revision_name(isvc_name: str, component: str, templates: dict[str, dict]) -> str:
    """``{isvc}-{component}-{8 hex}``: same manifests, same name; any template change, new name."""
    return f"{isvc_name}-{component}-{revision_hash(templates)}"


def images_of(template: dict) -> dict[str, str]:
    """Regular container name -> image (in-place updates touch only these)."""
    return {c.get("name"): c.get("image") for c in template["spec"].get("containers", [])}
