"""The Kubernetes names omegitops derives from an InferenceService, and their rules.

An InferenceService name that validates can still give a component an
object name, a hostname or a label value that the API server refuses: a
gang's pod hostname ``{isvc}-{component}-{index}-leader-0`` is a DNS-1123
label of at most 63 characters, and the routing Service ``{isvc}-{component}``
a DNS-1035 label, which starts with a letter. ``derived_names`` renders the
component's objects with the very functions that reconcile builds them with
(pods, Services, PodGroup, ControllerRevision, InferenceReplica), from empty
templates, and reads their names back, so the rules are checked against the
naming scheme itself and never against a second copy of it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from omegitops.model.kubenames import (
    ANNOTATION_KEY,
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_KEY,
    LABEL_VALUE,
    Rule,
)
from omegitops.model.state import Json
from omegitops.render.component import DesiredComponent
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.resolve import DEFAULT as BUILT_IN
from omegitops.render.resolve import OMENATIVE, ComponentLifecycle, Resolved
from omegitops.render.revisions import revision_object
from omegitops.render.services import PODGROUP_LABEL, desired_services, podgroup_name
from omegitops.render.templates import DEFAULT, LEADER, WORKER, revision_name


@dataclass(frozen=True)
class DerivedName:
    """A name made from the service's, where it ends up, and the rule it must meet."""

    what: str
    value: str
    rule: Rule

    @property
    def too_long(self) -> bool:
        return len(self.value) > self.rule.limit

    @property
    def malformed(self) -> bool:
        return not self.rule.pattern.match(self.value)

    @property
    def excess(self) -> int:
        return len(self.value) - self.rule.limit


def highest_index(lifecycle: ComponentLifecycle) -> int:
    """The highest Instance index the component reaches at its desired count.

    A new Instance takes the lowest free index, and a migration or a gang's surge
    starts its replacement at a new one while the source still holds its own
    (instances.txt "Index"): each desired Instance and a replacement beside it.
    """
    return 2 * max(lifecycle.replicas, 1) - 1


def derived_names(namespace: str, isvc: str, lifecycle: ComponentLifecycle) -> list[DerivedName]:
    """Every name the component's objects get from ``isvc``, read from the objects
    reconcile would create, rendered from empty templates."""
    desired = _skeleton(namespace, isvc, lifecycle)
    index = highest_index(lifecycle)
    names = [DerivedName("InferenceReplica name", desired.name, DNS1123_SUBDOMAIN)]
    revision = revision_object(desired, 1)
    names.append(DerivedName("ControllerRevision name", revision["metadata"]["name"],
                             DNS1123_SUBDOMAIN))
    names += _label_values("ControllerRevision", revision["metadata"]["labels"])
    for service in desired_services(desired):
        names.append(DerivedName("Service name", service["metadata"]["name"], DNS1035_LABEL))
        names += _label_values("Service selector", service["spec"]["selector"])
    spec = PodSpecInput(namespace, isvc, lifecycle.component, desired.revision,
                        desired.templates, lifecycle.worker_size, desired.gang)
    # A single pod's SurgeThenDrain replacement takes the other ordinal.
    for base in (0,) if desired.gang else (0, 1):
        for pod in instance_pods(spec, index, 1, base):
            names += _pod_names(pod)
    if desired.gang:
        group = podgroup_name(desired, index)
        names.append(DerivedName("PodGroup name", group, DNS1123_SUBDOMAIN))
        names.append(DerivedName(f"pod label {PODGROUP_LABEL}", group, LABEL_VALUE))
    return list(dict.fromkeys(names))


# A DNS-1035 label: lower-case letters, digits and '-', a letter first, no '-' last. Every
# name omegitops derives takes the service's name as it is written, so one of these
# gives names whose form depends on nothing but its length.
_PLAIN_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def derived_names_fit(isvc: str, lifecycle: ComponentLifecycle) -> bool:
    """Whether every name ``derived_names`` gives is short enough and well formed, known
    without rendering the component's objects for most services (a fifth of a cold
    pass's validation at 1,000 services was spent rendering them). For a plain name
    the answer is that of any plain name of its length, rendered once per length and
    component shape; for any other name, False: render them (``derived_names``)."""
    if not _PLAIN_NAME.fullmatch(isvc):
        return False
    return _plain_names_fit(len(isvc), lifecycle.component, lifecycle.shape,
                            lifecycle.worker_size, lifecycle.replicas)


@functools.lru_cache(maxsize=4096)
def _plain_names_fit(length: int, component: str, shape: str, worker_size: int,
                     replicas: int) -> bool:
    """What ``derived_names`` reads of a component, and nothing else, rendered for the
    plain name ``a...a`` of ``length`` (the names do not depend on the namespace: a test
    holds them to that)."""
    lifecycle = ComponentLifecycle(component=component, mode=Resolved(OMENATIVE, BUILT_IN),
                                   shape=shape, worker_size=worker_size, replicas=replicas)
    return not any(d.too_long or d.malformed
                   for d in derived_names("default", "a" * length, lifecycle))


def template_names(templates: dict[str, Json]) -> list[DerivedName]:
    """The names a component's pod templates carry from its manifests (label keys and
    values, annotation keys, container names), with the rule the API server holds
    each to: the same rules as the names omegitops derives."""
    names = [DerivedName(_what(*where), value, rule)
             for where, value, rule in _carried(templates)]
    return list(dict.fromkeys(names))


def first_refused_template_name(templates: dict[str, Json]) -> DerivedName | None:
    """The first of ``template_names`` its rule refuses, or None. Each (rule, value) is
    judged once per process: a fleet's components repeat their labels (a team, a
    model, OME's own), and validation asks for every component's."""
    for where, value, rule in _carried(templates):
        if not _allowed(rule, value):
            return DerivedName(_what(*where), value, rule)
    return None


@functools.lru_cache(maxsize=65536)
def _allowed(rule: Rule, value: str) -> bool:
    return rule.allows(value)


# (runner, what of its pods, the label's key): said only for a name that is refused.
_Where = tuple[str, str, str | None]


def _carried(templates: dict[str, Json]) -> Iterator[tuple[_Where, str, Rule]]:
    """(where, value, rule) of each name the templates carry, in template_names' order."""
    for runner, template in sorted(templates.items()):
        meta, spec = template["metadata"], template["spec"]
        for key, value in sorted((meta.get("labels") or {}).items()):
            yield (runner, "label key", None), key, LABEL_KEY
            yield (runner, "label", key), str(value), LABEL_VALUE
        for key in sorted(meta.get("annotations") or {}):
            yield (runner, "annotation key", None), key, ANNOTATION_KEY
        for field in ("containers", "initContainers"):
            for container in spec.get(field) or []:
                if isinstance(container, dict):
                    yield (runner, "container name", None), str(container.get("name")), \
                        DNS1123_LABEL


def _what(runner: str, what: str, key: str | None) -> str:
    """``leader pod label team``: what a template name is, as a message says it."""
    return f"{runner} pod {what}" if key is None else f"{runner} pod {what} {key}"


def longest_fitting(namespace: str, lifecycle: ComponentLifecycle, upto: int) -> int:
    """The longest service name, at most ``upto`` characters, whose derived names are
    all short enough (0 when none is): names only grow with the service's."""
    low, high = 0, upto
    while low < high:
        middle = (low + high + 1) // 2
        if any(d.too_long for d in derived_names(namespace, "a" * middle, lifecycle)):
            high = middle - 1
        else:
            low = middle
    return low


def _skeleton(namespace: str, isvc: str, lifecycle: ComponentLifecycle) -> DesiredComponent:
    runners = (LEADER, WORKER) if lifecycle.shape == "gang" else (DEFAULT,)
    templates = {runner: {"metadata": {"labels": {}, "annotations": {}},
                          "spec": {"containers": []}} for runner in runners}
    return DesiredComponent(namespace=namespace, isvc=isvc, component=lifecycle.component,
                            lifecycle=lifecycle, templates=templates,
                            revision=revision_name(isvc, lifecycle.component, templates))


def _pod_names(pod: Json) -> list[DerivedName]:
    meta, spec = pod["metadata"], pod["spec"]
    names = [DerivedName("pod name", meta["name"], DNS1123_SUBDOMAIN)]
    if "hostname" in spec:
        names.append(DerivedName("pod hostname (spec.hostname)", spec["hostname"],
                                 DNS1123_LABEL))
    if "subdomain" in spec:
        names.append(DerivedName("pod subdomain (spec.subdomain)", spec["subdomain"],
                                 DNS1123_LABEL))
    return names + _label_values("pod", meta["labels"])


def _label_values(owner: str, labels: dict[str, str]) -> list[DerivedName]:
    return [DerivedName(f"{owner} label {key}", value, LABEL_VALUE)
            for key, value in sorted(labels.items())]
