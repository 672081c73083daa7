"""The Lease (``omegitops/cluster/lease.py``) on the real API server: one run at a time.

Acquiring, renewing and releasing the ``coordination.k8s.io/v1`` Lease, taking over
an expired one, losing a takeover race, and stopping writes before a Lease that cannot
be renewed may expire; ``KubeCluster`` taking it on enter and releasing it on exit. Each
test works in a namespace of its own on the session's control plane (the
``control_plane`` fixture of ``tests/conftest.py``), so these tests are marked
``controlplane`` and skipped with ``OMEGITOPS_CONTROLPLANE=skip``. The job's own runs
under the Lease are in ``tests/controlplane/`` (``test_job.py``, ``test_faults.py``,
``test_real_cluster_path.py``, ``test_watches.py``, ``test_sharded_job.py``).
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

import pytest

from omegitops.cluster.errors import LeaseLost, LockHeld
from omegitops.cluster.kube import KubeCluster
from omegitops.cluster.kube.resources import LEASE
from omegitops.cluster.kube.rest import Rest
from omegitops.cluster.lease import Lease

_namespaces = itertools.count()


@pytest.fixture
def ns(control_plane):
    """A namespace of the test's own, deleted when the test ends."""
    name = f"cp-lease-{next(_namespaces)}"
    control_plane.create_namespace(name, wait=True)
    yield name
    control_plane.delete("v1", "Namespace", None, name)


START = datetime(2026, 9, 27, 8, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def leases(control_plane, ns):
    """``leases(identity)``: a Lease handle in the test's namespace on one clock, each on
    its own connection, as two runs are; ``.clock`` moves them all, ``.stored()`` reads it."""
    clock = Clock()

    def make(identity: str) -> Lease:
        return Lease(Rest(control_plane.admin), ns, identity=identity, duration_seconds=60,
                     clock=clock)

    make.clock = clock
    make.stored = lambda: control_plane.get("coordination.k8s.io/v1", LEASE, ns, "omegitops")
    return make


def test_acquire_creates_the_lease_with_our_identity(leases):
    leases("host-a/1").acquire()
    spec = leases.stored()["spec"]
    assert spec["holderIdentity"] == "host-a/1"
    assert spec["leaseDurationSeconds"] == 60
    assert spec["renewTime"] == "2026-09-27T08:00:00.000000Z"


def test_a_live_holder_makes_the_second_run_fail_with_lock_held(leases, ns):
    leases("host-a/1").acquire()
    leases.clock.now += timedelta(seconds=30)
    with pytest.raises(LockHeld, match=rf"Lease/{ns}/omegitops is held by host-a/1 until "
                                       r"2026-09-27T08:01:00Z"):
        leases("host-b/2").acquire()


def test_an_expired_lease_is_taken_over(leases):
    leases("host-a/1").acquire()
    leases.clock.now += timedelta(seconds=61)
    leases("host-b/2").acquire()
    spec = leases.stored()["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("host-b/2", 1)
    assert spec["acquireTime"] == "2026-09-27T08:01:01.000000Z"


def test_renew_moves_renew_time(leases):
    held = leases("host-a/1")
    held.acquire()
    leases.clock.now += timedelta(seconds=45)
    held.renew()
    assert leases.stored()["spec"]["renewTime"] == "2026-09-27T08:00:45.000000Z"
    leases.clock.now += timedelta(seconds=45)  # 90 s after acquiring, but renewed 45 s ago
    with pytest.raises(LockHeld, match="until 2026-09-27T08:01:45Z"):
        leases("host-b/2").acquire()


def test_renew_if_due_waits_for_a_third_of_the_duration(leases):
    held = leases("host-a/1")
    held.acquire()
    version = leases.stored()["metadata"]["resourceVersion"]
    leases.clock.now += timedelta(seconds=10)
    held.renew_if_due()
    assert leases.stored()["metadata"]["resourceVersion"] == version  # not written
    leases.clock.now += timedelta(seconds=10)
    held.renew_if_due()
    assert leases.stored()["spec"]["renewTime"] == "2026-09-27T08:00:20.000000Z"


def test_renew_after_losing_the_lease_is_lease_lost(leases):
    held = leases("host-a/1")
    held.acquire()
    leases.clock.now += timedelta(seconds=120)  # we stalled past the expiry...
    leases("host-b/2").acquire()  # ...and another run took over
    with pytest.raises(LeaseLost, match="lost to host-b/2"):
        held.renew()
    assert not held.held


def test_release_clears_the_holder_so_the_next_run_need_not_wait(leases):
    with leases("host-a/1"):
        pass
    assert "holderIdentity" not in leases.stored()["spec"]
    leases("host-b/2").acquire()
    assert leases.stored()["spec"]["holderIdentity"] == "host-b/2"


def test_losing_a_takeover_race_names_the_winner(control_plane, leases, ns):
    """Between our GET and our PUT of the expired Lease, another run writes it: the API
    server refuses our PUT (its resourceVersion is stale), and the winner is named."""
    leases("host-a/1").acquire()
    leases.clock.now += timedelta(seconds=61)
    loser = leases("host-b/2")
    send = loser.rest.request
    other = Rest(control_plane.admin)

    def racing(method: str, path: str, **kwargs):
        if method == "PUT" and not getattr(racing, "done", False):
            racing.done = True
            stored = other.request("GET", path, what="host-c")
            stored["spec"]["holderIdentity"] = "host-c/3"
            other.request("PUT", path, body=stored, what="host-c")
        return send(method, path, **kwargs)

    loser.rest.request = racing
    with pytest.raises(LockHeld, match="just taken by host-c/3"):
        loser.acquire()
    assert leases.stored()["spec"]["holderIdentity"] == "host-c/3"


def test_kube_cluster_takes_the_lease_on_enter_and_releases_it_on_exit(control_plane, leases,
                                                                       ns):
    client = control_plane.admin
    with KubeCluster(api_client=client, lease_namespace=ns) as cluster:
        holder = leases.stored()["spec"]["holderIdentity"]
        assert holder == cluster.lease.identity
        second = KubeCluster(api_client=client, lease_namespace=ns)
        second.lease.identity = "other-host/2"  # the same host/pid would count as the holder
        with pytest.raises(LockHeld, match=f"held by {holder}"):
            second.__enter__()
    assert "holderIdentity" not in leases.stored()["spec"]


def test_the_lease_is_renewed_on_its_own_timer_while_passes_run_back_to_back(
        control_plane, ns):
    """Passes that never wait used to leave the Lease unrenewed until it expired and a
    second run took it over: it is renewed on a timer of the run's own."""
    lease = Lease(Rest(control_plane.admin), ns, identity="host-a/1", duration_seconds=3)
    lease.acquire()
    lease.keep_renewed()
    try:
        first = control_plane.get("coordination.k8s.io/v1", LEASE, ns, "omegitops")
        time.sleep(3.5)  # longer than the whole duration, the main thread busy
        later = control_plane.get("coordination.k8s.io/v1", LEASE, ns, "omegitops")
        assert later["spec"]["renewTime"] > first["spec"]["renewTime"]
        lease.check()  # renewed: writes may go on
        second = Lease(Rest(control_plane.admin), ns, identity="host-b/2", duration_seconds=3)
        with pytest.raises(LockHeld):
            second.acquire()
    finally:
        lease.release()


def test_a_run_that_cannot_renew_stops_writing_before_its_lease_can_expire(leases):
    """Two thirds of the duration without a renewal (the API server unreachable, say):
    every write is refused with LeaseLost before the Lease expires and another run may
    take it, so there is never a second writer."""
    held = leases("host-a/1")
    held.acquire()
    leases.clock.now += timedelta(seconds=30)
    held.check()
    leases.clock.now += timedelta(seconds=11)  # 41 s of 60 without a renewal
    with pytest.raises(LeaseLost, match="stopping writes before it can expire"):
        held.check()
    held.renew()
    held.check()


def test_a_retried_attempt_waits_out_its_predecessors_lease_and_takes_it_over(leases, ns,
                                                                              control_plane):
    """Argo retries a step whose pod was lost, 30 s later: the lost pod's Lease has not
    expired yet. The retry, an attempt of the same run, waits until it does, rather than
    exit 0 as "not running" with the run's work undone."""
    first = Lease(Rest(control_plane.admin), ns, run="wf-uid-1", identity="wf-uid-1/pod-a/1",
                  duration_seconds=60, clock=leases.clock)
    first.acquire()
    leases.clock.now += timedelta(seconds=30)
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        leases.clock.now += timedelta(seconds=seconds)

    retry = Lease(Rest(control_plane.admin), ns, run="wf-uid-1", duration_seconds=60,
                  clock=leases.clock, sleep=sleep)
    assert retry.identity.startswith("wf-uid-1/")
    retry.acquire()
    assert slept == [31.0]
    assert leases.stored()["spec"]["holderIdentity"] == retry.identity


def test_a_retry_whose_predecessor_still_renews_is_refused_and_another_run_never_waits(
        leases, ns, control_plane):
    first = Lease(Rest(control_plane.admin), ns, run="wf-uid-1", identity="wf-uid-1/pod-a/1",
                  duration_seconds=60, clock=leases.clock)
    first.acquire()

    def renewing_sleep(seconds: float) -> None:  # the first attempt is alive: it renews
        leases.clock.now += timedelta(seconds=seconds)
        first.renew()

    retry = Lease(Rest(control_plane.admin), ns, run="wf-uid-1", identity="wf-uid-1/pod-b/1",
                  duration_seconds=60, clock=leases.clock, sleep=renewing_sleep)
    with pytest.raises(LockHeld, match="an earlier attempt of this run that is still "
                                       "renewing it until 2026-09-27T08:02:01Z"):
        retry.acquire()

    def no_sleep(seconds: float) -> None:
        raise AssertionError("another run's Lease is not waited for")

    other = Lease(Rest(control_plane.admin), ns, run="wf-uid-2", duration_seconds=60,
                  clock=leases.clock, sleep=no_sleep)
    with pytest.raises(LockHeld, match="held by wf-uid-1/pod-a/1 until"):
        other.acquire()
