"""The engine's background loop as a host drives it: real time by default, and
virtual time - frozen, or running and skipping - that a host-level scheduler moves (after
asking whether anything is runnable and when the next timer is due)."""

from __future__ import annotations

import pytest
from devhost_tests_support.durable import EngineFactory

from devhost.clock import SkippingClock
from devhost.durable import DurableEngine, RealClock, RuntimeStatus, VirtualClock
from devhost.testing import eventually

pytestmark = pytest.mark.asyncio


def _is(engine: DurableEngine, instance_id: str, status: RuntimeStatus) -> bool:
    record = engine.store.get_instance(instance_id)
    return record is not None and record.runtime_status == status.value


@pytest.mark.parametrize("make_clock", [VirtualClock, SkippingClock], ids=["frozen", "skipping"])
async def test_host_moves_virtual_time_when_the_engine_is_idle(
    make_engine: EngineFactory, make_clock: type[VirtualClock]
) -> None:
    clock = make_clock()
    engine = make_engine(clock=clock)
    await engine.start()
    instance_id = await engine.start_new("race", input={"timeout_minutes": 15})

    await eventually(lambda: not engine.has_runnable_work(), "the engine to go idle")
    next_timer = engine.next_timer_at()
    assert next_timer is not None
    assert _is(engine, instance_id, RuntimeStatus.RUNNING)
    clock.advance_to(next_timer)
    await eventually(lambda: _is(engine, instance_id, RuntimeStatus.COMPLETED), "the timeout")

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output["winner"] == "timer"


async def test_real_clock_timer_fires_in_the_background(make_engine: EngineFactory) -> None:
    engine = make_engine(clock=RealClock())
    await engine.start()
    instance_id = await engine.start_new("short_sleep", input=200)

    await eventually(
        lambda: _is(engine, instance_id, RuntimeStatus.COMPLETED), "a 200 ms durable timer"
    )
    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == "woke up"
