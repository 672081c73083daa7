"""The cyclic collector's pause around a pass's big phases: nested, and across threads."""

from __future__ import annotations

import gc
import threading

import pytest

from omegitops.util.gcpause import gc_paused, without_gc_pauses


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_a_pause_nests_and_restores_what_was():
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()  # off before, off after


def test_blocks_in_several_threads_share_one_pause_that_ends_with_the_last():
    """Two LISTs side by side: the first to finish must not turn the collector back on
    under the other."""
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with gc_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with gc_paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_the_decorator_pauses_and_an_error_still_ends_the_pause():
    @without_gc_pauses
    def fails():
        assert not gc.isenabled()
        raise ValueError("no")

    with pytest.raises(ValueError):
        fails()
    assert gc.isenabled()


def test_what_a_pause_leaves_alive_is_frozen_out_of_later_collections():
    before = gc.get_freeze_count()
    with gc_paused():
        kept = [{"pods": [n]} for n in range(1000)]  # a dict of lists is tracked
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(obj is kept for obj in gc.get_objects())
    gc.disable()
    with gc_paused():
        unfrozen = [{"pods": [n]} for n in range(10)]
    gc.enable()
    assert any(obj is unfrozen for obj in gc.get_objects())  # off before: nothing frozen


def test_passes_make_no_cycles_so_freezing_what_they_leave_loses_nothing(tmp_path):
    """Load, resolve, passes until idle (Instances created, pods made ready, rows
    written) and the report, with the collector off: nothing they leave behind is
    reachable only through a cycle. Freezing the survivors of a pause (above) relies on
    it: a cycle among frozen objects would never be freed."""
    from omegitops.app.untilidle import IDLE, run_until_idle
    from omegitops.cluster.sim import SimCluster
    from omegitops.manifests.load import load, resolved_components
    from omegitops.report.status import build_report, report_events
    from tests.conftest import EXAMPLES

    SimCluster.init(tmp_path / "cluster.json")
    gc.collect()
    gc.disable()
    try:
        with SimCluster(tmp_path / "cluster.json") as cluster:
            loaded = load(EXAMPLES)
            items = resolved_components(loaded)
            passes = []
            assert run_until_idle(cluster, items, 3600, passes.append) == IDLE
            replicas = [passes[-1].replicas[key] for key in sorted(passes[-1].replicas)]
            build_report(loaded, replicas, report_events(cluster), cluster.now())
        del loaded, items, passes, replicas
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cycles = [type(obj).__name__ for obj in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cycles == []
