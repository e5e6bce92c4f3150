"""The management API shows a history as the Durable extension does (``showHistory=true``):
each completion carries the name and time of what scheduled it in its place, episode
boundaries, event ids and payloads are left out, and results appear only with
``showHistoryOutput=true``. The engine's own API keeps the whole history."""

from __future__ import annotations

import pytest

from devhost.durable import DurableEngine

pytestmark = pytest.mark.asyncio


async def test_a_finished_history_is_summarised_as_the_extension_shows_it(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("evolving", "summary-1")
    await engine.run_until_idle()
    await engine.raise_event(instance_id, "Go", 1)
    await engine.run_until_idle()
    status = await engine.get_status(instance_id, show_history=True)
    assert status is not None

    shown = status.to_json()["historyEvents"]
    with_output = status.to_json(show_history_output=True)["historyEvents"]

    assert [event["EventType"] for event in shown] == [
        "ExecutionStarted",
        "TaskCompleted",
        "EventRaised",
        "ExecutionCompleted",
    ]
    started, completed, raised, finished = shown
    assert started["FunctionName"] == "evolving"
    assert not {"Name", "Input", "Version", "OrchestrationInstance"} & set(started)
    assert completed["FunctionName"] == "echo"
    scheduled = next(e for e in status.history or [] if e.get("Name") == "echo")
    assert completed["ScheduledTime"] == scheduled["Timestamp"]
    assert "TaskScheduledId" not in completed
    assert "Result" not in completed
    assert "Input" not in raised
    assert finished["OrchestrationStatus"] == "Completed"
    assert all("EventId" not in event and "IsPlayed" not in event for event in shown)
    assert "Result" in with_output[1]
    assert "Result" in with_output[-1]
