"""At-least-once activities and recovery of in-flight orchestrations by a new
engine on the same database file (in-process; the real process kill is in
test_durable_crash.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from devhost_tests_support.durable import EngineFactory
from devhost_tests_support.durable_apps.semantics_app import ATTEMPTS, RELEASES

from devhost.durable import RuntimeStatus
from devhost.testing import eventually

pytestmark = pytest.mark.asyncio


async def test_unfinished_activity_runs_again_on_the_next_engine(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    database = str(tmp_path / "durable.sqlite")
    key = f"gate-{uuid.uuid4().hex}"
    RELEASES[key] = asyncio.Event()
    first = make_engine(database)
    instance_id = await first.start_new("gated_once", "recover-1", key)
    await first.start()
    await eventually(lambda: ATTEMPTS[key] == 1, "the activity to start on the first engine")
    await first.close()  # the activity never reported: its work item is still stored

    RELEASES[key].set()
    second = make_engine(database)
    status = await second.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == f"released {key}"
    assert ATTEMPTS[key] == 2


async def test_timers_and_raised_events_survive_a_restart(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    database = str(tmp_path / "durable.sqlite")
    first = make_engine(database)
    racing = await first.start_new("race", "recover-race", {"timeout_minutes": 10})
    waiting = await first.start_new("sequential_events", "recover-events")
    await first.run_until_idle()
    await first.raise_event(waiting, "Step", "x")
    await first.run_until_idle()
    # Raised, not yet replayed when the host stops.
    await first.raise_event(waiting, "Step", "y")
    await first.close()

    second = make_engine(database)
    assert second.next_timer_at() is not None
    await second.raise_event(waiting, "Step", "z")
    timed_out = await second.run_until_complete(racing)
    events = await second.run_until_complete(waiting)

    assert timed_out.output["winner"] == "timer"
    assert events.output == ["ready", "x", "y", "z"]


async def test_activity_concurrency_is_bounded(make_engine: EngineFactory) -> None:
    keys = [f"bounded-{uuid.uuid4().hex}" for _ in range(4)]
    for key in keys:
        RELEASES[key] = asyncio.Event()
    engine = make_engine(max_concurrent_activities=2)
    instance_id = await engine.start_new("gated_fan_out", input=keys)
    await engine.start()

    def started() -> int:
        return sum(ATTEMPTS[key] for key in keys)

    await eventually(lambda: started() == 2, "two activities to start")
    await asyncio.sleep(0)  # give a broken limit the chance to start a third one
    assert started() == 2
    first_running = next(key for key in keys if ATTEMPTS[key] == 1)
    RELEASES[first_running].set()
    await eventually(lambda: started() == 3, "a third activity once a slot is free")
    for key in keys:
        RELEASES[key].set()

    def completed() -> bool:
        record = engine.store.get_instance(instance_id)
        return record is not None and record.runtime_status == "Completed"

    await eventually(completed, "the fan-out to complete")
    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.output == [f"released {key}" for key in keys]
