"""How often the scheduled job runs, and for how long: what a rollout's forecast is paced by.

The shipped pipelines (``pipelines/cronjob/cronjob.yaml``, ``pipelines/argo/``) run
``reconcile --until-idle --max-seconds 900`` every five minutes, one run at a
time (``concurrencyPolicy: Forbid``): a rollout longer than one run's budget goes on
in the next run, which starts at the first schedule tick after the last one ended.
``tests/project/test_pipelines.py`` holds ``SHIPPED`` to those files. Pure.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cronsim import CronSim, CronSimError

from omegitops.util.errors import UsageError

SHIPPED_SCHEDULE = "*/5 * * * *"
SHIPPED_JOB_SECONDS = 900.0

# The macros a CronJob's schedule accepts, as cron fields.
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}
# The ticks a schedule's interval is measured over: enough for a week of a dense
# schedule (the weekend a working-days schedule skips) and a year of a sparse one.
TICKS, SPAN = 10_000, timedelta(days=400)
# Any fixed moment: the longest wait between two runs does not depend on it (a Monday).
ANCHOR = datetime(2026, 1, 5, tzinfo=UTC)


@dataclass(frozen=True)
class Cadence:
    """Runs ``job_seconds`` long at most, started every ``period`` seconds (the
    schedule's interval), never two at once."""

    schedule: str
    period: float
    job_seconds: float

    def next_start(self, first_start: float, ended: float) -> float:
        """The first schedule tick after a run that ended at ``ended`` (a tick while it
        ran was skipped), counting ticks from ``first_start``."""
        ticks = math.floor((ended - first_start) / self.period) + 1
        return first_start + ticks * self.period

    def describe(self) -> str:
        return (f"schedule `{self.schedule}`, each run `reconcile --until-idle --max-seconds "
                f"{self.job_seconds:.0f}`, one at a time")


def cadence(schedule: str = SHIPPED_SCHEDULE,
            job_seconds: float = SHIPPED_JOB_SECONDS) -> Cadence:
    """The cadence of a CronJob schedule: any that Kubernetes accepts (five fields, the
    macros, a ``CRON_TZ=`` prefix), read by cronsim. Its period is the longest wait
    between two ticks, which bounds the forecast: ``0,30 * * * *`` is every 30 minutes,
    ``*/7 * * * *`` every 7 (the 56th minute to the hour waits 4), ``0 9 * * 1-5`` has
    the weekend's 72 hours. UsageError for one that is not a schedule."""
    if job_seconds <= 0:
        raise UsageError(f"--job-seconds {job_seconds:g}: give a positive budget")
    period = _longest_wait(schedule)
    return Cadence(schedule, period, job_seconds)


@functools.cache  # the same schedule is read for every plan of a run
def _longest_wait(schedule: str) -> float:
    fields = schedule.split()
    if fields and fields[0].startswith(("CRON_TZ=", "TZ=")):
        fields = fields[1:]  # the zone moves the ticks, not the waits between them
    expression = MACROS.get(" ".join(fields).lower(), " ".join(fields))
    try:
        ticks = CronSim(expression, ANCHOR)
        previous, longest, count = next(ticks), 0.0, 1
        for tick in ticks:
            longest = max(longest, (tick - previous).total_seconds())
            previous, count = tick, count + 1
            if count >= TICKS or tick - ANCHOR > SPAN:
                break
    except (CronSimError, StopIteration) as err:
        detail = str(err) or "it never runs"
        raise UsageError(f"--schedule {schedule!r} is not a cron schedule ({detail}); "
                         "such as '*/5 * * * *'") from None
    if longest <= 0:
        raise UsageError(f"--schedule {schedule!r} runs once a year at most: give one that "
                         "repeats, such as '*/5 * * * *'")
    return longest
