"""Admission control of submissions: the bound on the backlog (C5), `BacklogGate`.

The gate counts the unfinished orders at most once per BACKLOG_RECOUNT_SECONDS, adds between
counts what it admitted itself, and answers `Full` at MAX_BACKLOG_ORDERS. An admission is a
`Reservation` the submission settles with whether it stored a new record, so a resend, a
conflict or a message of another kind gives its place back. Each count also sets the
sas.backlog.unfinished gauge (C9). The same gate over the running orders, at
MAX_RUNNING_ORDERS, is the running cap a submission checks before it starts its order (C5).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from observability import metrics


@dataclass(frozen=True)
class Reservation:
    """A place in the backlog held for one submission until it settles."""

    backlog: int
    """The backlog the gate saw before this admission (counted, plus admitted since)."""


@dataclass(frozen=True)
class Full:
    """The backlog is at its bound: a new order is refused (C5)."""

    backlog: int
    bound: int


class BacklogGate:
    """One instance's view of the backlog against its bound; safe to share between threads.

    `count_backlog(at_most)` counts the unfinished records up to `at_most`
    (`StateStore.count_backlog`; `StateStore.count_running` for the running cap); `observe`
    is given each estimate; `clock` is a monotonic clock in seconds.
    """

    def __init__(
        self,
        count_backlog: Callable[[int], int],
        *,
        bound: int,
        recount_seconds: float,
        observe: Callable[[int], None] = metrics.backlog_counted,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if bound < 1:
            raise ValueError(f"the backlog bound must be >= 1, got {bound}")
        self._count_backlog = count_backlog
        self.bound = bound
        self._recount_seconds = recount_seconds
        self._observe = observe
        self._clock = clock
        self._lock = threading.Lock()
        self._counted: int | None = None
        self._counted_at = 0.0
        self._admitted_since = 0
        self._in_flight = 0

    def reserve(self) -> Reservation | Full:
        """A place for one new order, or `Full`. Counts the backlog when the last count is
        older than the recount interval; a store error propagates and changes nothing."""
        with self._lock:
            now = self._clock()
            if self._counted is None or now - self._counted_at >= self._recount_seconds:
                # Admissions still settling may or may not be in the count: keep them, so
                # the estimate errs high, never low.
                self._counted = self._count_backlog(self.bound)
                self._counted_at = now
                self._admitted_since = self._in_flight
            backlog = self._counted + self._admitted_since
            self._observe(backlog)
            if backlog >= self.bound:
                return Full(backlog=min(backlog, self.bound), bound=self.bound)
            self._admitted_since += 1
            self._in_flight += 1
            return Reservation(backlog=backlog)

    def settle(self, reservation: Reservation, *, stored: bool) -> None:
        """The submission holding `reservation` ended; `stored`: it created a state record
        (or may have: a failed write counts as stored until the next count)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            if not stored:
                self._admitted_since = max(0, self._admitted_since - 1)
