"""Durable timers (create, fire, cancel) and external events: in arrival order, an early one
handed to every later wait of its name as the SDK does on Azure (SDK issue #507), and events
for finished or unknown instances."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from devhost_tests_support.durable import START

from devhost.durable import DurableEngine, InstanceNotFoundError, RuntimeStatus, VirtualClock
from devhost.durable.history import EventType

pytestmark = pytest.mark.asyncio


def _clock(engine: DurableEngine) -> VirtualClock:
    assert isinstance(engine.clock, VirtualClock)
    return engine.clock


async def test_timer_fires_at_its_time_with_virtual_time(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("race", input={"timeout_minutes": 10})
    await engine.run_until_idle()
    assert engine.next_timer_at() == START + dt.timedelta(minutes=10)

    status = await engine.run_until_complete(instance_id)

    assert status.output == {"winner": "timer", "at": "2030-01-01T08:10:00+00:00"}
    assert _clock(engine).now() == START + dt.timedelta(minutes=10)


async def test_timer_does_not_fire_before_its_time(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("race", input={"timeout_minutes": 10})
    await engine.run_until_idle()
    _clock(engine).advance(dt.timedelta(minutes=9, seconds=59))
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.RUNNING


async def test_cancelled_timer_never_fires(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("race", input={"timeout_minutes": 10})
    await engine.run_until_idle()
    _clock(engine).advance(dt.timedelta(minutes=1))
    await engine.raise_event(instance_id, "Answer", {"value": 42})
    await engine.run_until_idle()

    status = await engine.get_status(instance_id, show_history=True)
    assert status is not None
    assert status.output == {"winner": "event", "answer": {"value": 42}}
    assert engine.next_timer_at() is None
    assert await engine.advance_to_next_timer() is None
    history = status.history or []
    assert not [e for e in history if e["EventType"] == EventType.TIMER_FIRED]


async def test_uncancelled_losing_timer_fires_without_disturbing_the_orchestration(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("uncancelled_race")
    await engine.run_until_idle()
    await engine.raise_event(instance_id, "Answer", "first")
    await engine.run_until_idle()
    await engine.advance_to_next_timer()
    await engine.raise_event(instance_id, "Again", "second")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == ["event", "first", "second"]


async def test_events_raised_before_their_wait_are_handed_to_every_later_wait_sdk_507(
    engine: DurableEngine,
) -> None:
    """As on Azure: the extension gives the SDK the raw history, and the SDK keeps one early
    event per name (the last) and hands it to every later wait of that name
    (azure-functions-durable-python#507). An app must wait on each event name once."""
    instance_id = await engine.start_new("sequential_events", "early-events")
    # All three arrive before the orchestration even ran its first activity.
    for value in ("x", "y", "z"):
        await engine.raise_event(instance_id, "Step", value)

    status = await engine.run_until_complete(instance_id)

    assert status.output == ["ready", "z", "z", "z"]


async def test_events_raised_once_their_wait_is_open_are_taken_one_per_wait(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("sequential_events")
    await engine.run_until_idle()
    await engine.raise_event(instance_id, "Step", "first")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.RUNNING
    # Two at once: the first completes the open wait, whose code opens the next one before
    # the second is replayed.
    await engine.raise_event(instance_id, "Step", "second")
    await engine.raise_event(instance_id, "Step", "third")
    await engine.run_until_idle()
    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == ["ready", "first", "second", "third"]


async def test_concurrent_waits_for_one_name_each_take_one_event(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("two_waits_at_once")
    for value in ("b", "a", "c"):
        await engine.raise_event(instance_id, "Vote", value)
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == ["a", "b"]


async def test_wait_reused_across_rounds_of_a_loop(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("reused_wait")
    await engine.run_until_idle()
    await engine.advance_to_next_timer()
    await engine.advance_to_next_timer()
    await engine.raise_event(instance_id, "Answer", "finally")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == {"rounds": 3, "confirmed": "finally"}
    assert engine.next_timer_at() is None


async def test_event_for_a_completed_instance_is_dropped_and_logged(
    engine: DurableEngine, caplog: pytest.LogCaptureFixture
) -> None:
    instance_id = await engine.start_new("sequence")
    await engine.run_until_idle()

    with caplog.at_level(logging.WARNING, logger="devhost.durable.engine"):
        await engine.raise_event(instance_id, "Late", 1)
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert "external event dropped" in caplog.text
    assert instance_id in caplog.text


async def test_event_for_an_unknown_instance_is_an_error(engine: DurableEngine) -> None:
    with pytest.raises(InstanceNotFoundError, match="no-such-instance"):
        await engine.raise_event("no-such-instance", "Answer", 1)


async def test_ten_minute_timeout_costs_no_real_time(engine: DurableEngine) -> None:
    ids = [await engine.start_new("race", input={"timeout_minutes": m}) for m in (10, 20, 30)]
    await engine.raise_event(ids[1], "Answer", "in time")

    results = [await engine.run_until_complete(instance_id) for instance_id in ids]

    assert [r.output["winner"] for r in results] == ["timer", "event", "timer"]
    assert _clock(engine).now() == START + dt.timedelta(minutes=30)
