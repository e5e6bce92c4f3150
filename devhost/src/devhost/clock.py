"""The devhost's notion of time: real by default, virtual for tests.

Everything that waits for a moment (timer triggers, durable timers) waits through one Clock,
so a test can run the same code under a VirtualClock that only moves when told to: when
nothing is runnable, the host jumps time to the earliest pending wake-up, like Temporal's
time-skipping test server. A ten-minute timeout then costs milliseconds.

Two ways to wait are offered because the waiters differ: a timer trigger simply sleeps until
its next occurrence (``sleep_until``), while the durable engine's loop waits for new work OR
its next timer, so it asks how long a real wait would help (``seconds_until``) and is woken
when virtual time is moved (``on_change``). ``SkippingClock`` is the third kind: real time
that also jumps forward when told, for tests of a whole pipeline whose work must keep its
order in time between the jumps.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

UTC = dt.UTC


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """The current time, timezone-aware UTC."""
        ...

    async def sleep_until(self, moment: dt.datetime) -> None:
        """Return once ``now() >= moment``."""
        ...

    def seconds_until(self, moment: dt.datetime) -> float | None:
        """Real seconds to wait for ``moment``, or None if waiting in real time cannot help."""
        ...

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever the clock is moved by hand."""
        ...


class RealClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)

    async def sleep_until(self, moment: dt.datetime) -> None:
        delay = (moment - self.now()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)

    def seconds_until(self, moment: dt.datetime) -> float | None:
        return max(0.0, (moment - self.now()).total_seconds())

    def on_change(self, listener: Callable[[], None]) -> None:
        """Real time is never moved by hand, so there is nothing to notify."""


class VirtualClock:
    """Time that moves only through ``advance_to``; sleepers wake in deadline order."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        moment = start or dt.datetime(2030, 1, 1, tzinfo=UTC)
        if moment.tzinfo is None:
            raise ValueError("VirtualClock needs a timezone-aware start time")
        self._now = moment.astimezone(UTC)
        self._sleepers: list[tuple[dt.datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> dt.datetime:
        return self._now

    async def sleep_until(self, moment: dt.datetime) -> None:
        if moment <= self._now:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (moment, next(self._order), waiter))
        await waiter

    def seconds_until(self, moment: dt.datetime) -> float | None:
        return 0.0 if moment <= self._now else None

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def next_wakeup(self) -> dt.datetime | None:
        """The earliest moment a sleeper waits for (cancelled sleepers are dropped)."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance_to(self, moment: dt.datetime) -> None:
        """Move time forward (never back), wake due sleepers and tell the listeners."""
        if moment <= self._now:
            return
        self._now = moment.astimezone(UTC)
        self._moved_to(self._now)

    def advance(self, delta: dt.timedelta) -> None:
        self.advance_to(self.now() + delta)

    def _moved_to(self, moment: dt.datetime) -> None:
        """Wake the sleepers due by `moment`, then tell the listeners that time moved."""
        while self._sleepers and self._sleepers[0][0] <= moment:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)
        for listener in self._listeners:
            listener()


class SkippingClock(VirtualClock):
    """Real time that a test can also move forward: it runs at the machine's pace from
    `start` and jumps (``advance_to``) when the test sees nothing left to happen before the
    next wake-up, as Temporal's time-skipping test server does.

    Unlike a frozen VirtualClock, work between two jumps takes the time it takes, so the
    order of events shows in their timestamps; a wait that outlasts a jump still ends on
    the machine's clock. Sleepers wake on whichever comes first.
    """

    def __init__(self, start: dt.datetime | None = None) -> None:
        super().__init__(start or dt.datetime.now(UTC))
        self._started = time.monotonic()
        self._skipped = dt.timedelta()

    def now(self) -> dt.datetime:
        elapsed = dt.timedelta(seconds=time.monotonic() - self._started)
        return self._now + elapsed + self._skipped

    async def sleep_until(self, moment: dt.datetime) -> None:
        while (remaining := (moment - self.now()).total_seconds()) > 0:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._sleepers, (moment, next(self._order), waiter))
            try:
                await asyncio.wait({waiter}, timeout=remaining)
            finally:
                # A sleeper that woke by the machine's clock leaves the queue of wake-ups.
                waiter.cancel()

    def seconds_until(self, moment: dt.datetime) -> float | None:
        return max(0.0, (moment - self.now()).total_seconds())

    def advance_to(self, moment: dt.datetime) -> None:
        """Jump forward to `moment` (never back), wake due sleepers and tell the listeners."""
        current = self.now()
        if moment <= current:
            return
        self._skipped += moment - current
        self._moved_to(moment)
