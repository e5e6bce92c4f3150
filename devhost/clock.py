"""The devhost's notion of time: real by default, virtual for tests.

Everything that waits for a moment (timer triggers, durable timers) waits through a Clock, so
a test can run the same code under a VirtualClock that only moves when the host says so: when
nothing is runnable, the host jumps time to the earliest pending wake-up, like Temporal's
time-skipping test server. A ten-minute timeout then costs milliseconds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import heapq
import itertools
from typing import Protocol

UTC = dt.UTC


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """The current time, timezone-aware UTC."""
        ...

    async def sleep_until(self, moment: dt.datetime) -> None:
        """Return once ``now() >= moment``."""
        ...


class RealClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)

    async def sleep_until(self, moment: dt.datetime) -> None:
        delay = (moment - self.now()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)


class VirtualClock:
    """Time that moves only through ``advance_to``; sleepers wake in deadline order."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2030, 1, 1, tzinfo=UTC)
        self._sleepers: list[tuple[dt.datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> dt.datetime:
        return self._now

    async def sleep_until(self, moment: dt.datetime) -> None:
        if moment <= self._now:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (moment, next(self._order), waiter))
        await waiter

    def next_wakeup(self) -> dt.datetime | None:
        """The earliest moment a sleeper waits for (cancelled sleepers are dropped)."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance_to(self, moment: dt.datetime) -> None:
        """Move time forward (never back) and wake every sleeper whose moment has come."""
        if moment > self._now:
            self._now = moment
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)

    def advance(self, delta: dt.timedelta) -> None:
        self.advance_to(self._now + delta)
