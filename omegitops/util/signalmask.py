"""Holding SIGINT and SIGTERM back for a moment that must not be cut in half."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from omegitops.util.earlysignals import SIGNALS


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block runs and are delivered at its end.

    For steps that must happen whole or not at all whatever the moment of a signal:
    a temporary folder made and taken into the ``try`` that removes it, or its
    removal, which a signal stopping half-way would leave in ``$TMPDIR``. Only the
    main thread receives signals, so another thread's block holds nothing back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
