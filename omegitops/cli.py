"""Command-line entry point: argument parsing and output only.

Each verb lives in its own module under ``omegitops.commands`` and exposes
``register(subparsers)``; the module sets ``func`` on its parser, which
takes the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys

from omegitops import __version__
from omegitops.commands import COMMANDS
from omegitops.errors import OmegitopsError, UsageError

log = logging.getLogger("omegitops")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omegitops",
        description="Reconcile OME OMENative InferenceServices from a Git repository.",
    )
    parser.add_argument("--version", action="version", version=f"omegitops {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return args.func(args)
    except UsageError as err:
        print(f"omegitops: error: {err}", file=sys.stderr)
        return 2
    except OmegitopsError as err:
        log.debug("failed", exc_info=True)
        print(f"omegitops: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
