"""The API double serving a live ``SimCluster``: the simulator's store behind real HTTP.

Usage::

    with SimCluster(path) as sim, ApiServerDouble(store=SimStore(sim), ...) as api:
        kube = SimClockKube(sim, api_client=plain_client(api.url))
        run_pass(kube, items)        # the real client code path, on the sim's objects
        with api.lock:
            sim.advance(10)          # the scheduler and kubelet move between passes

Reads (GET, LIST) come from ``sim.list_objects``/``get_object``; the double applies
label and field selectors as for its own storage. Writes go through the
SimCluster's own methods, so that its scheduler and kubelet react to them as they
do to the ``sim:`` backend:

=========================================  ==============================================
request                                    SimCluster method
=========================================  ==============================================
POST pods                                  ``create_pod``
POST (other kinds)                         ``create_object`` (status dropped where the kind
                                           has a status subresource, CRD schema applied)
PUT {name}                                 ``replace_object``
PUT {name}/status                          ``replace_status``
PATCH pods/{name}/status (conditions)      ``set_pod_condition``, per changed condition
PATCH pods/{name} (images, labels)         ``patch_pod_images``, the changed ones
PATCH events/{name} (count, lastTimestamp) no method: written into the store (see ``_patch_event``)
DELETE pods/{name}                         ``delete_pod`` with the request's grace
DELETE (other kinds)                       ``delete_object``
=========================================  ==============================================

The sim's errors become the real Status answers: NotFound 404, AlreadyExists 409,
Conflict 409, Invalid 422. A request the mapping does not cover is refused with
405 and recorded in ``unsupported`` (tests assert it stays empty); ``writes``
records ``(method, path, sim method)`` for every write that reached the sim.

The clock: ``KubeCluster.now()`` is wall-clock time, but every timestamp in the
sim's objects is on the sim's clock (it starts at 2026-09-27T08:00:00Z and moves
only in ``advance``). The planner compares ``now()`` with those timestamps:
minReadySeconds windows, stuck-pod and progress deadlines, terminating pods'
deadlines, back-offs. With wall-clock ``now()`` every window has long elapsed (or
never starts, if the wall clock were behind). ``SimClockKube`` therefore reports the
sim's clock and advances the sim; everything else is the unchanged ``KubeCluster``.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from apiserver import ApiError, ApiServerDouble, Served, _check_pod

from omegitops.cluster import base
from omegitops.cluster.errors import AlreadyExists, Conflict, Invalid, NotFound
from omegitops.cluster.kube import KubeCluster
from omegitops.cluster.sim import SimCluster
from omegitops.errors import ClusterError

# What a merge patch of an Event may change: KubeCluster.record_event counts a repeat,
# and notes the outbox entry it counted in metadata.annotations.
EVENT_PATCH_FIELDS = {"count", "lastTimestamp", "metadata"}


class SimClockKube(KubeCluster):
    """``KubeCluster`` on the sim's clock: ``now()`` is ``sim.now()``, ``advance`` moves the
    sim. Without the Lease (one test owns the double). ``next_transition_at`` stays the real
    backend's None: the driver asks the sim itself, as ``tests/scenario.py`` does."""

    def __init__(self, sim: SimCluster, api: ApiServerDouble, **kwargs: Any) -> None:
        super().__init__(lease=False, **kwargs)
        self.sim, self.api = sim, api

    def now(self) -> datetime:
        with self.api.lock:
            return self.sim.now()

    def advance(self, seconds: float) -> datetime:
        with self.api.lock:
            return self.sim.advance(seconds)


class SimStore:
    """The storage of an ``ApiServerDouble`` (``store=``): a live, open ``SimCluster``."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.writes: list[tuple[str, str, str]] = []
        self.unsupported: list[str] = []

    # -- reads ------------------------------------------------------------------------

    def objects(self, served: Served) -> dict[tuple[str, str], dict]:
        if not self.sim.has_kind(served.kind):
            return {}
        found = {}
        for obj in self.sim.list_objects(served.kind):
            meta = obj["metadata"]
            found[(meta.get("namespace") or "" if served.namespaced else "", meta["name"])] = obj
        return found

    def get(self, served: Served, namespace: str | None, name: str) -> dict | None:
        if not self.sim.has_kind(served.kind):
            return None
        return self.sim.get_object(served.kind, namespace, name)

    def resource_version(self) -> str:
        # The sim's global counter (its "etcd revision"); read-only use of its state.
        return str(self.sim._require()["resourceVersion"])

    # -- writes -----------------------------------------------------------------------

    def create(self, api: ApiServerDouble, served: Served, namespace: str | None,
               obj: dict) -> dict:
        namespace = api.admit_create(served, namespace, obj)
        meta = obj["metadata"]
        path = _path(served, namespace, None, None)
        if served.kind == base.POD:
            _check_pod(obj)
            return self._call(served, meta["name"], "POST", path, "create_pod",
                              self.sim.create_pod, obj)
        if served.status:
            obj.pop("status", None)  # the status subresource: a create cannot set it
        obj = api._validated(served, obj)
        return self._call(served, meta["name"], "POST", path, "create_object",
                          self.sim.create_object, obj)

    def update(self, api: ApiServerDouble, served: Served, namespace: str | None, name: str,
               body: dict, sub: str | None) -> dict:
        stored = self._stored(served, namespace, name)
        api._check_type(served, body)
        meta = body.setdefault("metadata", {})
        if meta.get("name", name) != name or (
                served.namespaced and meta.get("namespace", namespace) != namespace):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name "
                           "on the URL")
        if not meta.get("resourceVersion"):
            if served.custom:
                raise ApiError(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: "
                               "must be specified for an update")
            meta["resourceVersion"] = stored["metadata"]["resourceVersion"]  # unconditional
        body["apiVersion"], body["kind"] = served.group_version, served.kind
        meta.update(name=name)
        if served.namespaced:
            meta["namespace"] = namespace
        path = _path(served, namespace, name, sub)
        if sub == "status":
            if served.kind == base.POD:
                return self._refuse("PUT", path, "pod status is the sim kubelet's")
            # Validate (and prune) the status as the whole object would be stored.
            checked = api._validated(served, {**copy.deepcopy(stored),
                                              "status": body.get("status")})
            body = {**body, "status": checked.get("status")}
            return self._call(served, name, "PUT", path, "replace_status",
                              self.sim.replace_status, body)
        if served.custom:
            checked = api._validated(served, {**body, "status": stored.get("status")})
            body = {**checked, "metadata": body["metadata"]}
        return self._call(served, name, "PUT", path, "replace_object",
                          self.sim.replace_object, body)

    def patch(self, api: ApiServerDouble, served: Served, namespace: str | None, name: str,
              sub: str | None, content_type: str, patch: Any) -> dict:
        stored = self._stored(served, namespace, name)
        path = _path(served, namespace, name, sub)
        kind = content_type.split(";")[0].strip()
        if not isinstance(patch, dict):
            return self._refuse("PATCH", path, f"a {kind} that is not an object")
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != stored["metadata"]["resourceVersion"]:
            raise api._conflict(served, name)
        patch = {k: v for k, v in patch.items() if k != "metadata" or v.keys() - {
            "resourceVersion"}}
        if served.kind == base.POD and kind == "application/strategic-merge-patch+json":
            if sub == "status" and patch.keys() == {"status"} and \
                    patch["status"].keys() == {"conditions"}:
                return self._patch_conditions(served, stored, patch["status"]["conditions"],
                                              path)
            if sub is None and _images_patch(patch):
                return self._patch_images(served, stored, (patch.get("spec") or {}).get(
                    "containers") or [], path, (patch.get("metadata") or {}).get("labels"))
        if served.kind == base.EVENT and kind == "application/merge-patch+json" and \
                sub is None and patch.keys() <= EVENT_PATCH_FIELDS and \
                (patch.get("metadata") or {}).keys() <= {"annotations"}:
            return self._patch_event(stored, patch, path)
        return self._refuse("PATCH", path, f"{kind} {sorted(patch)}")

    def delete(self, api: ApiServerDouble, served: Served, namespace: str | None, name: str,
               query: dict, options: dict) -> dict:
        stored = self._stored(served, namespace, name)
        wanted = (options.get("preconditions") or {}).get("resourceVersion")
        if wanted and wanted != stored["metadata"]["resourceVersion"]:
            raise api._conflict(served, name)
        path = _path(served, namespace, name, None)
        if served.kind == base.POD:
            grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            self._call(served, name, "DELETE", path, "delete_pod", self.sim.delete_pod,
                       namespace, name, None if grace is None else int(grace))
        else:
            self._call(served, name, "DELETE", path, "delete_object", self.sim.delete_object,
                       served.kind, namespace, name)
        # The object as it is now (terminating), or as it was when it went at once.
        return self.get(served, namespace, name) or stored

    # -- the mapped patches -------------------------------------------------------------

    def _patch_conditions(self, served: Served, pod: dict, conditions: list, path: str) -> dict:
        meta = pod["metadata"]
        have = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
        for condition in conditions:
            kind, status = condition.get("type"), condition.get("status")
            if not kind or status not in ("True", "False"):
                raise ApiError(422, "Invalid", f'Pod "{meta["name"]}" is invalid: '
                               "status.conditions: type and a True/False status are required")
            current = have.get(kind) or {}
            asked = (status, condition.get("reason", ""), condition.get("message", ""))
            if (current.get("status"), current.get("reason", ""),
                    current.get("message", "")) == asked:
                continue  # as the server: a patch that changes nothing writes nothing
            # lastTransitionTime is the sim's own (its clock), as with the sim: backend.
            pod = self._call(served, meta["name"], "PATCH", path, "set_pod_condition",
                             self.sim.set_pod_condition, meta["namespace"], meta["name"], kind,
                             status == "True", asked[1], asked[2])
        return pod

    def _patch_images(self, served: Served, pod: dict, containers: list, path: str,
                      labels: dict | None = None) -> dict:
        meta = pod["metadata"]
        current = {c["name"]: c.get("image") for c in pod["spec"]["containers"]}
        images = {}
        for container in containers:
            if container.keys() - {"name", "image"} or not container.get("name"):
                return self._refuse("PATCH", path, f"container fields {sorted(container)}")
            if current.get(container["name"]) != container.get("image"):
                images[container["name"]] = container.get("image")
        have = meta.get("labels") or {}
        relabel = {k: v for k, v in (labels or {}).items() if have.get(k) != v}
        if not images and not relabel:
            return pod  # as the server: a patch that changes nothing writes nothing
        return self._call(served, meta["name"], "PATCH", path, "patch_pod_images",
                          self.sim.patch_pod_images, meta["namespace"], meta["name"], images,
                          relabel)

    def _patch_event(self, stored: dict, patch: dict, path: str) -> dict:
        """KubeCluster counts a repeat Event with a merge patch of ``count``,
        ``lastTimestamp`` and its outbox annotation on the Event it named itself. The Cluster interface has no such
        write: the sim's ``record_event`` aggregates by its own index (which an Event made
        by ``create_object`` is not in) and ``replace_object`` replaces only metadata and
        spec. So the two fields go into the sim's store directly, with the sim's own
        resourceVersion bump: the one place this adapter writes around the SimCluster."""
        meta = stored["metadata"]
        live = self.sim._kind(base.EVENT)[f"{meta['namespace']}/{meta['name']}"]
        annotations = (patch.get("metadata") or {}).get("annotations") or {}
        fields = {k: v for k, v in patch.items() if k != "metadata"}
        changed = {k: v for k, v in fields.items() if live.get(k) != v}
        have = live["metadata"].setdefault("annotations", {})
        moved = {k: v for k, v in annotations.items() if have.get(k) != v}
        if not changed and not moved:
            return stored
        live.update(changed)
        have.update(moved)
        self.sim._bump(live)
        self.writes.append(("PATCH", path, "(event fields)"))
        return copy.deepcopy(live)

    # -- helpers ------------------------------------------------------------------------

    def _stored(self, served: Served, namespace: str | None, name: str) -> dict:
        obj = self.get(served, namespace, name)
        if obj is None:
            raise ApiError(404, "NotFound", f'{served.qualified()} "{name}" not found')
        return obj

    def _refuse(self, method: str, path: str, what: str) -> dict:
        self.unsupported.append(f"{method} {path}: {what}")
        raise ApiError(405, "MethodNotAllowed", f"the sim store does not map {what}")

    def _call(self, served: Served, name: str, method: str, path: str, label: str, write,
              *args) -> dict:
        """One SimCluster write; its errors answered as the API server answers them."""
        try:
            result = write(*args)
        except NotFound as err:
            raise ApiError(404, "NotFound", f'{served.qualified()} "{name}" not found') from err
        except AlreadyExists as err:
            raise ApiError(409, "AlreadyExists",
                           f'{served.qualified()} "{name}" already exists') from err
        except Conflict as err:
            raise ApiServerDouble._conflict(served, name) from err
        except Invalid as err:
            raise ApiError(422, "Invalid",
                           f'{served.kind} "{name}" is invalid: {err}') from err
        except ClusterError as err:
            self.unsupported.append(f"{method} {path}: {label}: {err}")
            raise ApiError(500, "InternalError", str(err)) from err
        self.writes.append((method, path, label))
        return result


def _images_patch(patch: dict) -> bool:
    """The patch ``KubeCluster.patch_pod_images`` sends: container images under
    ``spec.containers``, labels under ``metadata.labels``, or both."""
    spec, meta = patch.get("spec"), patch.get("metadata")
    if not patch or patch.keys() - {"spec", "metadata"}:
        return False
    if spec is not None and (not isinstance(spec, dict) or spec.keys() != {"containers"}):
        return False
    return meta is None or (isinstance(meta, dict) and meta.keys() == {"labels"})


def _path(served: Served, namespace: str | None, name: str | None, sub: str | None) -> str:
    root = "/api/v1" if served.group_version == "v1" else f"/apis/{served.group_version}"
    parts = [root]
    if served.namespaced and namespace:
        parts += ["namespaces", namespace]
    parts.append(served.plural)
    if name:
        parts.append(name)
        if sub:
            parts.append(sub)
    return "/".join(parts)

