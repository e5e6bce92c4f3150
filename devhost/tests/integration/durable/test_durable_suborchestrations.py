"""Sub-orchestrations with and without retry; failures surface in the parent."""

from __future__ import annotations

import pytest

from devhost.durable import DurableEngine, RuntimeStatus

pytestmark = pytest.mark.asyncio


async def test_sub_orchestrations_return_results_and_failures_to_the_parent(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("parent", "parent-1", {"value": 21})
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED, status.output
    assert status.output["good"] == {"child_of": "parent-1", "value": 42}
    assert status.output["retried"] == {"child_of": "parent-1", "value": 10}
    assert "child refuses 1" in status.output["failure"]
    child = await engine.get_status("parent-1:0")
    assert child is not None
    assert child.runtime_status is RuntimeStatus.COMPLETED
    failing = await engine.get_status("failing-child")
    assert failing is not None
    assert failing.runtime_status is RuntimeStatus.FAILED


async def test_sub_orchestration_retries_are_exhausted_then_fail_the_parent(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("parent", "parent-2", {"value": 1, "retry_fails": True})
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.FAILED
    assert status.output.startswith("Orchestrator function 'parent' failed: Sub-orchestration")
    assert "child refuses 5" in status.output
    attempts = [
        s
        for s in await engine.get_status_by(runtime_status=[RuntimeStatus.FAILED])
        if s.name == "child" and s.input == {"value": 5, "fail": True}
    ]
    assert len(attempts) == 2
