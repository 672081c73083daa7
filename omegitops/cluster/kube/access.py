"""Which permissions the ``kube`` backend uses, how a request maps to one, and the
SelfSubjectAccessReview that asks the API server whether it is granted.

Usage::

    needed = run_permissions(prune=False, podgroups=True, inference_services=True)
    body = review_body(needed[0])            # POST .../selfsubjectaccessreviews
    permission_of("PATCH", "/api/v1/namespaces/a/pods/p/status").describe()
    # 'patch core/pods/status in namespace a'

Every authenticated user may create SelfSubjectAccessReviews and
SelfSubjectRulesReviews (the built-in ``system:basic-user`` role), so asking needs no
grant of its own. A rules review lists, in one answer, every rule that applies to the
job's account in a namespace (its ClusterRoles' and that namespace's Roles'):
``granted`` reads a permission off it, so a run asks once per namespace it writes in
rather than once per permission.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
RULES_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete",
         "WATCH": "watch"}

# /api/v1/... or /apis/{group}/{version}/..., then [namespaces/{ns}/]{plural}[/{name}[/{sub}]]
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/(?P<namespace>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


@dataclass(frozen=True)
class Permission:
    """One RBAC permission: a verb on ``group/resource[/subresource]`` in a namespace
    (None: in every namespace, as a ClusterRole grants it)."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str | None = None

    def describe(self) -> str:
        """``patch ome.io/inferenceservices/status in all namespaces``; the core group
        (``""`` in RBAC rules) is written ``core``."""
        what = f"{self.group or 'core'}/{self.resource}"
        if self.subresource:
            what += f"/{self.subresource}"
        where = f"in namespace {self.namespace}" if self.namespace else "in all namespaces"
        return f"{self.verb} {what} {where}"


def _each(verbs: str, group: str, resource: str, subresource: str = "") -> list[Permission]:
    return [Permission(verb, group, resource, subresource) for verb in verbs.split()]


# What a reconcile pass writes, and the reads it makes between writes, by what calls it
# (the LISTs of observation have been answered before the first write, so they are not
# asked about again). schemas/rbac-requirements.yaml grants them, with the reasons.
PASS = (
    # create_pod, delete_pod, patch_pod_images; a pod read by name (a stranger, a gate
    # set without a pass having seen the pod), its status patched
    *_each("create delete patch get", "", "pods"),
    *_each("patch", "", "pods", "status"),
    # the routing and headless Services: created, put back when they drift
    *_each("create update", "", "services"),
    # record_event: create; a repeat is read by name and counted
    *_each("get create patch", "", "events"),
    # stored revisions: created once, deleted beyond revisionHistoryLimit
    *_each("create delete", "apps", "controllerrevisions"),
    # the InferenceReplica: created, its status then its object replaced each step
    *_each("create update", "ome.io", "inferencereplicas"),
    *_each("update", "ome.io", "inferencereplicas", "status"),
)
# A PodGroup per gang Instance, when the cluster serves the kind.
PODGROUPS = (*_each("create delete", "scheduling.x-k8s.io", "podgroups"),)
# When OME's InferenceService CRD is installed: its uid for Events, its status totals.
INFERENCE_SERVICES = (
    *_each("get", "ome.io", "inferenceservices"),
    *_each("patch", "ome.io", "inferenceservices", "status"),
)
# Where the nodes are listed (migrations run): each component's PodDisruptionBudget,
# created, put back when its maxUnavailable changes, deleted with the component.
BUDGETS = (*_each("create update delete", "policy", "poddisruptionbudgets"),)
# --prune tears a removed component down, its Services and InferenceReplica last.
PRUNE = (*_each("delete", "", "services"), *_each("delete", "ome.io", "inferencereplicas"))


def run_permissions(*, prune: bool, podgroups: bool, inference_services: bool,
                    budgets: bool = False) -> list[Permission]:
    """Every permission a reconcile run on this cluster may use once it starts writing."""
    needed = list(PASS)
    if budgets:
        needed += BUDGETS
    if podgroups:
        needed += PODGROUPS
    if inference_services:
        needed += INFERENCE_SERVICES
    if prune:
        needed += PRUNE
    return needed


def permission_of(method: str, path: str) -> Permission | None:
    """The permission a request needs; None for paths that are not resources (discovery)."""
    match = _PATH.match(path)
    if match is None:
        return None
    verb = VERBS.get(method.upper())
    if verb is None:
        verb = "get" if match["name"] else "list"
    return Permission(verb, match["group"] or "", match["plural"], match["sub"] or "",
                      match["namespace"])


def review_body(permission: Permission) -> dict:
    """A SelfSubjectAccessReview asking whether the job's own account has ``permission``
    (an empty namespace asks about every namespace)."""
    attributes = {"verb": permission.verb, "group": permission.group,
                  "resource": permission.resource, "namespace": permission.namespace or ""}
    if permission.subresource:
        attributes["subresource"] = permission.subresource
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}


def rules_review_body(namespace: str) -> dict:
    """A SelfSubjectRulesReview: every rule that applies to the job's account in
    ``namespace``."""
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": namespace}}


def granted(rules: list[dict], permission: Permission) -> bool:
    """Whether a rules review's ``resourceRules`` grant ``permission`` as RBAC matches
    them: the verb (or ``*``), the group (or ``*``), the resource with its subresource
    (``pods/status``, or ``*``, ``pods/*``, ``*/status``), for every name (a rule
    restricted to some ``resourceNames`` grants no create or list of the kind)."""
    wanted = permission.resource + (f"/{permission.subresource}" if permission.subresource
                                    else "")
    forms = {wanted, "*"}
    if permission.subresource:
        forms |= {f"{permission.resource}/*", f"*/{permission.subresource}"}
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        if not ({permission.verb, "*"} & set(rule.get("verbs") or ())):
            continue
        if not ({permission.group, "*"} & set(rule.get("apiGroups") or ())):
            continue
        if forms & set(rule.get("resources") or ()):
            return True
    return False
