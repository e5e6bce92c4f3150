"""Work that falls due at a time, for the queue model: lock expiry, scheduled
activation and TTL expiry.

All times are integer milliseconds since the Unix epoch from an injectable clock, so tests drive
time by hand. Entries sit in one min-heap keyed by due time: asking what is due is O(1) when
nothing is, and adding work is O(log n).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import time
import uuid
from collections.abc import Callable
from typing import Protocol

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DueKind(enum.IntEnum):
    LOCK_EXPIRY = 0
    ACTIVATION = 1
    TTL_EXPIRY = 2


DueKey = uuid.UUID | int  # a lock token, or a message's sequence number


class DueTarget(Protocol):
    """Who owns an entry: decides whether it still matters and does the work."""

    def due_entry_is_live(self, kind: DueKind, key: DueKey, due: int) -> bool: ...

    def handle_due(self, kind: DueKind, key: DueKey, due: int, now: int) -> None: ...


# (due, insertion order, kind, target, key): the insertion order makes every entry distinct, so
# tuples never compare targets.
_Entry = tuple[int, int, DueKind, DueTarget, DueKey]


class DueWork:
    """A min-heap of due work with lazy deletion.

    Settling a lock or removing a message leaves its entries behind; they are recognised as stale
    (due_entry_is_live) when they surface. Owners report each entry they make stale, so a heap
    dominated by them (many short-lived locks under a long LockDuration) is compacted and memory
    stays bounded.
    """

    _COMPACT_MIN_STALE = 4096

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._order = itertools.count()
        self._stale = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due: int, kind: DueKind, target: DueTarget, key: DueKey) -> None:
        heapq.heappush(self._heap, (due, next(self._order), kind, target, key))

    def note_stale(self) -> None:
        self._stale += 1
        if self._stale >= self._COMPACT_MIN_STALE and self._stale * 2 > len(self._heap):
            self._heap = [entry for entry in self._heap if _is_live(entry)]
            heapq.heapify(self._heap)
            self._stale = 0

    def run_due(self, now: int) -> None:
        """Hand every entry due at ``now`` to its target, earliest first."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, kind, target, key = heapq.heappop(heap)
            target.handle_due(kind, key, due, now)

    def next_due(self) -> int | None:
        """When the earliest live entry falls due (dropping stale ones on the way)."""
        heap = self._heap
        while heap and not _is_live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def _is_live(entry: _Entry) -> bool:
    due, _, kind, target, key = entry
    return target.due_entry_is_live(kind, key, due)
