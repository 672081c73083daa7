"""Pausing Python's cyclic garbage collector around the big phases of a pass.

A pass allocates hundreds of thousands of small dicts and lists (a copy of
every pod, the Instance rows, the templates) while a large heap of long-lived
objects (the loaded manifests, on ``sim:`` the whole simulated cluster) is
alive. Allocation counts then trigger full collections that walk that whole
heap, again and again, for no garbage: the data is acyclic and reference
counting frees it. On a 1,000-service fleet that was a third of a pass.
Pausing the collector changes no result.

A pause alone only puts the cost off: every object made meanwhile is young
when the collector runs again, so its first collection walks them all, and the
one after it (of the middle generation) walks them again, seconds at 10,000
services. What a phase leaves behind lives as long as the pass (the manifests,
the cluster's objects, the plans), so when the last pause ends its survivors are
frozen (``gc.freeze``): moved where no automatic collection walks them.
Reference counting still frees each of them when the pass lets go of it; what
freezing gives up is finding cycles among them, and a pass makes none
(tests/util/test_gcpause.py holds a whole pass to that).
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


# The collector is one per process: blocks in several threads (a LIST per kind at
# once) share one pause, which ends with the last of them.
_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block; nests, in one thread or across
    several. Once the last block ends, what its phases left alive is frozen and the
    collector restored to what it was."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.freeze()
                gc.enable()


def without_gc_pauses(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of ``gc_paused``."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with gc_paused():
            return func(*args, **kwargs)

    return wrapper
