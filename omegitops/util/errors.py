"""The project's exception tree. Each error prints as one line for the user."""

import os
import sys
from collections.abc import Iterable
from typing import Any


class OmegitopsError(Exception):
    """Base of every error the command line turns into a message and exit code 1."""


class InputError(OmegitopsError):
    """A manifest, values file or repository that cannot be used as given."""


class OperatorConfigError(InputError):
    """An invalid operator setting; stops the run before anything is touched."""


class ClusterError(OmegitopsError):
    """The cluster could not be read or written."""


class UsageError(OmegitopsError):
    """The command line asks for something that cannot be done (exit code 2)."""


def print_errors(errors: Iterable[Any]) -> None:
    """Each error on standard error, as every command prints them: ``error: ...``."""
    for error in errors:
        print(f"error: {error}", file=sys.stderr)


# A path in a message is cut to this many characters: a 100,000-character argument
# must not fill the terminal.
SHOWN_PATH_CHARS = 200


def os_error_text(err: OSError) -> str:
    """One line for an OSError: the path (cut short when long), then the system's words."""
    reason = err.strerror or str(err)
    if err.filename is None:
        return reason
    path = os.fsdecode(err.filename) if isinstance(err.filename, bytes) else str(err.filename)
    if len(path) > SHOWN_PATH_CHARS:
        path = f"{path[:SHOWN_PATH_CHARS // 2]}...{path[-40:]} ({len(path)} characters)"
    return f"{path}: {reason}"
