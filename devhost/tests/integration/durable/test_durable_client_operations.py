"""The client operations of the durableClient binding on the engine's async API."""

from __future__ import annotations

import datetime as dt

import pytest

from devhost.durable import (
    DurableEngine,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidInstanceIdError,
    RuntimeStatus,
    UnknownFunctionError,
    VirtualClock,
)

pytestmark = pytest.mark.asyncio


async def test_start_new_refuses_an_id_that_is_still_running(engine: DurableEngine) -> None:
    await engine.start_new("waits_forever", "dup-1")
    await engine.run_until_idle()

    with pytest.raises(InstanceAlreadyExistsError, match="'dup-1' already exists and is Running"):
        await engine.start_new("waits_forever", "dup-1")


async def test_start_new_replaces_a_finished_instance(engine: DurableEngine) -> None:
    await engine.start_new("sequence", "replace-1")
    await engine.run_until_idle()

    await engine.start_new("waits_forever", "replace-1")
    await engine.run_until_idle()

    status = await engine.get_status("replace-1", show_history=True)
    assert status is not None
    assert status.name == "waits_forever"
    assert status.runtime_status is RuntimeStatus.RUNNING
    assert all(event.get("Name") != "sequence" for event in status.history or [])


async def test_start_new_names_unknown_orchestrators_and_bad_ids(engine: DurableEngine) -> None:
    with pytest.raises(UnknownFunctionError, match="no orchestrator function named 'nope'"):
        await engine.start_new("nope")
    with pytest.raises(InvalidInstanceIdError, match="a/b"):
        await engine.start_new("sequence", "a/b")


async def test_terminate_discards_pending_work(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("race", input={"timeout_minutes": 5})
    await engine.run_until_idle()
    assert engine.next_timer_at() is not None

    assert await engine.terminate(instance_id, "operator said stop") is True
    await engine.raise_event(instance_id, "Answer", "too late")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.TERMINATED
    assert status.output == "operator said stop"
    assert engine.next_timer_at() is None
    assert not engine.has_runnable_work()
    assert await engine.terminate(instance_id, "again") is False


async def test_terminate_unknown_instance_is_an_error(engine: DurableEngine) -> None:
    with pytest.raises(InstanceNotFoundError):
        await engine.terminate("missing", "why")


async def test_get_status_by_filters_on_status_and_creation_time(engine: DurableEngine) -> None:
    clock = engine.clock
    assert isinstance(clock, VirtualClock)
    early = await engine.start_new("sequence", "early")
    clock.advance(dt.timedelta(hours=1))
    late = await engine.start_new("waits_forever", "late")
    await engine.run_until_idle()

    completed = await engine.get_status_by(runtime_status=[RuntimeStatus.COMPLETED])
    running = await engine.get_status_by(runtime_status=["Running"])
    recent = await engine.get_status_by(created_time_from=clock.now() - dt.timedelta(minutes=1))
    older = await engine.get_status_by(created_time_to=clock.now() - dt.timedelta(minutes=1))

    assert [s.instance_id for s in completed] == [early]
    assert [s.instance_id for s in running] == [late]
    assert [s.instance_id for s in recent] == [late]
    assert [s.instance_id for s in older] == [early]


async def test_get_status_hides_input_on_request_and_unknown_is_none(
    engine: DurableEngine,
) -> None:
    instance_id = await engine.start_new("fan_out", input=[1])
    await engine.run_until_idle()

    shown = await engine.get_status(instance_id)
    hidden = await engine.get_status(instance_id, show_input=False)
    assert shown is not None
    assert hidden is not None
    assert shown.input == [1]
    assert hidden.input is None
    assert await engine.get_status("unknown") is None


async def test_purge_deletes_the_instance_and_its_history(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("sequence")
    await engine.run_until_idle()

    assert await engine.purge_instance_history(instance_id) == 1
    assert await engine.get_status(instance_id) is None
    assert await engine.purge_instance_history(instance_id) == 0
