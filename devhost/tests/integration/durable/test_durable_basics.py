"""Activities, custom status, task_all/task_any and failures, run through real
orchestrator code."""

from __future__ import annotations

import pytest

from devhost.durable import DurableEngine, RuntimeStatus
from devhost.durable.history import EventType

pytestmark = pytest.mark.asyncio


async def test_sequence_runs_activities_in_order_with_sequence_ids(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("sequence", "seq-1")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id, show_history=True)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == [{"echo": "one"}, {"echo": "two"}]
    assert status.custom_status == {"stage": "done"}
    scheduled = [
        (event["EventId"], event["Name"], event["Input"])
        for event in status.history or []
        if event["EventType"] == EventType.TASK_SCHEDULED
    ]
    assert scheduled == [(0, "echo", '"one"'), (1, "echo", '"two"')]


async def test_custom_status_is_visible_while_running(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("waits_forever", "status-1")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.RUNNING
    await engine.raise_event(instance_id, "Go", 7)
    await engine.run_until_idle()
    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == ["started", 7]


async def test_task_all_and_task_any_return_results(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("fan_out", input=[1, 2, 3])
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output["all"] == [1, 2, 3]
    assert status.output["any"] in ("a", "b")


async def test_task_all_surfaces_the_failure_of_one_branch(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("fan_out_failure", input="fan-out-failure")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output.startswith("caught: Activity function 'flaky' failed")
    assert "flaky failure 1 for fan-out-failure" in status.output


async def test_failed_activity_is_an_exception_in_the_orchestrator(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("catches_activity_failure", input="caught-1")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.custom_status == "recovered"
    assert "RuntimeError: flaky failure 1 for caught-1" in status.output["caught"]


async def test_unhandled_orchestrator_exception_fails_the_instance(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("unhandled_failure")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.FAILED
    assert status.output == (
        "Orchestrator function 'unhandled_failure' failed: orchestrator gave up after before"
    )


async def test_unsupported_sdk_feature_fails_the_instance_clearly(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("calls_http")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.FAILED
    assert "does not support CALL_HTTP actions" in status.output
