"""One module per command-line verb; each registers its own subparser."""

from omegitops.commands import get, reconcile, resolve, sim, validate

COMMANDS = [validate, resolve, reconcile, get, sim]
