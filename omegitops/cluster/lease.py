"""One run at a time on a real cluster: a coordination.k8s.io/v1 Lease.

Usage::

    lease = Lease(rest, namespace="omegitops")
    with lease:            # LockHeld if another live run holds it
        ...
        lease.renew()      # while --until-idle keeps going

The Lease is named ``omegitops`` and lives in ``OMEGITOPS_NAMESPACE`` (default
``omegitops``). Its holder is ``hostname/pid``. A run takes it when it is absent,
free, already its own, or expired: ``renewTime + leaseDurationSeconds`` has
passed, which means its holder died without releasing it. Every write carries
the resourceVersion that was read, so two runs racing for an expired Lease
cannot both win: the loser gets a Conflict and reports the winner.

A scheduler that retries a failed pod (Argo's ``retryStrategy``, a Job's
``backoffLimit``) starts a second attempt of the same run, often before the
first attempt's Lease has expired. Under ``OMEGITOPS_RUN`` (the shipped
pipelines set it to the Workflow's or the Job's uid) the holder is
``run/hostname/pid``, and an attempt that finds the Lease held by an earlier
attempt of its own run waits for it to expire and takes it over, rather than
exit 0 as "not running" with the run's work undone. If the earlier attempt
renews it meanwhile, it is alive and doing the work: the later one is refused
as any other run is.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Self

from omegitops.cluster.errors import AlreadyExists, Conflict, LeaseLost, LockHeld, NotFound
from omegitops.cluster.kube.events import micro_time
from omegitops.cluster.kube.resources import LEASE, RESOURCES
from omegitops.cluster.kube.rest import Rest
from omegitops.util.errors import ClusterError

log = logging.getLogger(__name__)

LEASE_NAME = "omegitops"
DEFAULT_NAMESPACE = "omegitops"
# Long enough that a pass never outlives it, short enough that a crashed run's
# successor waits at most a minute.
DEFAULT_DURATION_SECONDS = 60
RESOURCE = RESOURCES[LEASE]


def default_namespace() -> str:
    return os.environ.get("OMEGITOPS_NAMESPACE") or DEFAULT_NAMESPACE


def default_run() -> str | None:
    """The run this process is an attempt of (``OMEGITOPS_RUN``), kept across retries."""
    return os.environ.get("OMEGITOPS_RUN") or None


def default_identity(run: str | None = None) -> str:
    own = f"{socket.gethostname()}/{os.getpid()}"
    return f"{run}/{own}" if run else own


def _now() -> datetime:
    return datetime.now(UTC)


class Lease:
    """The run's hold on the cluster; ``acquire``, ``renew`` and ``release`` it."""

    def __init__(self, rest: Rest, namespace: str | None = None, *, name: str = LEASE_NAME,
                 identity: str | None = None,
                 duration_seconds: int = DEFAULT_DURATION_SECONDS,
                 clock: Callable[[], datetime] = _now, run: str | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rest = rest
        self.namespace = namespace or default_namespace()
        self.name = name
        self.run = run if run is not None else default_run()
        self.identity = identity or default_identity(self.run)
        self.sleep = sleep
        self.duration_seconds = duration_seconds
        self.clock = clock
        self.what = RESOURCE.object_id(self.namespace, name)
        self._stored: dict | None = None  # the Lease as last written by us
        self._renewed_at: datetime | None = None
        # The renewals on their own timer (keep_renewed), and what stopped them.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: LockHeld | None = None

    @property
    def held(self) -> bool:
        return self._stored is not None

    # -- the context manager --------------------------------------------------

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    # -- acquire, renew, release -----------------------------------------------

    def acquire(self) -> None:
        """Take the Lease, or raise LockHeld naming its live holder and when it expires."""
        current = self._read()
        if current is not None and self._earlier_attempt_holds(current):
            current = self._wait_out(current)
        if current is None:
            created = self._create()
            if created is not None:
                self._adopt(created)
                return
            current = self._read()  # another run created it between our GET and POST
            if current is None:
                raise ClusterError(f"{self.what}: created and deleted under us; try again")
        self._refuse_if_held(current)
        self._take_over(current)

    def renew(self) -> None:
        """Move renewTime to now. LeaseLost if another run took the Lease meanwhile."""
        with self._lock:
            self._renew()

    def _renew(self) -> None:
        if self._stored is None:
            raise ClusterError(f"{self.what}: renew() before acquire()")
        body = self._with_spec(self._stored, renewTime=micro_time(self.clock()))
        try:
            self._adopt(self._replace(body))
        except (Conflict, NotFound) as err:
            current = self._read()
            if current is None or _holder(current) != self.identity:
                self._stored = None
                holder = _holder(current) if current else "nobody (it was deleted)"
                raise LeaseLost(f"{self.what}: lost to {holder} while running") from err
            # Our own earlier write went through after all (a timed-out request): renew on it.
            self._adopt(self._replace(self._with_spec(current,
                                                      renewTime=micro_time(self.clock()))))

    def renew_if_due(self) -> None:
        """Renew when a third of the duration has passed since the last renewal; raise
        LeaseLost when the timer found the Lease lost (the run's waits call this)."""
        if self._lost is not None:
            raise self._lost
        with self._lock:
            if self._stored is not None and self._renewed_at is not None and (
                    self.clock() - self._renewed_at).total_seconds() >= \
                    self.duration_seconds / 3:
                self._renew()

    def keep_renewed(self) -> None:
        """Renew every third of the duration on a timer of the run's own, whatever its
        passes do: passes back to back never reach a wait, and a Lease renewed only in
        the waits expired under a busy run, which a second run then took over."""
        if self._renewer is not None:
            return
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_forever, daemon=True,
                                         name=f"renew {self.what}")
        self._renewer.start()

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.duration_seconds / 3):
            try:
                self.renew_if_due()
            except LeaseLost as err:
                self._lost = err
                return
            except ClusterError as err:  # the API server down a while: tried again
                log.warning("%s: not renewed (%s); trying again", self.what, err)

    def check(self) -> None:
        """Before a write: LeaseLost when the Lease was lost, or when it was not renewed
        for two thirds of its duration. A run that cannot renew stops writing before
        its Lease can expire and another run take it."""
        if self._lost is not None:
            raise self._lost
        with self._lock:
            renewed = self._renewed_at
        if renewed is None:
            return
        idle = (self.clock() - renewed).total_seconds()
        if idle > self.duration_seconds * 2 / 3:
            raise LeaseLost(f"{self.what}: not renewed for {idle:.0f} s of its "
                            f"{self.duration_seconds} s; stopping writes before it can expire")

    def release(self) -> None:
        """Clear the holder so that the next run need not wait for the Lease to expire."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=10)
            self._renewer = None
        if self._stored is None:
            return
        spec = {k: v for k, v in (self._stored.get("spec") or {}).items() if k != "holderIdentity"}
        body = {**self._stored, "spec": spec}
        self._stored = None
        try:
            self._replace(body)
        except ClusterError as err:
            # Not fatal: the Lease expires by itself; the next run just waits for that.
            log.warning("%s: could not release (%s); it expires in %ss", self.what, err,
                        self.duration_seconds)

    # -- helpers ---------------------------------------------------------------

    def _earlier_attempt_holds(self, lease: dict) -> bool:
        """Held, live, by another attempt of this same run (a retried pod's predecessor)."""
        holder = _holder(lease)
        expires = _expires_at(lease)
        return bool(self.run) and holder != self.identity and \
            holder.startswith(f"{self.run}/") and expires is not None and \
            expires > self.clock()

    def _wait_out(self, lease: dict) -> dict | None:
        """Wait until an earlier attempt's Lease expires, and return it as then read. A
        renewal meanwhile means that attempt is alive: the Lease is returned as it is, held,
        and refused as any live holder's is. At most one duration: a dead attempt's Lease
        expires by then."""
        while self._earlier_attempt_holds(lease):
            expires = _expires_at(lease)
            assert expires is not None  # checked by _earlier_attempt_holds
            log.info("%s: held by %s, an earlier attempt of this run; waiting until %s for "
                     "it to expire", self.what, _holder(lease),
                     expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
            self.sleep((expires - self.clock()).total_seconds() + 1)
            later = self._read()
            if later is None or _spec(later).get("renewTime") != _spec(lease).get("renewTime"):
                return later
            lease = later
        return lease

    def _refuse_if_held(self, current: dict) -> None:
        holder = _holder(current)
        if not holder or holder == self.identity:
            return
        expires = _expires_at(current)
        if expires is not None and expires > self.clock():
            ours = ", an earlier attempt of this run that is still renewing it" \
                if self.run and holder.startswith(f"{self.run}/") else ""
            raise LockHeld(f"{self.what} is held by {holder}{ours} until "
                           f"{expires.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        log.info("%s: taking over from %s, whose lease expired", self.what, holder)

    def _take_over(self, current: dict) -> None:
        now = micro_time(self.clock())
        spec = current.get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0)
        if _holder(current) != self.identity:
            transitions += 1
        body = self._with_spec(current, holderIdentity=self.identity, acquireTime=now,
                               renewTime=now, leaseDurationSeconds=self.duration_seconds,
                               leaseTransitions=transitions)
        try:
            self._adopt(self._replace(body))
        except Conflict as err:
            winner = self._read()
            holder = _holder(winner) if winner else "another run"
            raise LockHeld(f"{self.what} was just taken by {holder}") from err

    def _read(self) -> dict | None:
        try:
            return self.rest.request("GET", RESOURCE.path(self.namespace, self.name),
                                     what=self.what)
        except NotFound:
            return None

    def _create(self) -> dict | None:
        now = micro_time(self.clock())
        body = {
            "apiVersion": RESOURCE.api_version, "kind": RESOURCE.kind,
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "omegitops"}},
            "spec": {"holderIdentity": self.identity, "acquireTime": now, "renewTime": now,
                     "leaseDurationSeconds": self.duration_seconds, "leaseTransitions": 0},
        }
        try:
            return self.rest.request("POST", RESOURCE.path(self.namespace), what=self.what,
                                     body=body)
        except AlreadyExists:
            return None
        except NotFound as err:
            raise ClusterError(f"{self.what}: namespace {self.namespace} does not exist; create "
                               "it or set OMEGITOPS_NAMESPACE") from err

    def _replace(self, body: dict) -> dict:
        return self.rest.request("PUT", RESOURCE.path(self.namespace, self.name),
                                 what=self.what, body=body)

    def _adopt(self, stored: dict) -> None:
        self._stored = stored
        self._renewed_at = self.clock()

    @staticmethod
    def _with_spec(lease: dict, **fields) -> dict:
        return {**lease, "spec": {**(lease.get("spec") or {}), **fields}}


def _spec(lease: dict) -> dict:
    return lease.get("spec") or {}


def _holder(lease: dict) -> str:
    return _spec(lease).get("holderIdentity") or ""


def _expires_at(lease: dict) -> datetime | None:
    """renewTime (else acquireTime) + leaseDurationSeconds; None when it has neither time."""
    spec = lease.get("spec") or {}
    stamp = spec.get("renewTime") or spec.get("acquireTime")
    if not stamp:
        return None
    try:
        renewed = datetime.fromisoformat(stamp)
    except ValueError:
        return None  # an unreadable time: treat the lease as expired rather than stuck
    return renewed + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))
