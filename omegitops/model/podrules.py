"""What the API server refuses in a pod, as pure checks of its spec and metadata.

``validate`` reads them to refuse a component whose rendered pods would be refused on
every pass (naming the file and field), and ``sim:`` refuses the same pods at create
time, as a real API server does (a control-plane test holds the two to a server-side
dry run, case by case). Each check returns ``(what, rule, field)``: what the pod would
have, the API server's rule, and the field to fix; None when the pod passes.

The rules are k8s.io/kubernetes ``pkg/apis/core/validation/validation.go`` (v1.36, the
control plane the tests run), each named after the function it follows. Values the API
server defaults when empty (a port's protocol, a pull policy, a DNS policy) are refused
only when set to something else, as the server sees them after defaulting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from omegitops.model.kubenames import (
    DNS1123_SUBDOMAIN,
    LABEL_KEY,
    LABEL_VALUE,
    Rule,
)
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
    the API server refuses, annotations over 256 KiB; and the rules of ``CONTAINER_RULES``
    and ``POD_RULES`` (port names and protocols, probes, env, mounts, resource names,
    pull policy, DNS policy, service account, tolerations)."""
    for container in containers(spec):
        found = _container_field(container)
        if found:
            return found
        name = str(container.get("name") or "(unnamed)")
        for rule in CONTAINER_RULES:
            found = rule(container, name)
            if found:
                return found
    for pod_rule in POD_RULES:
        found = pod_rule(spec)
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


# -- the rules of validation.go, one function each ------------------------------------
#
# Each takes a container (and its name, for the message) or a pod spec and returns the
# first Problem it finds. ``field`` is the path the API server reports, without the
# container and list indices (the merged pod's order is not the manifest's).

ContainerRule = Callable[[Json, str], "Problem | None"]
PodRule = Callable[[Json], "Problem | None"]

PORT_PROTOCOLS = ("SCTP", "TCP", "UDP")  # supportedPortProtocols
PULL_POLICIES = ("Always", "IfNotPresent", "Never")  # supportedPullPolicies
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")  # validateContainerCommon
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")  # validateDNSPolicy
HTTP_SCHEMES = ("HTTP", "HTTPS")  # supportedHTTPSchemes
TOLERATION_OPERATORS = ("Equal", "Exists")  # ValidateTolerations (Lt and Gt are behind an
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")  # alpha gate, off)
# validEnvDownwardAPIFieldPathExpressions; and metadata.labels['k'], metadata.annotations['k']
ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                   "spec.serviceAccountName", "status.hostIP", "status.hostIPs",
                   "status.podIP", "status.podIPs")
# validContainerResourceFieldPathExpressions, and the hugepages prefixes beside them
ENV_RESOURCE_FIELDS = ("limits.cpu", "limits.memory", "limits.ephemeral-storage",
                       "requests.cpu", "requests.memory", "requests.ephemeral-storage")
ENV_RESOURCE_PREFIXES = ("requests.hugepages-", "limits.hugepages-")
# helper.IsStandardContainerResourceName: these, and hugepages-<size>
CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc", "sleep")  # validateHandler

_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+$")
_SUBSCRIPTED = re.compile(r"^(metadata\.(?:labels|annotations))\['(.*)'\]$", re.DOTALL)


def _one_of(allowed: tuple[str, ...]) -> str:
    return "Unsupported value: supported values: " + ", ".join(f'"{v}"' for v in allowed)


def port_name_problem(name: str) -> str | None:
    """``IsValidPortName`` (apimachinery util/validation): at most 15 characters of
    a-z, 0-9 and '-', at least one letter, no '--', no '-' at either end."""
    if len(name) > 15:
        return "must be no more than 15 characters"
    if not _PORT_NAME_CHARS.match(name):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if not re.search("[a-z]", name):
        return "must contain at least one letter (a-z)"
    if "--" in name:
        return "must not contain consecutive hyphens"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with a hyphen"
    return None


def _ports_rule(container: Json, name: str) -> Problem | None:
    """``validateContainerPorts``: a port's name, and its protocol one of TCP, UDP,
    SCTP (its number is ``_container_field``'s)."""
    for port in _dicts(container.get("ports")):
        port_name = port.get("name")
        if isinstance(port_name, str) and port_name:
            wrong = port_name_problem(port_name)
            if wrong:
                return (f"port name {port_name!r} in container {name}", wrong, "ports.name")
        protocol = port.get("protocol")
        if protocol not in (None, "") and protocol not in PORT_PROTOCOLS:
            return (f"port protocol {protocol!r} in container {name}",
                    _one_of(PORT_PROTOCOLS), "ports.protocol")
    return None


def _port_num_or_name(port: Any) -> str | None:
    """``ValidatePortNumOrName``: a number 1-65535, or a valid port name. An absent port
    is the number 0."""
    if port is None or isinstance(port, bool):
        port = 0
    if isinstance(port, int):
        return None if 1 <= port <= 65535 else "must be between 1 and 65535, inclusive"
    if isinstance(port, str):
        return port_name_problem(port)
    return None  # the schema's to refuse


def _handler_problem(handler: Json, where: str, name: str) -> Problem | None:
    """``validateHandler`` and the actions it checks: one handler exactly; an exec's
    command; an httpGet's port and scheme; a tcpSocket's port; a grpc's port."""
    given = [key for key in HANDLERS if handler.get(key) is not None]
    if not given:
        return (f"{where} with no handler in container {name}",
                "Required value: must specify a handler type", where)
    if len(given) > 1:
        return (f"{where} with {' and '.join(given)} in container {name}",
                "Forbidden: may not specify more than 1 handler type", f"{where}.{given[1]}")
    kind = given[0]
    action = handler[kind]
    if not isinstance(action, dict):
        return None
    if kind == "exec" and not action.get("command"):
        return (f"{where}.exec with no command in container {name}", "Required value",
                f"{where}.exec.command")
    if kind in ("httpGet", "tcpSocket", "grpc"):
        port = action.get("port")
        wrong = _port_num_or_name(port)
        if kind == "grpc" and isinstance(port, str):
            wrong = None  # an int32 field: a string is the schema's to refuse
        if wrong:
            return (f"{where}.{kind} port {port!r} in container {name}", wrong,
                    f"{where}.{kind}.port")
    scheme = action.get("scheme") if kind == "httpGet" else None
    if scheme not in (None, "") and scheme not in HTTP_SCHEMES:
        return (f"{where}.httpGet scheme {scheme!r} in container {name}",
                _one_of(HTTP_SCHEMES), f"{where}.httpGet.scheme")
    return None


def _probes_rule(container: Json, name: str) -> Problem | None:
    """``validateProbe`` (and the liveness and startup probes' ``successThreshold`` of
    1), ``validateLifecycle``: each probe's and hook's handler, and no negative count."""
    for probe_name in PROBES:
        probe = container.get(probe_name)
        if not isinstance(probe, dict):
            continue
        found = _handler_problem(probe, probe_name, name)
        if found:
            return found
        for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds",
                    "successThreshold", "failureThreshold"):
            value = probe.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                return (f"{probe_name}.{key} {value} in container {name}",
                        "must be greater than or equal to 0", f"{probe_name}.{key}")
        threshold = probe.get("successThreshold")
        if probe_name != "readinessProbe" and isinstance(threshold, int) \
                and threshold not in (0, 1):  # 0 is defaulted to 1
            return (f"{probe_name}.successThreshold {threshold} in container {name}",
                    "must be 1", f"{probe_name}.successThreshold")
    lifecycle = container.get("lifecycle")
    for hook in ("postStart", "preStop"):
        handler = lifecycle.get(hook) if isinstance(lifecycle, dict) else None
        if isinstance(handler, dict):
            found = _handler_problem(handler, f"lifecycle.{hook}", name)
            if found:
                return found
    return None


def _env_rule(container: Json, name: str) -> Problem | None:
    """``ValidateEnv`` (with ``IsRelaxedEnvVarName``, GA since 1.34): a name, of
    printable ASCII without '='; and ``validateEnvVarValueFrom``."""
    for env in _dicts(container.get("env")):
        env_name = env.get("name")
        if env_name in (None, ""):
            return (f"an env var with no name in container {name}", "Required value",
                    "env.name")
        if isinstance(env_name, str) and not all(" " <= c <= "~" for c in env_name):
            return (f"env name {env_name!r} in container {name}",
                    ("a valid environment variable name must consist only of printable "
                    "ASCII characters other than '='"), "env.name")
        found = _value_from_problem(env, str(env_name), name)
        if found:
            return found
    return None


def _value_from_problem(env: Json, env_name: str, name: str) -> Problem | None:
    """``validateEnvVarValueFrom``, ``validateObjectFieldSelector`` and
    ``validateContainerResourceFieldSelector``."""
    source = env.get("valueFrom")
    if not isinstance(source, dict):
        return None
    what = f"env {env_name!r} in container {name}"
    given = [key for key in ("fieldRef", "resourceFieldRef", "configMapKeyRef",
                             "secretKeyRef", "fileKeyRef") if source.get(key) is not None]
    if not given:
        return (f"{what} with an empty valueFrom", ("must specify one of: `fieldRef`, "
                "`resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`"),
                "env.valueFrom")
    if env.get("value") not in (None, ""):
        return (f"{what} with both a value and a valueFrom",
                "may not be specified when `value` is not empty", "env.valueFrom")
    if len(given) > 1:
        return (f"{what} with {' and '.join(given)}",
                "may not have more than one field specified at a time", "env.valueFrom")
    field_ref = source.get("fieldRef")
    if isinstance(field_ref, dict):
        version = field_ref.get("apiVersion")
        if version not in (None, "", "v1"):  # defaulted to v1
            return (f"{what} reading apiVersion {version!r}",
                    f"error converting fieldPath: unsupported pod version: {version}",
                    "env.valueFrom.fieldRef.fieldPath")
        path = field_ref.get("fieldPath")
        if not path:
            return (f"{what} with no fieldRef.fieldPath", "Required value",
                    "env.valueFrom.fieldRef.fieldPath")
        wrong = _field_path_problem(str(path))
        if wrong:
            return (f"{what} reading {path!r}", wrong,
                    "env.valueFrom.fieldRef.fieldPath")
    resource_ref = source.get("resourceFieldRef")
    if isinstance(resource_ref, dict):
        resource = resource_ref.get("resource")
        if not resource:
            return (f"{what} with no resourceFieldRef.resource", "Required value",
                    "env.valueFrom.resourceFieldRef.resource")
        if resource not in ENV_RESOURCE_FIELDS and not str(resource).startswith(
                ENV_RESOURCE_PREFIXES):
            return (f"{what} reading {resource!r}",
                    _one_of(ENV_RESOURCE_FIELDS), "env.valueFrom.resourceFieldRef.resource")
    return None


def _field_path_problem(path: str) -> str | None:
    """A downward API field path an env var may read (``validateObjectFieldSelector``)."""
    subscripted = _SUBSCRIPTED.match(path)
    if subscripted:
        key = subscripted.group(2)
        key = key.lower() if subscripted.group(1).endswith("annotations") else key
        return None if LABEL_KEY.allows(key) else _rule_words(LABEL_KEY)
    if "[" in path:
        return f"error converting fieldPath: field label does not support subscript: {path}"
    if path not in ENV_FIELD_PATHS:
        return _one_of(ENV_FIELD_PATHS)
    return None


def _mounts_rule(container: Json, name: str) -> Problem | None:
    """``ValidateVolumeMounts``: a mountPath; a subPath or subPathExpr relative with no
    '..' (``validateLocalDescendingPath``), and not both."""
    for mount in _dicts(container.get("volumeMounts")):
        volume = mount.get("name")
        if not mount.get("mountPath"):
            return (f"a mount of volume {volume!r} with no mountPath in container {name}",
                    "Required value", "volumeMounts.mountPath")
        if mount.get("subPath") and mount.get("subPathExpr"):
            return ((f"a mount of volume {volume!r} with both subPath and subPathExpr in "
                    f"container {name}"), "subPathExpr and subPath are mutually exclusive",
                    "volumeMounts.subPathExpr")
        for key in ("subPath", "subPathExpr"):
            value = mount.get(key)
            if not isinstance(value, str) or not value:
                continue
            if value.startswith("/"):
                wrong = "must be a relative path"
            elif ".." in value.replace("\\", "/").split("/"):
                wrong = "must not contain '..'"
            else:
                continue
            return (f"{key} {value!r} of volume {volume!r} in container {name}", wrong,
                    f"volumeMounts.{key}")
    return None


def resource_name_problem(resource: str) -> str | None:
    """``validateContainerResourceName``: a qualified name; without a '/', cpu, memory,
    ephemeral-storage or hugepages-<size>; with one, outside kubernetes.io, an extended
    resource name (``IsExtendedResourceName``)."""
    if not LABEL_KEY.allows(resource):
        return _rule_words(LABEL_KEY)
    if "/" not in resource:
        if resource in CONTAINER_RESOURCES or resource.startswith("hugepages-"):
            return None
        return "must be a standard resource for containers"
    if not native(resource) and (resource.startswith("requests.")
                                 or not LABEL_KEY.allows(f"requests.{resource}")):
        return "doesn't follow extended resource name standard"
    return None


def _resource_names_rule(container: Json, name: str) -> Problem | None:
    resources = container.get("resources")
    for kind in ("limits", "requests"):
        given = resources.get(kind) if isinstance(resources, dict) else None
        for resource in given if isinstance(given, dict) else ():
            wrong = resource_name_problem(str(resource))
            if wrong:
                return (f"the resource {str(resource)!r} in {kind} of container {name}",
                        wrong, f"resources.{kind}")
    return None


def _policies_of_container_rule(container: Json, name: str) -> Problem | None:
    """``validateContainerCommon``: a pull policy (``validatePullPolicy``) and a
    termination message policy the API server knows. (A container's name is
    ``render.names``' to check, with the names omegitops derives.)"""
    for key, allowed in (("imagePullPolicy", PULL_POLICIES),
                         ("terminationMessagePolicy", TERMINATION_MESSAGE_POLICIES)):
        value = container.get(key)
        if value not in (None, "") and value not in allowed:
            return (f"{key} {value!r} in container {name}", _one_of(allowed), key)
    return None


def _policies_rule(spec: Json) -> Problem | None:
    """``validateDNSPolicy`` and ``validatePodDNSConfig`` (a dnsConfig with a nameserver
    under ``None``). (A pod's restartPolicy is always rendered Always: a component's
    restartPolicy is OME's, for its Instances.)"""
    value = spec.get("dnsPolicy")
    if value not in (None, "") and value not in DNS_POLICIES:
        return f"dnsPolicy {value!r}", _one_of(DNS_POLICIES), "dnsPolicy"
    if spec.get("dnsPolicy") == "None":
        config = spec.get("dnsConfig")
        if not isinstance(config, dict) or not config.get("nameservers"):
            return ("dnsPolicy None with no dnsConfig nameserver",
                    ("Required value: must provide at least one DNS nameserver when "
                    "`dnsPolicy` is None"), "dnsConfig")
    return None


def _service_account_rule(spec: Json) -> Problem | None:
    """``ValidatePodSpec``: a serviceAccountName that is a DNS-1123 subdomain
    (``ValidateServiceAccountName``)."""
    account = spec.get("serviceAccountName")
    if isinstance(account, str) and account and not DNS1123_SUBDOMAIN.allows(account):
        shown = account if len(account) <= 70 else f"{account[:67]}..."
        return (f"serviceAccountName {shown!r}",
                _rule_words(DNS1123_SUBDOMAIN), "serviceAccountName")
    return None


def _tolerations_rule(spec: Json) -> Problem | None:
    """``ValidateTolerations``: a key that is a qualified name; Exists when the key is
    empty; an operator Equal or Exists, with no value under Exists and a label value
    under Equal; an effect the API server knows, NoExecute when tolerationSeconds is
    set."""
    for toleration in _dicts(spec.get("tolerations")):
        key, operator = toleration.get("key") or "", toleration.get("operator") or ""
        value, effect = toleration.get("value") or "", toleration.get("effect") or ""
        what = f"a toleration of key {key!r}"
        if key and not LABEL_KEY.allows(str(key)):
            return what, _rule_words(LABEL_KEY), "tolerations.key"
        if operator not in ("", *TOLERATION_OPERATORS):
            return (f"{what} with operator {operator!r}", _one_of(TOLERATION_OPERATORS),
                    "tolerations.operator")
        if not key and operator != "Exists":
            return (f"{what} with operator {operator or 'Equal'!r}",
                    ("operator must be Exists when `key` is empty, which means \"match all "
                    "values and all keys\""), "tolerations.operator")
        if operator == "Exists" and value:
            return (f"{what} with operator Exists and value {value!r}",
                    "value must be empty when `operator` is 'Exists'", "tolerations.operator")
        if operator != "Exists" and not LABEL_VALUE.allows(str(value)):
            return (f"{what} with value {value!r}", _rule_words(LABEL_VALUE),
                    "tolerations.operator")
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            return (f"{what} with tolerationSeconds and effect {effect!r}",
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                    "tolerations.effect")
        if effect and effect not in TAINT_EFFECTS:
            return (f"{what} with effect {effect!r}", _one_of(TAINT_EFFECTS),
                    "tolerations.effect")
    return None


def _rule_words(rule: Rule) -> str:
    return f"{rule.title} is at most {rule.limit} characters and {rule.form}"


def _dicts(items: Any) -> list[Json]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) \
        else []


CONTAINER_RULES: tuple[ContainerRule, ...] = (
    _policies_of_container_rule, _ports_rule, _env_rule, _mounts_rule, _resource_names_rule,
    _probes_rule)
POD_RULES: tuple[PodRule, ...] = (_policies_rule, _service_account_rule, _tolerations_rule)
