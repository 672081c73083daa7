"""Batches of work side by side, each batch's items one after the other.

A pass applies many components' plans, and on a real API server each write waits its
turn there: one plan after another, the run waits on the server for nearly all its time
while the server has room for more. The Deployment and ReplicaSet controllers write
from several workers for that reason (kube-controller-manager's
``--concurrent-deployment-syncs``, 5). Here a batch is what must stay in order (one
InferenceService's components: their events, their rollout group); batches go side by
side on ``workers`` threads.

What stops the others: an item whose work raises one of ``fatal`` (the Lease lost) ends
every batch before its next item, and the first such exception is raised once all
workers have stopped; so is a signal in the calling thread (only the main thread
receives them), which is raised after the items under way have ended, so that no write
of this pass happens after the run has moved on to its report and its Lease. Any other
exception is that item's outcome, and its batch goes on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
O = TypeVar("O")

# How often the calling thread wakes while the batches run, to take a signal.
WAKE_SECONDS = 0.1


def in_batches(batches: Iterable[list[T]], work: Callable[[T], R], workers: int,
               fatal: tuple[type[BaseException], ...] = ()) -> list[tuple[T, R | Exception]]:
    """Each item with what ``work`` returned for it or the Exception it raised, in the
    batches' order whatever order they ran in. Items a fatal exception kept from
    starting are left out (that exception is raised)."""
    batches = [batch for batch in batches if batch]
    stop = threading.Event()
    raised: list[BaseException] = []

    def run(batch: list[T]) -> list[tuple[T, R | Exception]]:
        outcomes: list[tuple[T, R | Exception]] = []
        for item in batch:
            if stop.is_set():
                break
            try:
                outcomes.append((item, work(item)))
            except fatal as err:
                raised.append(err)
                stop.set()
                break
            except Exception as err:  # noqa: BLE001 - the item's outcome, its batch goes on
                outcomes.append((item, err))
            except BaseException as err:  # noqa: BLE001 - raised below, once all have ended
                # A signal (in the caller's thread, working alone) or anything else that
                # is no item's failure: it ends every batch, as a fatal error does.
                raised.append(err)
                stop.set()
                break
        return outcomes

    if workers <= 1 or len(batches) < 2:
        done = [run(batch) for batch in batches]
    else:
        done = _side_by_side(batches, run, min(workers, len(batches)), stop)
    if raised:
        raise raised[0]
    return [outcome for outcomes in done for outcome in outcomes]


def _side_by_side(batches: list[list[T]], run: Callable[[list[T]], list[O]], workers: int,
                  stop: threading.Event) -> list[list[O]]:
    """``run`` of each batch on ``workers`` threads of its own. Not a ThreadPoolExecutor:
    an exception in this thread while it starts one (a signal) can leave a started
    thread out of the pool's own list, and its shutdown would not wait for it. Here each
    worker counts itself in before it takes any batch, and the exception waits until
    none is left counted: one counted in later finds ``stop`` set and takes nothing."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for number in range(len(batches)):
        todo.put(number)
    done: list[list[O]] = [[] for _ in batches]
    active = 0
    changed = threading.Condition()

    def worker() -> None:
        nonlocal active
        with changed:
            active += 1
        try:
            while not stop.is_set():
                try:
                    number = todo.get_nowait()
                except queue.Empty:
                    return
                done[number] = run(batches[number])
        finally:
            with changed:
                active -= 1
                changed.notify_all()

    threads = [threading.Thread(target=worker, name=f"apply-{n}", daemon=True)
               for n in range(workers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            # In steps: a signal the kernel gave another thread only runs its handler
            # here once this thread wakes (an endless join would wait for every batch).
            while thread.is_alive():
                thread.join(WAKE_SECONDS)
    except BaseException:
        # A signal in this thread: the items under way end, no other starts.
        stop.set()
        with changed:
            changed.wait_for(lambda: active == 0)
        raise
    return done
