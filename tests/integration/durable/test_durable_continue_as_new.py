"""continue_as_new starts a new generation; events raised meanwhile are kept."""

from __future__ import annotations

import pytest

from devhost.durable import DurableEngine, RuntimeStatus
from devhost.durable.history import EventType

pytestmark = pytest.mark.asyncio


async def test_each_generation_starts_with_a_fresh_history(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("counter", "counter-1", 0)
    await engine.run_until_idle()
    await engine.raise_event(instance_id, "Add", 4)
    await engine.run_until_idle()

    status = await engine.get_status(instance_id, show_history=True)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.RUNNING
    assert status.input == 4
    assert status.custom_status == {"total": 4}
    started = [e for e in status.history or [] if e["EventType"] == EventType.EXECUTION_STARTED]
    assert [e["Input"] for e in started] == ["4"]


async def test_events_raised_while_continuing_are_kept(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("counter", "counter-2", 0)
    # Four events at once: each generation consumes one, the rest wait for the next ones.
    for increment in (1, 2, 3, 4):
        await engine.raise_event(instance_id, "Add", increment)

    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == 10
    assert status.custom_status == {"total": 10}
