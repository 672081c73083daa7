"""Batches side by side, each in order (omegitops/app/batches.py): what a pass's writes
on a real API server go through."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from omegitops.app.batches import in_batches


class Fatal(Exception):
    pass


def test_outcomes_come_in_the_batches_order_each_batch_in_its_own_order():
    started: dict[str, list[int]] = {}
    lock = threading.Lock()

    def work(item):
        name, number = item
        time.sleep(0.01 * (3 - number))  # later items end sooner: order is not by luck
        with lock:
            started.setdefault(name, []).append(number)
        return f"{name}{number}"

    batches = [[("a", n) for n in range(3)], [("b", n) for n in range(3)], [("c", 0)]]
    outcomes = in_batches(batches, work, workers=3)
    assert outcomes == [(item, f"{item[0]}{item[1]}") for batch in batches for item in batch]
    assert started == {"a": [0, 1, 2], "b": [0, 1, 2], "c": [0]}


def test_batches_run_side_by_side_on_the_workers():
    # Each batch waits for the two others at a barrier: only workers side by side pass it.
    barrier = threading.Barrier(3, timeout=10)
    outcomes = in_batches([[1], [2], [3]], lambda item: barrier.wait() is not None, workers=3)
    assert outcomes == [(1, True), (2, True), (3, True)]


def test_one_worker_runs_the_batches_in_the_callers_thread_one_after_the_other():
    threads = set()
    outcomes = in_batches([[1, 2], [3]], lambda item: threads.add(threading.get_ident()),
                          workers=1)
    assert [item for item, _ in outcomes] == [1, 2, 3]
    assert threads == {threading.get_ident()}


def test_an_error_is_its_items_outcome_and_its_batch_goes_on():
    def work(item):
        if item == 2:
            raise ValueError("two")
        return item

    outcomes = in_batches([[1, 2, 3], [4]], work, workers=2)
    assert [item for item, _ in outcomes] == [1, 2, 3, 4]
    assert isinstance(outcomes[1][1], ValueError) and outcomes[2] == (3, 3)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_fatal_error_stops_every_batch_before_its_next_item_and_is_raised(workers):
    ran: list[str] = []
    lost = threading.Event()
    under_way = threading.Event()

    def work(item):
        ran.append(item)
        if item == "a0":
            if workers > 1:
                under_way.wait(10)  # b0 has started: it ends, b1 does not start
            lost.set()
            raise Fatal(item)
        if item == "b0" and workers > 1:
            under_way.set()
            lost.wait(10)
            time.sleep(0.05)
        return item

    with pytest.raises(Fatal, match="a0"):
        in_batches([["a0", "a1"], ["b0", "b1"]], work, workers, fatal=(Fatal,))
    assert sorted(ran) == (["a0", "b0"] if workers > 1 else ["a0"])


def test_a_signal_in_the_caller_waits_for_the_items_under_way_and_starts_no_other():
    """SIGTERM raises in the main thread while it waits: the item under way in each batch
    ends before the exception leaves, and no later item starts (no write of the pass
    comes after the run has moved on to its report and its Lease)."""
    class Stop(BaseException):
        pass

    def handler(signum, frame):
        raise Stop

    ended: list[str] = []
    ran: list[str] = []
    both = threading.Barrier(2, timeout=10)

    def work(item):
        ran.append(item)
        if item in ("a0", "b0"):
            both.wait()  # both batches have an item under way
        if item == "a0":
            os.kill(os.getpid(), signal.SIGUSR1)  # handled in the main thread, which waits
        time.sleep(0.2)
        ended.append(item)
        return item

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(Stop):
            in_batches([["a0", "a1"], ["b0", "b1"]], work, workers=2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert sorted(ran) == ["a0", "b0"]
    assert sorted(ended) == ["a0", "b0"]  # ended before the exception left in_batches
