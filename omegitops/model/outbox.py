"""The InferenceReplica's event outbox: events recorded with the write that comes first.

A pass that stops after its InferenceReplica write (a refused pod, a lost
object write, the job killed) carries its operations on next pass; the events
it planned must not be lost with it. So the plan records its new events in
``status.eventOutbox``, each numbered from ``status.eventSequence``, in the
same status write that records the operations. The shell sends them after the
pod actions and then clears the outbox; whatever is still there next pass is
sent then, before that pass's own events. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegitops.model.actions import Event

OUTBOX = "eventOutbox"
SEQUENCE = "eventSequence"


def post(previous: dict[str, Any], new: list[Event]) -> tuple[list[Event], dict[str, Any]]:
    """(every event to send, unsent ones first, and the status fields that record them).

    ``previous`` is the InferenceReplica's status as the last pass left it.
    """
    unsent = [_event(entry) for entry in previous.get(OUTBOX) or []]
    counter = max([int(previous.get(SEQUENCE) or 0)] + [e.sequence or 0 for e in unsent])
    numbered = []
    for event in new:
        counter += 1
        numbered.append(replace(event, sequence=counter))
    pending = unsent + numbered
    fields: dict[str, Any] = {}
    if counter:
        fields[SEQUENCE] = counter
    if pending:
        fields[OUTBOX] = [_entry(event) for event in pending]
    return pending, fields


def _entry(event: Event) -> dict[str, Any]:
    return {"sequence": event.sequence, "type": event.type, "reason": event.reason,
            "message": event.message}


def _event(entry: dict[str, Any]) -> Event:
    return Event(entry.get("type") or "Normal", entry.get("reason") or "",
                 entry.get("message") or "", int(entry.get("sequence") or 0) or None)
