"""timerTrigger on the virtual clock: schedules, run_on_startup, past-due after downtime (U7)."""

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path

import azure.functions as func
import pytest

from devhost.clock import VirtualClock
from devhost.indexing import IndexedFunction, index_app
from devhost.invocation import FunctionInvoker
from devhost.schedule_monitor import ScheduleMonitor
from devhost.settings import AppSettings
from devhost.testing import eventually
from devhost.triggers.timer import TimerTrigger

START = dt.datetime(2030, 1, 1, 0, 0, 1, tzinfo=dt.UTC)


def timer_function(
    calls: list[func.TimerRequest], *, run_on_startup: bool = False, fail: bool = False
) -> IndexedFunction:
    app = func.FunctionApp()

    @app.timer_trigger(schedule="0 */5 * * * *", arg_name="timer", run_on_startup=run_on_startup)
    def sweep(timer: func.TimerRequest) -> None:
        calls.append(timer)
        if fail:
            raise RuntimeError("sweep failed")

    (indexed,) = index_app(app, AppSettings({}))
    return indexed


@pytest.fixture
async def invoker(tmp_path: Path) -> AsyncIterator[FunctionInvoker]:
    invoker = FunctionInvoker(str(tmp_path), max_threads=2)
    yield invoker
    invoker.close()


async def run_for(
    trigger: TimerTrigger, clock: VirtualClock, calls: list[func.TimerRequest], expected_calls: int
) -> None:
    task = asyncio.create_task(trigger.run())
    try:
        while len(calls) < expected_calls:
            await eventually(lambda: clock.next_wakeup() is not None or task.done(), "timer waits")
            if task.done():
                task.result()
            wake = clock.next_wakeup()
            assert wake is not None
            count = len(calls)
            clock.advance_to(wake)
            await eventually(lambda count=count: len(calls) > count, "timer fired")
        # Stop only once the trigger waits again: it has then saved its schedule status, which
        # a restarted trigger reads (the function's call is seen before the trigger resumes).
        await eventually(lambda: clock.next_wakeup() is not None or task.done(), "timer waits")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_fires_on_schedule_with_status(tmp_path: Path, invoker: FunctionInvoker) -> None:
    calls: list[func.TimerRequest] = []
    clock = VirtualClock(START)
    trigger = TimerTrigger(
        timer_function(calls), invoker, clock, ScheduleMonitor(tmp_path / "s.db")
    )
    await run_for(trigger, clock, calls, expected_calls=3)

    assert clock.now() == START.replace(minute=15, second=0)
    assert [c.past_due for c in calls] == [False, False, False]
    assert calls[1].schedule_status["Last"] == START.replace(minute=5, second=0).isoformat()
    assert calls[1].schedule_status["Next"] == START.replace(minute=15, second=0).isoformat()


async def test_run_on_startup_fires_at_once(tmp_path: Path, invoker: FunctionInvoker) -> None:
    calls: list[func.TimerRequest] = []
    clock = VirtualClock(START)
    function = timer_function(calls, run_on_startup=True)
    trigger = TimerTrigger(function, invoker, clock, ScheduleMonitor(tmp_path / "s.db"))
    task = asyncio.create_task(trigger.run())
    await eventually(lambda: len(calls) == 1, "startup invocation")
    task.cancel()
    assert clock.now() == START
    assert calls[0].past_due is False


async def test_occurrence_missed_while_down_fires_once_past_due(
    tmp_path: Path, invoker: FunctionInvoker
) -> None:
    calls: list[func.TimerRequest] = []
    monitor_path = tmp_path / "s.db"
    clock = VirtualClock(START)
    await run_for(
        TimerTrigger(timer_function(calls), invoker, clock, ScheduleMonitor(monitor_path)),
        clock,
        calls,
        expected_calls=1,
    )

    # The host is down for an hour: occurrences at :10 ... :65 were missed.
    restarted_clock = VirtualClock(clock.now() + dt.timedelta(hours=1))
    later: list[func.TimerRequest] = []
    trigger = TimerTrigger(
        timer_function(later), invoker, restarted_clock, ScheduleMonitor(monitor_path)
    )
    await run_for(trigger, restarted_clock, later, expected_calls=2)

    assert [c.past_due for c in later] == [True, False]
    assert later[1].schedule_status["Last"] == START.replace(minute=10, second=0).isoformat()


async def test_failing_invocation_keeps_the_schedule(
    tmp_path: Path, invoker: FunctionInvoker
) -> None:
    calls: list[func.TimerRequest] = []
    clock = VirtualClock(START)
    trigger = TimerTrigger(
        timer_function(calls, fail=True), invoker, clock, ScheduleMonitor(tmp_path / "s.db")
    )
    await run_for(trigger, clock, calls, expected_calls=2)
    assert len(calls) == 2
