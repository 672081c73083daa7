"""When each simulated thing changes next, kept in a heap so the clock can jump to it.

Keys are ``("node", name)`` or ``("pod", uid)``; entries are (time, key). A key's
time can change any number of times: stale heap entries are skipped when they
surface, which is cheaper than removing them. Ties break on the key, so that
things due at the same instant are handled in the same order on every run
(uids are issued in creation order).
"""

from __future__ import annotations

import heapq

Key = tuple[str, str]


class Timeline:
    def __init__(self) -> None:
        self._heap: list[tuple[float, Key]] = []
        self._due: dict[Key, float] = {}

    def set(self, key: Key, when: float | None) -> None:
        """Schedule ``key`` at ``when`` (replacing its previous time), or unschedule it."""
        if when is None:
            self._due.pop(key, None)
            return
        if self._due.get(key) == when:
            return
        self._due[key] = when
        heapq.heappush(self._heap, (when, key))

    def peek(self) -> float | None:
        """The earliest scheduled time, or None."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[float, Key] | None:
        """The earliest (time, key), removed from the timeline."""
        self._drop_stale()
        if not self._heap:
            return None
        when, key = heapq.heappop(self._heap)
        del self._due[key]
        return when, key

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
