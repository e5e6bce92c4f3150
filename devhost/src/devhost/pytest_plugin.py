"""The devhost's pytest plugin (entry point ``pytest11``): the ``virtual_clock`` fixture.

A host started with ``HostOptions(clock=virtual_clock)`` runs its durable timers, timer
triggers and Service Bus scheduling on that clock, which moves only when the test moves it
(``virtual_clock.advance(timedelta)`` or ``advance_to(moment)``): a ten-minute timeout
passes at once, and no test depends on the machine's speed.
"""

from __future__ import annotations

import datetime as dt

import pytest

from devhost.clock import VirtualClock

VIRTUAL_CLOCK_START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def virtual_clock() -> VirtualClock:
    """A clock at 2030-01-01T00:00:00Z that moves only when the test advances it."""
    return VirtualClock(VIRTUAL_CLOCK_START)
