"""One run at a time on a real cluster: the coordination.k8s.io Lease."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from wire_helpers import EXAMPLES

from omegitops.cluster.errors import LeaseLost, LockHeld
from omegitops.cluster.kube import KubeCluster, plain_client
from omegitops.cluster.lease import Lease

NS = "omegitops"
START = datetime(2026, 9, 27, 8, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lease(kube, clock, identity: str) -> Lease:
    return Lease(kube.rest, NS, identity=identity, duration_seconds=60, clock=clock)


def test_acquire_creates_the_lease_with_our_identity(kube, api, clock):
    first = lease(kube, clock, "host-a/1")
    first.acquire()
    stored = api.get("Lease", NS, "omegitops")
    assert stored["spec"]["holderIdentity"] == "host-a/1"
    assert stored["spec"]["leaseDurationSeconds"] == 60
    assert stored["spec"]["renewTime"] == "2026-09-27T08:00:00.000000Z"


def test_a_live_holder_makes_the_second_run_fail_with_lock_held(kube, api, clock):
    lease(kube, clock, "host-a/1").acquire()
    clock.now += timedelta(seconds=30)
    with pytest.raises(LockHeld, match=r"Lease/omegitops/omegitops is held by host-a/1 until "
                                       r"2026-09-27T08:01:00Z"):
        lease(kube, clock, "host-b/2").acquire()


def test_an_expired_lease_is_taken_over(kube, api, clock):
    lease(kube, clock, "host-a/1").acquire()
    clock.now += timedelta(seconds=61)
    lease(kube, clock, "host-b/2").acquire()
    spec = api.get("Lease", NS, "omegitops")["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("host-b/2", 1)
    assert spec["acquireTime"] == "2026-09-27T08:01:01.000000Z"


def test_renew_moves_renew_time(kube, api, clock):
    held = lease(kube, clock, "host-a/1")
    held.acquire()
    clock.now += timedelta(seconds=45)
    held.renew()
    assert api.get("Lease", NS, "omegitops")["spec"]["renewTime"] == \
        "2026-09-27T08:00:45.000000Z"
    clock.now += timedelta(seconds=45)  # 90 s after acquiring, but renewed 45 s ago
    with pytest.raises(LockHeld, match="until 2026-09-27T08:01:45Z"):
        lease(kube, clock, "host-b/2").acquire()


def test_renew_if_due_waits_for_a_third_of_the_duration(kube, api, clock):
    held = lease(kube, clock, "host-a/1")
    held.acquire()
    clock.now += timedelta(seconds=10)
    held.renew_if_due()
    assert len(api.calls("update")) == 0
    clock.now += timedelta(seconds=10)
    held.renew_if_due()
    assert len(api.calls("update")) == 1


def test_renew_after_losing_the_lease_is_lock_held(kube, api, clock):
    held = lease(kube, clock, "host-a/1")
    held.acquire()
    clock.now += timedelta(seconds=120)  # we stalled past the expiry...
    lease(kube, clock, "host-b/2").acquire()  # ...and another run took over
    with pytest.raises(LeaseLost, match="lost to host-b/2"):
        held.renew()
    assert not held.held


def test_release_clears_the_holder_so_the_next_run_need_not_wait(kube, api, clock):
    with lease(kube, clock, "host-a/1"):
        pass
    assert "holderIdentity" not in api.get("Lease", NS, "omegitops")["spec"]
    lease(kube, clock, "host-b/2").acquire()
    assert api.get("Lease", NS, "omegitops")["spec"]["holderIdentity"] == "host-b/2"


def test_losing_a_takeover_race_names_the_winner(kube, api, clock):
    lease(kube, clock, "host-a/1").acquire()
    clock.now += timedelta(seconds=61)
    # Between our GET and PUT, host-c takes the expired lease: our PUT is stale.
    api.fail("PUT", r"/leases/omegitops$", status=409, reason="Conflict")
    api.modify("Lease", NS, "omegitops",
               lambda lease: lease["spec"].update(holderIdentity="host-c/3"))
    with pytest.raises(LockHeld, match="just taken by host-c/3"):
        lease(kube, clock, "host-b/2").acquire()


def test_kube_cluster_takes_the_lease_on_enter_and_releases_it_on_exit(api, monkeypatch):
    monkeypatch.setenv("OMEGITOPS_NAMESPACE", NS)
    client = plain_client(api.url)
    with KubeCluster(api_client=client) as cluster:
        holder = api.get("Lease", NS, "omegitops")["spec"]["holderIdentity"]
        assert holder == cluster.lease.identity
        second = KubeCluster(api_client=client)
        second.lease.identity = "other-host/2"  # the same host/pid would count as the holder
        with pytest.raises(LockHeld, match=f"held by {holder}"):
            second.__enter__()
    assert "holderIdentity" not in api.get("Lease", NS, "omegitops")["spec"]
    client.close()


def test_reconcile_while_another_run_holds_the_lease_exits_zero(cli, api, monkeypatch):
    monkeypatch.setenv("OMEGITOPS_KUBE_API", api.url)
    monkeypatch.setenv("OMEGITOPS_NAMESPACE", NS)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    api.add({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "omegitops", "namespace": NS},
             "spec": {"holderIdentity": "job-7/1", "renewTime": now,
                      "leaseDurationSeconds": 60}})
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube")
    assert code == 0
    assert "not running" in err and "held by job-7/1" in err
    assert api.objects("Pod") == []


def test_losing_the_lease_during_until_idle_reports_the_passes_done_and_fails(
        cli, api, monkeypatch, tmp_path):
    from omegitops import reconcile
    from omegitops.cluster.kube import KubeCluster

    monkeypatch.setenv("OMEGITOPS_KUBE_API", api.url)
    monkeypatch.setenv("OMEGITOPS_NAMESPACE", NS)
    # Look again every 50 ms, renewing the Lease each time: the pods never start on the
    # double, so the run keeps going until the Lease is gone.
    monkeypatch.setattr(KubeCluster, "poll_seconds", 0.05)
    monkeypatch.setattr(Lease, "renew_if_due", Lease.renew)
    passes = []
    real_pass = reconcile.run_pass

    def pass_then_lose(*args, **kwargs):
        result = real_pass(*args, **kwargs)
        passes.append(result)
        if len(passes) == 2:  # another run takes over, as after a stall past the expiry
            api.modify("Lease", NS, "omegitops",
                       lambda lease: lease["spec"].update(holderIdentity="job-9/1"))
        return result

    monkeypatch.setattr(reconcile, "run_pass", pass_then_lose)
    report = tmp_path / "status"
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", "kube",
                       "--until-idle", "--max-seconds", "60", "--report-dir", str(report))
    assert code == 1
    lost = [line for line in err.splitlines() if "lost to" in line]
    assert lost == [("omegitops: error: Lease/omegitops/omegitops: lost to job-9/1 while "
                     "running; stopped after 2 passes")]
    assert "not running" not in err
    assert (report / "STATUS.md").is_file() and (report / "status.json").is_file()
    # The Lease is left to its new holder.
    assert api.get("Lease", NS, "omegitops")["spec"]["holderIdentity"] == "job-9/1"
