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

from omegitops.model.state import Json
from omegitops.render.patchkeys import CONTAINER, POD_SPEC, field_of, merge_key
from omegitops.render.resolve import RUNTIME_CONFIG, ComponentLifecycle, dig
from omegitops.util.copying import json_copy

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "omegitops"
# The label selector of every object omegitops manages.
MANAGED = {MANAGED_BY: MANAGER}
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

# The labels OME's ProcessBaseLabels gives every component pod. The catalogue's routers
# find their backends by them (``component=engine,ome.io/inferenceservice=...``).
OME_COMPONENT = "component"
OME_RUNTIME = "serving-runtime"
OME_FINE_TUNED = "fine-tuned-serving"
OME_BASE_MODEL = "base-model-name"
OME_BASE_MODEL_TYPE = "base-model-type"
OME_LABELS = frozenset({OME_COMPONENT, OME_RUNTIME, OME_FINE_TUNED, OME_BASE_MODEL,
                        OME_BASE_MODEL_TYPE})
OME_RUNTIME_ANNOTATION = "ome.io/serving-runtime"
OME_BASE_MODEL_ANNOTATION = "ome.io/base-model-name"
# The rank LeaderWorkerSet labels its pods with: the catalogue's multi-node routers find
# the leaders of their gangs by ``leaderworkerset.sigs.k8s.io/worker-index=0``.
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# The InferenceService's annotations OME keeps off its pods (ServiceAnnotationDisallowedList).
_ANNOTATIONS_KEPT_OFF = frozenset({
    "kubectl.kubernetes.io/last-applied-configuration",
    "internal.ome.io/storage-initializer-sourceuri",
    "autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/max-scale",
    "autoscaling.knative.dev/minScale", "autoscaling.knative.dev/maxScale",
})

DEFAULT, LEADER, WORKER = "default", "leader", "worker"
# The key of a worker template that holds the gang's worker count.
SIZE = "size"

# Keys of a component config that are not pod spec fields.
NOT_POD_SPEC = {
    "runner", "leader", "worker", "annotations", "labels", "minReplicas", "maxReplicas",
    "lifecycle", "scaleMetric", "scaleTarget", "kedaConfig", "canaryTrafficPercent",
    "containerConcurrency", "timeoutSeconds", "deploymentStrategy", "maxUnavailable",
    "minAvailable", "acceleratorOverride", "config", "size", "restartPolicy",
}
def merge(base: Any, over: Any, definition: str | None = POD_SPEC) -> Any:
    """``over`` on top of ``base`` as a strategic merge patch does it, which is how OME
    merges the service's component over its runtime's config.

    Mappings merge field by field. A list merges item by item on its core/v1 patch merge
    key (``volumeMounts`` by ``mountPath``, ``ports`` by ``containerPort``, ``env`` and
    ``imagePullSecrets`` by ``name``), and any other list is replaced whole
    (``tolerations``, ``args``): the keys come from ``patchkeys``, never from a list
    written here. A null in ``over`` leaves ``base`` as it is: OME reads the service into
    Go structs, where a null is a field left out.
    """
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            if value is None:
                continue
            entry = field_of(definition, key)
            if key in out and entry and entry.get("list"):
                merge_on = merge_key(definition, key)
                out[key] = _merge_list(out[key], value, merge_on, entry.get("ref")) \
                    if merge_on else json_copy(value)
            else:
                out[key] = merge(out.get(key), value, entry.get("ref") if entry else None)
        return out
    # json_copy: marshal's round trip, several times faster than copy.deepcopy on these
    # leaves (falls back to it for anything not JSON-shaped).
    return json_copy(over) if over is not None else json_copy(base)

# Pods carry the start time of the operation that created them, which tells a
# replacement of this attempt from one an earlier attempt left behind.
OPERATION_ANNOTATION = "ome.io/operation-started"



def _merge_list(base: Any, over: Any, key: str, definition: str | None) -> Any:
    """Items of ``over`` merged into the items of ``base`` with the same ``key``, in the
    order a strategic merge patch gives them: the patch's items in its own order, with
    the items only ``base`` has kept where they stood relative to the ones they share
    (apimachinery's normalizeElementOrder and mergeSortedSlice)."""
    if not (isinstance(base, list) and isinstance(over, list)):
        return copy.deepcopy(over)
    base_items = [item for item in base if isinstance(item, dict)]
    # Merge key -> the item's place in ``base``; a key may be any JSON value.
    where: dict[Any, int] = {}
    for place, item in enumerate(base_items):
        where.setdefault(item.get(key), place)
    patched: list[Json] = []
    for item in (item for item in over if isinstance(item, dict)):
        position = where.get(item.get(key))
        patched.append(copy.deepcopy(item) if position is None
                       else merge(base_items[position], item, definition))
    named = {item.get(key) for item in patched}
    only_base = [item for item in base_items if item.get(key) not in named]
    merged, left, right = [], 0, 0
    while left < len(only_base) or right < len(patched):
        if right >= len(patched) or (left < len(only_base) and _before(
                where, only_base[left].get(key), patched[right].get(key))):
            merged.append(only_base[left])
            left += 1
        else:
            merged.append(patched[right])
            right += 1
    return merged


def _before(where: dict[Any, int], base_key: Any, patch_key: Any) -> bool:
    """Whether a base-only item goes before a patch item: only when both stood in the
    base, the base-only one first."""
    mine, theirs = where.get(base_key), where.get(patch_key)
    return mine is not None and theirs is not None and mine < theirs


def _pod_part(config: Json) -> tuple[Json, Json, Json]:
    """(pod spec fields, labels, annotations) of a component or runner config."""
    # No deep copy here: the only caller hands ``spec`` to ``merge``, which copies every
    # value it takes from ``over`` (a second copy of each layer cost a tenth of planning).
    spec = {k: v for k, v in config.items() if k not in NOT_POD_SPEC}
    return spec, dict(config.get("labels") or {}), dict(config.get("annotations") or {})


def _template(layers: list[Json], isvc_meta: Json | None = None) -> Json:
    """Merge config layers (lowest first) into one pod template, over the
    InferenceService's own labels and annotations (OME unions them with the
    component's, which win)."""
    isvc_meta = isvc_meta or {}
    spec: Json = {}
    labels: Json = dict(isvc_meta.get("labels") or {})
    annotations: Json = {k: v for k, v in (isvc_meta.get("annotations") or {}).items()
                         if k not in _ANNOTATIONS_KEPT_OFF}
    runner: Json = {}
    for layer in layers:
        if not isinstance(layer, dict):
            continue
        part, layer_labels, layer_annotations = _pod_part(layer)
        spec = merge(spec, part)
        labels.update(layer_labels)
        annotations.update(layer_annotations)
        if isinstance(layer.get("runner"), dict):
            runner = merge(runner, layer["runner"], CONTAINER)
    containers = list(spec.pop("containers", None) or [])
    if runner:
        runner.setdefault("name", MAIN_CONTAINER)
        containers = [c for c in containers if c.get("name") != runner["name"]]
        containers.insert(0, runner)
    spec["containers"] = containers
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def render_templates(
    isvc: dict[str, Any], runtime: dict[str, Any] | None, lifecycle: ComponentLifecycle
) -> dict[str, Json]:
    """``{runner: pod template}``: ``default``, or ``leader`` and ``worker``."""
    component = lifecycle.component
    runtime_config = dig(runtime, ("spec", RUNTIME_CONFIG[component])) or {}
    service_config = dig(isvc, ("spec", component)) or {}
    meta = isvc.get("metadata") or {}
    selector = _node_selector(isvc, runtime, component)
    if lifecycle.shape != "gang":
        runners = {DEFAULT: [runtime_config, service_config]}
    else:
        runners = {runner: [runtime_config, runtime_config.get(runner) or {},
                            service_config, service_config.get(runner) or {}]
                   for runner in (LEADER, WORKER)}
    templates: dict[str, Json] = {}
    for runner, layers in runners.items():
        template = _template(layers, meta)
        if selector:
            template["spec"]["nodeSelector"] = {**(template["spec"].get("nodeSelector") or {}),
                                                **selector}
        templates[runner] = normalize(template)
    if WORKER in templates:
        # A gang's shape is part of its template (update-strategies.txt: a change to its
        # worker pods alone rolls the leader too): a new size is a new revision, rolled
        # within the budgets, and the pods of an older revision keep its size.
        templates[WORKER][SIZE] = lifecycle.worker_size
    return templates


def workers_of(templates: dict[str, Json], default: int) -> int:
    """A gang's worker count at the revision of ``templates`` (``default`` for one
    stored before the size was part of it)."""
    size = (templates.get(WORKER) or {}).get(SIZE)
    return size if isinstance(size, int) else default


def _node_selector(isvc: Json, runtime: Json | None, component: str) -> Json:
    """The runtime's top-level ``spec.nodeSelector`` under the component's own, which
    wins (OME's MergeNodeSelector); engine and decoder pods only, as OME applies it."""
    if component not in ("engine", "decoder"):
        return {}
    merged = dict(dig(runtime, ("spec", "nodeSelector")) or {})
    merged.update(dig(isvc, ("spec", component, "nodeSelector")) or {})
    return merged


def ome_pod_metadata(
    isvc: Json, runtime: Json | None, component: str
) -> dict[str, dict[str, str]]:
    """The labels and annotations OME gives each pod of a component whatever its
    revision (ProcessBaseLabels, ProcessBaseAnnotations).

    They are set on every pod as it is made and never enter the revision hash: they
    name the component, not its template, and a fleet rendered before they were added
    would otherwise roll every Instance once. Those of the base model that need the
    BaseModel object (its size category, vendor and format) are left out: omegitops
    does not read BaseModels.
    """
    spec = isvc.get("spec") or {}
    runtime_name = dig(runtime, ("metadata", "name")) or dig(spec, ("runtime", "name")) or ""
    given = spec.get("model")
    model: Json = given if isinstance(given, dict) else {}
    labels = {
        OME_COMPONENT: component,
        OME_RUNTIME: str(runtime_name),
        OME_FINE_TUNED: "true" if model.get("fineTunedWeights") else "false",
    }
    annotations = {OME_RUNTIME_ANNOTATION: str(runtime_name)} if runtime_name else {}
    if model.get("name"):
        labels[OME_BASE_MODEL] = str(model["name"])
        labels[OME_BASE_MODEL_TYPE] = "Serving"
        annotations[OME_BASE_MODEL_ANNOTATION] = str(model["name"])
    return {"labels": labels, "annotations": annotations}


# Fields Kubernetes fills in when they are left out: spelling one out is not a change.
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                   "failureThreshold": 3, "initialDelaySeconds": 0}
_CONTAINER_DEFAULTS = {"terminationMessagePath": "/dev/termination-log",
                       "terminationMessagePolicy": "File"}
_SPEC_DEFAULTS = {"terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                  "schedulerName": "default-scheduler", "restartPolicy": "Always"}


def normalize(template: Json) -> Json:
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


def _normalize_container(container: Json) -> None:
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
            for key, probe_default in _PROBE_DEFAULTS.items():
                if container[probe].get(key) == probe_default:
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


def revision_hash(templates: dict[str, Json]) -> str:
    """Eight hex digits of a stable hash of the normalized templates."""
    canonical = json.dumps(templates, sort_keys=True, separators=(",", ":"), check_circular=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def revision_name(isvc_name: str, component: str, templates: dict[str, Json],
                  digest: str | None = None) -> str:
    """``{isvc}-{component}-{8 hex}``: same manifests, same name; any template change, new
    name. ``digest`` is ``revision_hash(templates)`` when the caller already has it."""
    return f"{isvc_name}-{component}-{digest or revision_hash(templates)}"


def images_of(template: Json) -> dict[str, str]:
    """Regular container name -> image (in-place updates touch only these)."""
    return {c.get("name"): c.get("image") for c in template["spec"].get("containers", [])}
