"""One module per command-line verb; each registers its own subparser."""

from omegitops.commands import events, get, instance, plan, reconcile, resolve, sim, validate

COMMANDS = [validate, resolve, plan, reconcile, get, instance, events, sim]
