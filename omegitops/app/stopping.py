"""How a run stops on SIGINT or SIGTERM, at any moment.

The first signal stops what is under way: SIGINT raises KeyboardInterrupt and
SIGTERM (a pod's termination, a CI job's cancellation) raises ``Interrupted``, both
BaseExceptions, so that no error boundary of one component (``except Exception``)
takes it for that component's failure. The passes catch it (``app/run.py``); before
the first pass nothing was applied and the command stops there. Every later signal,
and every signal once the passes are over (``defer``), is only recorded: what the
passes applied is saved, the report written and pushed, and the run then exits
128 + the first signal's number. A signal never cuts the save, the report or the
push in half, and never ends in a traceback. One that comes while a finalizer runs
(where an exception is printed and lost) is raised a moment later, outside it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import weakref
from collections.abc import Iterator
from types import FrameType

from omegitops.util import earlysignals, signalmask

log = logging.getLogger("omegitops")

SIGNALS = earlysignals.SIGNALS


class Interrupted(BaseException):
    """SIGTERM, handled as Ctrl-C is: a BaseException, as KeyboardInterrupt is."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class OrderlyStop:
    """The process's SIGINT and SIGTERM handlers while a command runs."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.deferring = False
        self._previous: dict[int, object] = {}

    def defer(self) -> None:
        """From now on a signal is recorded, not raised: the run finishes its writes."""
        self.deferring = True

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if signalmask.held(signum):  # a moment that must not be cut: it comes at its end
            return
        first = self.signum is None
        if first:
            self.signum = signum
        if self.deferring:
            if first:
                log.warning("%s received: finishing the writes under way, then stopping",
                            signal.Signals(signum).name)
            return
        if _in_finalizer(_frame):
            # Raised in a finalizer (a ``__del__`` that a reference count or the collector
            # ran at this moment), the exception would be printed as "Exception ignored"
            # and lost, and the passes would go on. The signal comes again in a moment,
            # and is raised then, once the finalizer has returned.
            _send_again(signum)
            return
        # One exception per run: whatever comes next waits for the writes to finish.
        self.deferring = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signum)


# How long a signal that came during a finalizer waits to be sent again.
RESEND_SECONDS = 0.05


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs in a finalizer, or in what one called: a ``__del__``, or a
    ``weakref.finalize`` callback (whose exceptions are dropped the same way)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code is _FINALIZE_CALL:
            return True
        frame = frame.f_back
    return False


# The frame a weakref.finalize callback runs under, when the object it watches goes.
_FINALIZE_CALL = weakref.finalize.__call__.__code__


def _send_again(signum: int) -> None:
    """Send ``signum`` to this process again shortly, from a timer's thread: sent from
    the handler itself, it would be handled at once, still inside the finalizer."""
    timer = threading.Timer(RESEND_SECONDS, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


_active: OrderlyStop | None = None


@contextlib.contextmanager
def orderly_stop() -> Iterator[OrderlyStop]:
    """Handle SIGINT and SIGTERM as above while the block runs (in the main thread; a
    command run from another thread keeps the handlers it has)."""
    global _active
    stop = OrderlyStop()
    # A signal while the program started: the command does not start.
    stop.signum = earlysignals.take()
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, stop._handle) for s in SIGNALS} if main else {}
    outer, _active = _active, stop
    try:
        yield stop
    finally:
        _active = outer
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def defer_signals() -> None:
    """The passes are over (or were stopped): signals now wait for the writes."""
    if _active is not None:
        _active.defer()


def interrupted_by(err: BaseException) -> int:
    """The signal a KeyboardInterrupt or ``Interrupted`` stands for."""
    return getattr(err, "signum", signal.SIGINT)
