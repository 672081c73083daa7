"""One module per command-line verb; each registers its own subparser."""

from omegitops.commands import events, get, instance, reconcile, resolve, sim, validate

COMMANDS = [validate, resolve, reconcile, get, instance, events, sim]
