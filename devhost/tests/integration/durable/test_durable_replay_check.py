"""A stored history replayed once through today's code finds what the engine itself raises
at that instance's next episode: the same mismatch, in the same words."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from devhost_tests_support.durable import semantics_functions
from devhost_tests_support.durable_apps.semantics_app import CODE_VERSION

from devhost.durable import DurableEngine, RuntimeStatus
from devhost.durable.history import HistoryEvent, event_type_name
from devhost.durable.registry import FunctionRegistry
from devhost.durable.replay_check import as_stored, check_history
from devhost.durable.workers import InProcessOrchestrators

pytestmark = pytest.mark.asyncio


@pytest.fixture
def code_version() -> Iterator[dict[str, int]]:
    yield CODE_VERSION
    CODE_VERSION["evolving"] = 1


def replay() -> InProcessOrchestrators:
    return InProcessOrchestrators(FunctionRegistry.from_functions(semantics_functions()))


async def history_of(engine: DurableEngine, instance_id: str) -> list[HistoryEvent]:
    status = await engine.get_status(instance_id, show_history=True)
    assert status is not None
    assert status.history is not None
    return list(status.history)


async def test_unchanged_code_replays_a_running_and_a_finished_history_cleanly(
    engine: DurableEngine,
) -> None:
    running = await engine.start_new("evolving", "running-1")
    finished = await engine.start_new("evolving", "finished-1")
    await engine.run_until_idle()
    await engine.raise_event(finished, "Go", 1)
    await engine.run_until_idle()

    for instance_id in (running, finished):
        check = await check_history(
            instance_id, await history_of(engine, instance_id), replay().replay
        )
        assert check.clean, check
        assert check.orchestrator == "evolving"


@pytest.mark.parametrize("changed_to", [2, 3], ids=["other-activity", "activity-removed"])
async def test_a_changed_orchestrator_is_found_in_the_words_the_engine_fails_it_with(
    engine: DurableEngine, code_version: dict[str, int], changed_to: int
) -> None:
    instance_id = await engine.start_new("evolving", f"evolving-{changed_to}")
    await engine.run_until_idle()
    history = await history_of(engine, instance_id)

    code_version["evolving"] = changed_to
    check = await check_history(instance_id, history, replay().replay)
    await engine.raise_event(instance_id, "Go", "now")
    await engine.run_until_idle()

    live = await engine.get_status(instance_id)
    assert live is not None
    assert live.runtime_status is RuntimeStatus.FAILED
    assert check.mismatch is not None
    assert check.mismatch.sequence_id == 0
    assert str(check.mismatch) == live.output


async def test_a_history_shown_by_name_reads_back_as_stored(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("evolving", "shown-1")
    await engine.run_until_idle()
    history = await history_of(engine, instance_id)

    shown = [{**event, "EventType": event_type_name(event)} for event in history]
    dtfx_names = [
        {**event, "EventType": event_type_name(event).title().replace("_", "")} for event in history
    ]

    assert [as_stored(event) for event in shown] == history
    assert [as_stored(event) for event in dtfx_names] == history
