"""Changed orchestrator code fails that instance with a clear non-determinism
error; other instances go on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from devhost_tests_support.durable_apps.semantics_app import CODE_VERSION

from devhost.durable import DurableEngine, RuntimeStatus

pytestmark = pytest.mark.asyncio


@pytest.fixture
def code_version() -> Iterator[dict[str, int]]:
    yield CODE_VERSION
    CODE_VERSION["evolving"] = 1


async def test_changed_code_fails_only_the_affected_instance(
    engine: DurableEngine, code_version: dict[str, int]
) -> None:
    changed = await engine.start_new("evolving", "evolving-1")
    unaffected = await engine.start_new("waits_forever", "steady-1")
    await engine.run_until_idle()

    code_version["evolving"] = 2  # a deployment under the running instance
    await engine.raise_event(changed, "Go", "now")
    await engine.raise_event(unaffected, "Go", "now")
    await engine.run_until_idle()

    failed = await engine.get_status(changed)
    assert failed is not None
    assert failed.runtime_status is RuntimeStatus.FAILED
    message = failed.output
    assert "Non-deterministic orchestrator: instance 'evolving-1' at sequence id 0" in message
    assert "the history has TASK_SCHEDULED 'echo'" in message
    assert "the code now asks for activity 'flaky'" in message
    steady = await engine.get_status(unaffected)
    assert steady is not None
    assert steady.runtime_status is RuntimeStatus.COMPLETED
    assert steady.output == ["started", "now"]


async def test_removed_call_is_reported_with_what_the_history_has(
    engine: DurableEngine, code_version: dict[str, int]
) -> None:
    instance_id = await engine.start_new("evolving", "evolving-3")
    await engine.run_until_idle()

    code_version["evolving"] = 3
    await engine.raise_event(instance_id, "Go", "now")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.FAILED
    assert "instance 'evolving-3' at sequence id 0" in status.output
    assert "the history has TASK_SCHEDULED 'echo'" in status.output
    assert "the code no longer schedules it" in status.output


async def test_unchanged_code_replays_cleanly_across_many_episodes(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("evolving", "evolving-2")
    await engine.run_until_idle()
    await engine.raise_event(instance_id, "Go", 1)
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == [{"echo": "v1"}, 1]
