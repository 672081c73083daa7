"""Holding SIGINT and SIGTERM back for a moment that must not be cut in half."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from omegitops.util.earlysignals import SIGNALS

# How many ``signals_held`` blocks the main thread is in, and the first signal that
# arrived during them.
_depth = 0
_pending: list[int] = []


def held(signum: int) -> bool:
    """True when a held block is running: ``signum`` is then kept for its end.

    The Python handlers ask this first. Blocking the signal in the main thread is not
    enough: a signal sent to the process goes to any thread that does not block it (a
    client's pool, a watch), and Python then runs the handler in the main thread at
    once, in the middle of the block.
    """
    if _depth == 0:
        return False
    if not _pending:
        _pending.append(signum)
    return True


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block runs and are delivered at its end.

    For steps that must happen whole or not at all whatever the moment of a signal:
    a temporary folder made and taken into the ``try`` that removes it, or its
    removal, which a signal stopping half-way would leave in ``$TMPDIR``. Only the
    main thread receives signals, so another thread's block holds nothing back.
    """
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if _depth == 0 and _pending:
            # Sent again to this thread, now that nothing holds it: the handler runs here.
            signal.raise_signal(_pending.pop())
