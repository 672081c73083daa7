"""One module per command-line verb; each registers its own subparser."""

from omegitops.commands import (
    events,
    get,
    instance,
    merge_reports,
    plan,
    reconcile,
    resolve,
    rollout,
    sim,
    validate,
)

COMMANDS = [validate, resolve, plan, reconcile, merge_reports, get, instance, rollout, events,
            sim]
