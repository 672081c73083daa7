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
