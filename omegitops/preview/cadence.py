"""How often the scheduled job runs, and for how long: what a rollout's forecast is paced by.

The shipped pipelines (``pipelines/cronjob.yaml``, ``pipelines/argo/``) run
``reconcile --until-idle --max-seconds 900`` every five minutes, one run at a
time (``concurrencyPolicy: Forbid``): a rollout longer than one run's budget goes on
in the next run, which starts at the first schedule tick after the last one ended.
``tests/project/test_pipelines.py`` holds ``SHIPPED`` to those files. Pure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from omegitops.util.errors import UsageError

SHIPPED_SCHEDULE = "*/5 * * * *"
SHIPPED_JOB_SECONDS = 900.0

# The minute field of a schedule whose other fields are all "*": "*" (every minute),
# "*/N", or a list of minutes ("0,30").
_EVERY = re.compile(r"^(\*|\*/(?P<step>\d+)|(?P<list>\d+(,\d+)*))$")


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
    """The cadence of a cron schedule that repeats every so many minutes; UsageError for
    one that does not (a day-of-week schedule has no single interval)."""
    fields = schedule.split()
    match = _EVERY.match(fields[0]) if len(fields) == 5 else None
    if match is None or any(f != "*" for f in fields[1:]):
        raise UsageError(f"--schedule {schedule!r}: give a schedule that repeats every few "
                         "minutes, such as '*/5 * * * *' (minute field '*', '*/N' or "
                         "'M,M', the others '*')")
    if match["step"]:
        minutes = int(match["step"])
    elif match["list"]:
        marks = sorted({int(m) for m in match["list"].split(",")})
        gaps = [b - a for a, b in zip(marks, marks[1:] + [marks[0] + 60], strict=True)]
        minutes = max(gaps)  # the longest wait between two runs bounds the forecast
    else:
        minutes = 1
    if not 1 <= minutes <= 60 or job_seconds <= 0:
        raise UsageError(f"--schedule {schedule!r} with --job-seconds {job_seconds:g}: "
                         "an interval of 1 to 60 minutes and a positive budget")
    return Cadence(schedule, minutes * 60.0, job_seconds)
