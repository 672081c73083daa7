"""One component's lifecycle settings, resolved and typed: what the planner reads.

``render/resolve.py`` resolves each setting (service, runtime, operator, built-in
default) and keeps where each came from for the documents that show it; the planner
reads only this object, so a misspelt setting is a type error rather than a None.
Every unset setting holds the value that means the documents' "without the setting"
behaviour (no budgets, no deadline, no repair, keep every revision).
"""

from __future__ import annotations

from dataclasses import dataclass

SURGE_THEN_DRAIN = "SurgeThenDrain"


@dataclass(frozen=True, slots=True)
class UpdateRetry:
    """Revision retries: attempt n+1 waits initial_backoff * 2**(n-1) after attempt n."""

    max_attempts: int
    initial_backoff: float

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before ``attempt`` (2 -> 1m, 3 -> 2m with the chart's values)."""
        return self.initial_backoff * 2 ** (attempt - 2) if attempt >= 2 else 0.0


@dataclass(frozen=True, slots=True)
class ComponentSettings:
    """The lifecycle of one component as the planner reads it (durations in seconds)."""

    # updateStrategy: its type (a plain string, as the stored replica holds it), the
    # partition, and the budgets as written (an integer or a percentage).
    strategy: str = SURGE_THEN_DRAIN
    partition: int = 0
    max_surge: int | str | None = None
    max_unavailable: int | str | None = None
    mark_not_ready_during_lifecycle: bool = True
    min_ready_seconds: int = 0
    restart_policy: str = "None"
    # instanceReadyTimeout in seconds, and as written (for messages).
    instance_ready_timeout: float | None = None
    instance_ready_timeout_text: str | None = None
    migration_mode: str = "Auto"
    revision_history_limit: int | None = None
    stuck_pod_grace_period: float | None = None
    unschedulable_grace_period: float | None = None
    repair_batch_size: int | None = None
    abandoned_replacement_grace_period: float | None = None
    update_retry: UpdateRetry | None = None
    auto_migrate_max_attempts: int | None = None
    # lifecycle.paused: no update starts (lifecycle/pause.py).
    paused: bool = False
