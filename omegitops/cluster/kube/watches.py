"""Watches that keep a run's view of the managed objects current between passes.

A run with ``--until-idle`` lists each kind it observes once, then keeps that
list current from a watch that starts at the list's resourceVersion, as
client-go's reflector does under an informer:

- one thread per kind reads the watch stream (the official client's
  ``kubernetes.watch.Watch``) and applies each ADDED, MODIFIED and DELETED to
  the kind's store; BOOKMARKs only move the resourceVersion on;
- a watch the server ends (``timeoutSeconds``) starts again from the last
  resourceVersion seen; one whose resourceVersion is too old (410 Gone, as
  an ERROR event or an answer) lists the kind again, and everything counts as
  changed;
- each object is filed under its owner's key (``key_of``: the component it
  belongs to), and the keys that changed since the run last asked are kept, so
  that the next pass plans only those components;
- the answers to the run's own writes go into the store at once (when they are
  newer than what it holds), so that a pass planned before the watch delivers
  them does not act on what the run has already changed.

Stores hold the objects as the server sent them and are never changed in
place; readers get copies.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kubernetes import watch as k8s_watch

from omegitops.cluster.errors import Expired, Forbidden, NotFound
from omegitops.cluster.kube.resources import Resource, label_selector
from omegitops.util.copying import json_copy
from omegitops.util.errors import ClusterError

log = logging.getLogger(__name__)

# The server ends each watch after this long (client-go's reflector picks 5 to 10
# minutes at random, so that a fleet of watchers does not reconnect at once).
WATCH_SECONDS = 300
# How long to wait before watching again after a watch failed for another reason.
RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0

Key = Hashable
ObjectId = tuple[str, str]  # (namespace, name)


class Changes:
    """The owner keys whose objects changed since the run last asked, across kinds,
    and a condition the run waits on until there is one."""

    def __init__(self) -> None:
        self.ready = threading.Condition()
        self._keys: set[Key] = set()
        self._everything = False

    def add(self, keys: Iterable[Key]) -> None:
        with self.ready:
            before = len(self._keys)
            self._keys.update(keys)
            if len(self._keys) != before:
                self.ready.notify_all()

    def add_everything(self) -> None:
        with self.ready:
            self._everything = True
            self.ready.notify_all()

    def pending(self) -> bool:
        with self.ready:
            return self._everything or bool(self._keys)

    def take(self) -> set[Key] | None:
        """The keys changed since the last call; None when everything may have changed."""
        with self.ready:
            keys, everything = self._keys, self._everything
            self._keys, self._everything = set(), False
        return None if everything else keys

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a change; whether there is one."""
        with self.ready:
            return self.ready.wait_for(lambda: self._everything or bool(self._keys),
                                       timeout=max(0.0, seconds))


class WatchedKind:
    """One kind's objects under one label selector, kept current by a watch."""

    def __init__(self, resource: Resource, labels: dict[str, str] | None,
                 key_of: Callable[[dict], Key], changes: Changes,
                 list_pages: Callable[[], tuple[list[dict], str]],
                 open_stream: Callable[..., Any],
                 keep: Callable[[dict], bool] = lambda obj: True) -> None:
        self.resource = resource
        self.keep = keep  # objects of other shards' namespaces are not stored
        self.selector = label_selector(labels)
        self.key_of = key_of
        self.changes = changes
        self._list_pages = list_pages  # -> (items, the list's resourceVersion)
        self._open_stream = open_stream  # the watch request, for kubernetes.watch.Watch
        self._lock = threading.Lock()
        self._objects: dict[ObjectId, dict] = {}
        self._by_key: dict[Key, set[ObjectId]] = {}
        self.version = ""
        # Set while the watch is refused (Forbidden, NotFound): the kind is listed per pass.
        self.failure: ClusterError | None = None
        self._warned = False
        self._stopping = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._thread: threading.Thread | None = None

    # -- the store ----------------------------------------------------------------

    def fill(self, items: list[dict], version: str) -> None:
        """Replace the store with a list's items, as of the list's resourceVersion."""
        with self._lock:
            self._objects, self._by_key = {}, {}
            for item in items:
                self._put(item)
            self.version = version

    def items(self, keys: Iterable[Key] | None = None) -> list[dict]:
        """Copies of the stored objects: all of them, or those filed under ``keys``."""
        with self._lock:
            if keys is None:
                chosen = list(self._objects.values())
            else:
                ids = set().union(*(self._by_key.get(key, ()) for key in keys))
                chosen = [self._objects[i] for i in ids]
        return json_copy(chosen)

    def get(self, namespace: str, name: str) -> dict | None:
        """A copy of one stored object, or None."""
        with self._lock:
            found = self._objects.get((namespace or "", name))
        return json_copy(found) if found is not None else None

    def remember(self, obj: dict) -> None:
        """The server's answer to one of the run's writes: stored unless the watch has
        already gone past it (its own event, and whatever came after, a deletion among
        them, are in the store then: an answer that arrives after the object's DELETED
        event must not bring it back) or the store holds a newer version."""
        with self._lock:
            if self.version and not _later(_version(obj), self.version):
                return
            held = self._objects.get(_object_id(obj))
            if held is not None and not _newer(obj, held):
                return
            self._put(obj)

    def forget(self, namespace: str | None, name: str) -> None:
        """An object the run deleted and the server answered with a Status: gone."""
        with self._lock:
            self._drop((namespace or "", name))

    def _put(self, obj: dict) -> None:
        oid = _object_id(obj)
        old = self._objects.get(oid)
        if old is not None:
            old_key = self.key_of(old)
            if old_key != self.key_of(obj):
                self._by_key.get(old_key, set()).discard(oid)
        self._objects[oid] = obj
        self._by_key.setdefault(self.key_of(obj), set()).add(oid)

    def _drop(self, oid: ObjectId) -> None:
        old = self._objects.pop(oid, None)
        if old is not None:
            ids = self._by_key.get(self.key_of(old))
            if ids is not None:
                ids.discard(oid)
                if not ids:
                    del self._by_key[self.key_of(old)]

    # -- the watch -----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"watch-{self.resource.plural}")
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()
        watcher = self._watch
        if watcher is not None:
            watcher.stop()
            response = getattr(watcher, "_resp", None)
            if response is not None and hasattr(response, "shutdown"):
                _unblock(response)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = RETRY_SECONDS
        while not self._stopping.is_set():
            try:
                self._watch_once()
                backoff = RETRY_SECONDS
            except Expired as err:
                log.info("%s watch: %s; listing again", self.resource.kind, err)
                self._relist()
            except (Forbidden, NotFound) as err:
                # Not allowed to watch (an account without it), or not yet (a restarting
                # API server answers 403 and 404 before its authorizer and CRDs are up):
                # the kind is listed on every pass meanwhile, and the watch tried again
                # with backoff, as client-go's reflector does.
                if self.failure is None:
                    if not self._warned:  # once a run: an account without watch tries on
                        log.warning("%s; listing on every pass until it can watch", err)
                        self._warned = True
                    self.changes.add_everything()
                self.failure = err
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_RETRY_SECONDS)
                self._recover()
            except Exception as err:  # noqa: BLE001 - a broken stream is watched again
                if self._stopping.is_set():
                    return
                # Said once per outage, then quietly, waiting longer each time.
                level = logging.INFO if backoff == RETRY_SECONDS else logging.DEBUG
                log.log(level, "%s watch ended: %s; watching again in %.0f s",
                        self.resource.kind, err, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_RETRY_SECONDS)

    def _recover(self) -> None:
        """After a refused watch: list again (the events meanwhile are lost) and, when the
        list is allowed, watch again from it; the kind stays listed per pass otherwise."""
        if self._stopping.is_set():
            return
        try:
            items, version = self._list_pages()
        except ClusterError:
            return
        self.fill(items, version)
        self.failure = None
        self.changes.add_everything()

    def _relist(self) -> None:
        while not self._stopping.is_set():
            try:
                items, version = self._list_pages()
            except ClusterError as err:
                log.info("%s list failed: %s; trying again", self.resource.kind, err)
                self._stopping.wait(RETRY_SECONDS)
                continue
            self.fill(items, version)
            self.changes.add_everything()
            return

    def _watch_once(self) -> None:
        """One watch request, from the stored resourceVersion until the server ends it."""
        self._watch = k8s_watch.Watch()
        seconds = int(WATCH_SECONDS * (1 + random.random()))
        stream = self._watch.stream(self._open_stream, resource_version=self.version,
                                    label_selector=self.selector,
                                    allow_watch_bookmarks=True, timeout_seconds=seconds)
        try:
            for event in stream:
                if self._stopping.is_set():
                    return
                self._apply(event.get("type"), event.get("raw_object") or {})
        except k8s_watch.watch.client.rest.ApiException as err:
            # An ERROR event: 410 when the resourceVersion is older than the server keeps.
            if err.status == 410:
                raise Expired(f"{self.resource.kind} watch: {err.reason}") from err
            raise
        finally:
            self._watch = None

    def _apply(self, kind: str | None, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if kind == "BOOKMARK":
            if version:
                self.version = version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        if not self.keep(obj):
            if version:
                self.version = version
            return
        self.resource.fill_type(obj)
        with self._lock:
            old = self._objects.get(_object_id(obj))
            keys = {self.key_of(obj)}
            if old is not None:
                keys.add(self.key_of(old))
            if kind == "DELETED":
                self._drop(_object_id(obj))
            elif old is None or not _newer(old, obj):
                self._put(obj)
            if version:
                self.version = version
        self.changes.add(keys)


class Watches:
    """The watched kinds of one run, by (kind, selector)."""

    def __init__(self) -> None:
        self.changes = Changes()
        self.kinds: dict[tuple[str, str | None], WatchedKind] = {}

    def get(self, kind: str, labels: dict[str, str] | None) -> WatchedKind | None:
        watched = self.kinds.get((kind, label_selector(labels)))
        if watched is None or watched.failure is not None:
            return None
        return watched

    def of_kind(self, kind: str) -> list[WatchedKind]:
        return [w for (k, _), w in self.kinds.items() if k == kind and w.failure is None]

    def add(self, kind: str, watched: WatchedKind) -> None:
        self.kinds[(kind, watched.selector)] = watched

    def stop(self) -> None:
        for watched in self.kinds.values():
            watched.stop()


def _object_id(obj: dict) -> ObjectId:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _newer(a: dict, b: dict) -> bool:
    """Whether ``a`` is a later version of the object than ``b``.

    resourceVersions are opaque to clients in general; an etcd-backed API server
    issues them as increasing integers, which is all this compares. Anything else
    counts as newer, so the latest arrival wins.
    """
    return _later(_version(a), _version(b))


def _version(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""


def _later(va: str, vb: str) -> bool:
    """Whether resourceVersion ``va`` comes after ``vb`` (see ``_newer``)."""
    if va.isdigit() and vb.isdigit():
        return int(va) > int(vb)
    return True


def _unblock(response: object) -> None:
    """Shut the watch's connection so that a read blocked on it in the watch thread
    returns. The stream may have ended meanwhile (the server closed it, the client
    released or closed the connection): its socket is then closed, and shutting it
    raises EBADF, or urllib3 refuses a connection back in the pool. Nothing is
    blocked on it then, and the stop goes on."""
    try:
        response.shutdown()  # type: ignore[attr-defined]
    except (OSError, RuntimeError, ValueError) as err:
        log.debug("watch connection already closed: %s", err)
