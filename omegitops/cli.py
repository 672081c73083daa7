"""Command-line entry point: argument parsing and output only.

Each verb lives in its own module under ``omegitops.commands`` and exposes
``register(subparsers)``; the module sets ``func`` on its parser, which
takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import sys

from omegitops import __version__
from omegitops.app.stopping import Interrupted, interrupted_by, orderly_stop
from omegitops.commands import COMMANDS, completion, examples
from omegitops.util.errors import OmegitopsError, UsageError, os_error_text
from omegitops.util.logformat import FORMATS, formatter

log = logging.getLogger("omegitops")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omegitops",
        description="Reconcile OME OMENative InferenceServices from a Git repository.",
    )
    parser.add_argument("--version", action="version", version=f"omegitops {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("--log-format", choices=FORMATS, default=_default_log_format(),
                        help="log lines on stderr as LEVEL message (text) or one JSON "
                             "object each (json); default: $OMEGITOPS_LOG_FORMAT, else text")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    # Last: its script describes every command registered above.
    completion.register(subparsers, parser)
    examples.attach(parser)
    _kubectl_habits(parser, top=True)
    return parser


def _kubectl_habits(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """Every parser, nested ones too: no abbreviated flags (``--pru`` is not ``--prune``),
    and ``-v`` taken anywhere on the line, before or after the command."""
    parser.allow_abbrev = False
    children = [action for action in parser._actions
                if isinstance(action, argparse._SubParsersAction)]
    if not top and not children:
        # SUPPRESS: a -v before the command is not reset by the command's parser.
        parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help="debug logging on stderr")
        parser.add_argument("--log-format", choices=FORMATS, default=argparse.SUPPRESS,
                            help="text or json log lines (see omegitops --help)")
    for action in children:
        for child in set(action.choices.values()):
            _kubectl_habits(child)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (tests run many CLIs in-process)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _default_log_format() -> str:
    """$OMEGITOPS_LOG_FORMAT when it names a format: a job's pod sets it once."""
    wanted = os.environ.get("OMEGITOPS_LOG_FORMAT", "").strip().lower()
    return wanted if wanted in FORMATS else "text"


def _log_to_stderr(level: int, kind: str = "text") -> None:
    """One handler on the ``omegitops`` logger; records still propagate, so a caller's
    own handlers (pytest's caplog, say) see them too."""
    logger = logging.getLogger("omegitops")
    for handler in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(formatter(kind))
    logger.addHandler(handler)
    logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # a usage error (2), or --help and --version (0)
        return exit_.code if isinstance(exit_.code, int) else 2
    _tolerant_output()
    _log_to_stderr(logging.DEBUG if args.verbose else logging.INFO, args.log_format)
    with orderly_stop() as stop:
        if stop.signum is not None:  # before the command started
            print(f"omegitops: interrupted by {signal.Signals(stop.signum).name}",
                  file=sys.stderr)
            return 128 + stop.signum
        code: int = _run(args)
    if stop.signum is not None and code < 128:
        # A signal that came while the run finished its writes (app/stopping.py).
        print(f"omegitops: stopped by {signal.Signals(stop.signum).name} once what was under "
              "way had been written", file=sys.stderr)
        return 128 + stop.signum
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        code = args.func(args)
        # A reader that went away (`| head -1`) shows here, not in Python's flush at exit.
        sys.stdout.flush()
        return code
    except (KeyboardInterrupt, Interrupted) as stop_signal:
        # Outside the passes, which stop in order by themselves (app/run.py).
        signum = interrupted_by(stop_signal)
        print(f"omegitops: interrupted by {signal.Signals(signum).name}",
              file=sys.stderr)
        return 128 + signum
    except UsageError as err:
        print(f"omegitops: error: {err}", file=sys.stderr)
        return 2
    except OmegitopsError as err:
        log.debug("failed", exc_info=True)
        print(f"omegitops: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # What was to be printed was not: no success, whatever the command found (git and
        # grep die of SIGPIPE here). Output goes nowhere from now on, so that the
        # interpreter's own flush at exit stays quiet.
        _stdout_to_devnull()
        return 1
    except OSError as err:
        # The last boundary for what the system refused and no module reported in its
        # own words: standard output on a full disk (`> /dev/full`), a path the kernel
        # finds too long, a folder that cannot be written.
        log.debug("failed", exc_info=True)
        if err.filename is None and _stdout_refuses():
            print(f"omegitops: error: cannot write the output: {err.strerror or err}",
                  file=sys.stderr)
            _stdout_to_devnull()
        else:
            print(f"omegitops: error: {os_error_text(err)}", file=sys.stderr)
        return 1


def _stdout_refuses() -> bool:
    """Whether standard output cannot be written: what waits in its buffer cannot be
    flushed, or an empty write fails (``/dev/full`` refuses even that)."""
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), b"")
    except io.UnsupportedOperation:  # a test's capture, not a real stream
        return False
    except OSError:
        return True
    except (AttributeError, ValueError):  # closed, or no file behind it
        return False
    return False


def _tolerant_output() -> None:
    """Characters the output's encoding cannot show (a repository path with a `ü` on an
    ASCII or `LC_ALL=C` terminal) are escaped, as Python escapes them on stderr,
    instead of failing the command after its work was done."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            reconfigure(errors="backslashreplace")


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a test's capture, not a real stream
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
