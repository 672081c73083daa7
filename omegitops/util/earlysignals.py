"""SIGINT and SIGTERM recorded from the program's first moment.

The entry point (``omegitops/__main__.py``) installs these handlers before it imports
anything else, so that a signal while the program starts is recorded instead of
killing it or ending in a traceback; ``app.stopping.orderly_stop`` then takes over
and stops the command in order. Only ``signal`` is imported here, to keep the time
before the handlers are in place short.
"""

import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The first signal received before ``orderly_stop`` took over.
received: list[int] = []


def catch() -> None:
    """Record SIGINT and SIGTERM from now on (call it from the main thread)."""
    for signum in SIGNALS:
        signal.signal(signum, _record)


def _record(signum: int, _frame: object) -> None:
    if not received:
        received.append(signum)


def take() -> int | None:
    """The signal received so far, if any; forgotten once taken."""
    return received.pop() if received else None
