"""One module per command-line verb; each registers its own subparser."""

from omegitops.commands import resolve, validate

COMMANDS = [validate, resolve]
