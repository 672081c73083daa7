"""Sending an Event from an InferenceReplica's outbox exactly once.

Each outbox entry has a sequence number, counted per InferenceReplica. The
Event it becomes carries the annotation ``ome.io/outbox-sequence:
{replica uid}/{sequence}`` of the last entry it counted. A send whose Event
already holds that entry (or a later one of the same InferenceReplica) is a
resend: the POST whose reply was lost, or an outbox the previous pass could not
clear. It is skipped, and a true repeat (a new entry) still counts one more.

The uid tells a recreated InferenceReplica, whose sequence starts again at 1,
from the one whose Events are still around.

Both backends answer the same way; these helpers are pure.
"""

from __future__ import annotations

SEQUENCE_ANNOTATION = "ome.io/outbox-sequence"


def sequence_value(source: str, sequence: int) -> str:
    return f"{source}/{sequence}"


def parse_sequence(value: object) -> tuple[str, int] | None:
    """(source, sequence) of an annotation value; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    source, _, number = value.rpartition("/")
    if not source or not number.isdigit():
        return None
    return source, int(number)


def sequence_of(obj: dict) -> tuple[str, int] | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return parse_sequence(annotations.get(SEQUENCE_ANNOTATION))


def already_counted(stored: dict, event: dict) -> bool:
    """Whether ``stored`` (the Event in the cluster) already counts the outbox entry
    that ``event`` is sent for."""
    sending, counted = sequence_of(event), sequence_of(stored)
    if sending is None or counted is None:
        return False
    return sending[0] == counted[0] and counted[1] >= sending[1]
