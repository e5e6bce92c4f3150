"""Duplicate detection by message id within a sliding time window.

Mirrors the service's RequiresDuplicateDetection: a message whose message_id was accepted less than
DuplicateDetectionHistoryTimeWindow ago is a duplicate. The window is anchored at the first accepted
message with that id; duplicates do not extend it.
"""

from __future__ import annotations

from collections import deque


class DuplicateDetector:
    """Message ids seen within the last ``window_ms``, oldest first."""

    def __init__(self, window_ms: int) -> None:
        self._window_ms = window_ms
        self._seen_at: dict[str, int] = {}
        self._arrivals: deque[tuple[int, str]] = deque()

    def forget_expired(self, now: int) -> int | None:
        """Drop ids seen at or before ``now - window``; returns that cutoff if any were dropped."""
        cutoff = now - self._window_ms
        arrivals = self._arrivals
        if not arrivals or arrivals[0][0] > cutoff:
            return None
        while arrivals and arrivals[0][0] <= cutoff:
            seen_at, message_id = arrivals.popleft()
            # An id accepted again after its window ended has a newer entry that must stay.
            if self._seen_at.get(message_id) == seen_at:
                del self._seen_at[message_id]
        return cutoff

    def is_duplicate(self, message_id: str, now: int) -> bool:
        seen_at = self._seen_at.get(message_id)
        return seen_at is not None and now - seen_at < self._window_ms

    def record(self, message_id: str, now: int) -> None:
        self._seen_at[message_id] = now
        self._arrivals.append((now, message_id))

    def restore(self, history: list[tuple[str, int]]) -> None:
        """Reload (message_id, seen_at) pairs from the journal, in any order."""
        for message_id, seen_at in sorted(history, key=lambda item: item[1]):
            self.record(message_id, seen_at)

    def __len__(self) -> int:
        return len(self._seen_at)
