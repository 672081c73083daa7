"""The first SIGTERM stops the passes wherever it lands (omegitops/app/stopping.py),
a finalizer included: an exception raised in a ``__del__`` is printed as "Exception
ignored" and lost, which once let a run go on to its end with a traceback on stderr
(tests/app/test_signals_any_moment.py met it at one of its random moments)."""

from __future__ import annotations

import os
import signal
import sys
import time
import weakref

import pytest

from omegitops.app.stopping import Interrupted, orderly_stop


def _signalled() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:  # the handler runs here, inside the finalizer
        pass


class _SignalledWhileFinalized:
    """An object whose finalizer is running when SIGTERM is handled."""

    def __del__(self) -> None:
        _signalled()


class _Watched:
    pass


def _dropped_del():
    _SignalledWhileFinalized()  # dropped at once: its __del__ runs here


def _dropped_finalize():
    watched = _Watched()
    weakref.finalize(watched, _signalled)  # running when SIGTERM is handled
    del watched  # its finalize callback runs here


@pytest.mark.parametrize("dropped", [_dropped_del, _dropped_finalize],
                         ids=["__del__", "weakref.finalize"])
def test_a_signal_handled_in_a_finalizer_stops_the_run_once_the_finalizer_returns(dropped):
    ignored = []
    hook, sys.unraisablehook = sys.unraisablehook, ignored.append
    try:
        with orderly_stop() as stop, pytest.raises(Interrupted):
            dropped()
            time.sleep(10)  # what the run does next: the signal comes again, and stops it
    finally:
        sys.unraisablehook = hook
    assert ignored == []
    assert stop.signum == signal.SIGTERM
