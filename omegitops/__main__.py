"""The omegitops command: ``python -m omegitops`` and the ``omegitops`` console script.

Signals are caught before the command line's modules are imported: a SIGTERM or
Ctrl-C from the first moment of the program is the run's, stops it in order and
never ends in a traceback (app/stopping.py).
"""

from omegitops.util import earlysignals

earlysignals.catch()


def main() -> int:
    import signal

    from omegitops.cli import main as run

    code = run()
    # The run is over and has said how it ended: the interpreter's teardown, which puts
    # the default handlers back, must not turn a late signal into a kill.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    return code


if __name__ == "__main__":
    raise SystemExit(main())
