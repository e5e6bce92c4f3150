"""SkippingClock: real time that a test can also move forward, as a time-skipping test server's.

It runs at the machine's pace between jumps, so the order of events shows in their
timestamps; a jump wakes every sleeper it passes, and a sleeper it does not reach still wakes
by the machine's clock.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from devhost.clock import SkippingClock

START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
WAIT_BOUND_SECONDS = 10.0


def test_time_runs_from_the_start_and_a_jump_moves_it_forward_only() -> None:
    clock = SkippingClock(START)
    before = clock.now()
    assert START <= before < START + dt.timedelta(seconds=WAIT_BOUND_SECONDS)

    clock.advance_to(START + dt.timedelta(hours=1))
    after_jump = clock.now()
    assert after_jump >= START + dt.timedelta(hours=1)

    clock.advance_to(START)  # the past: nothing moves back
    assert clock.now() >= after_jump
    clock.advance(dt.timedelta(minutes=10))
    assert clock.now() >= after_jump + dt.timedelta(minutes=10)


async def test_a_jump_wakes_the_sleepers_it_passes_and_leaves_the_others() -> None:
    clock = SkippingClock(START)
    in_an_hour = clock.now() + dt.timedelta(hours=1)
    in_a_day = clock.now() + dt.timedelta(days=1)
    hour = asyncio.create_task(clock.sleep_until(in_an_hour))
    day = asyncio.create_task(clock.sleep_until(in_a_day))
    await asyncio.sleep(0)
    assert clock.next_wakeup() == in_an_hour

    clock.advance_to(in_an_hour)
    await asyncio.wait_for(hour, WAIT_BOUND_SECONDS)
    assert not day.done()
    assert clock.next_wakeup() == in_a_day
    day.cancel()
    with pytest.raises(asyncio.CancelledError):
        await day


async def test_a_sleeper_no_jump_reaches_wakes_by_the_machines_clock() -> None:
    clock = SkippingClock(START)
    soon = clock.now() + dt.timedelta(milliseconds=50)
    await asyncio.wait_for(clock.sleep_until(soon), WAIT_BOUND_SECONDS)
    assert clock.now() >= soon
    assert clock.next_wakeup() is None, "a sleeper that woke leaves the wake-ups"
    assert clock.seconds_until(soon) == 0.0
    hour_away = clock.seconds_until(clock.now() + dt.timedelta(hours=1))
    assert hour_away is not None, "real seconds help it"
    assert 3500 < hour_away <= 3600
