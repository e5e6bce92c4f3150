"""continue_as_new starts a new generation; events the old one left unprocessed go with it."""

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


async def test_continue_as_new_drops_the_events_its_generation_left_unprocessed(
    engine: DurableEngine,
) -> None:
    """As the extension does for an out-of-process app (ContinueAsNew with
    preserveUnprocessedEvents false): events the old generation's history holds but did
    not consume go with it; an event raised later reaches the new generation."""
    instance_id = await engine.start_new("counter", "counter-2", 0)
    # Four events at once: the first generation takes one and continues as new.
    for increment in (1, 2, 3, 4):
        await engine.raise_event(instance_id, "Add", increment)
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.RUNNING
    assert status.custom_status == {"total": 1}

    await engine.raise_event(instance_id, "Add", 9)
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == 10
    assert status.custom_status == {"total": 10}
