"""Pausing Python's cyclic garbage collector around the big phases of a pass.

A pass allocates hundreds of thousands of small dicts and lists (a copy of
every pod, the Instance rows, the templates) while a large heap of long-lived
objects (the loaded manifests, on ``sim:`` the whole simulated cluster) is
alive. Allocation counts then trigger full collections that walk that whole
heap, again and again, for no garbage: the data is acyclic and reference
counting frees it. On a 1,000-service fleet that was a third of a pass.
Pausing the collector changes no result; cycles made meanwhile (there are
few, if any) are collected as usual once it runs again.
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
    several, and restores what was once the last block ends."""
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
                gc.enable()


def without_gc_pauses(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of ``gc_paused``."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with gc_paused():
            return func(*args, **kwargs)

    return wrapper
