"""Orchestrations and activities run in language worker processes behave exactly as
in the devhost's own process, and a worker that dies costs a retry, never an event or an
activity."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from devhost_tests_support import TESTS_ROOT
from devhost_tests_support.durable import EngineFactory

from devhost.durable import DurableEngine, RuntimeStatus
from devhost.durable.history import EventType
from devhost.language_workers import LanguageWorkers

pytestmark = pytest.mark.asyncio

SEMANTICS_APP = "devhost_tests_support.durable_apps.semantics_app:app"


@pytest_asyncio.fixture
async def workers() -> AsyncIterator[LanguageWorkers]:
    runner = LanguageWorkers(SEMANTICS_APP, TESTS_ROOT, processes=2)
    yield runner
    await runner.close()


@pytest_asyncio.fixture
async def engine(make_engine: EngineFactory, workers: LanguageWorkers) -> DurableEngine:
    return make_engine(orchestrators=workers, activities=workers)


async def test_activities_custom_status_and_output_match_the_in_process_replay(
    engine: DurableEngine, workers: LanguageWorkers
) -> None:
    instance_id = await engine.start_new("sequence", "seq-workers")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == [{"echo": "one"}, {"echo": "two"}]
    assert status.custom_status == {"stage": "done"}
    assert len(workers.worker_pids()) == 2
    assert os.getpid() not in workers.worker_pids()


async def test_async_code_gets_the_python_workers_default_executor(engine: DurableEngine) -> None:
    # The Python worker leaves the loop's default executor as asyncio makes it, so what an
    # async function sends to asyncio.to_thread runs on min(32, CPUs + 4) threads: an app
    # that needs more brings its own pool, and under the devhost finds out as on Azure.
    expected = min(32, (os.cpu_count() or 1) + 4)
    instance_id = await engine.start_new("executor_threads", input=expected)

    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == expected


async def test_an_activity_failure_reads_as_it_does_in_process(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("fan_out_failure", input="workers-fan-out-failure")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output.startswith(
        "caught: Activity function 'flaky' failed: RuntimeError: flaky failure 1 for "
        "workers-fan-out-failure"
    )


async def test_timer_and_event_race_is_decided_in_a_worker(engine: DurableEngine) -> None:
    timed_out = await engine.start_new("race", input={"timeout_minutes": 10})
    answered = await engine.start_new("race", input={"timeout_minutes": 10})
    await engine.run_until_idle()
    await engine.raise_event(answered, "Answer", {"value": 42})

    first = await engine.run_until_complete(answered)
    second = await engine.run_until_complete(timed_out)

    assert first.output == {"winner": "event", "answer": {"value": 42}}
    assert second.output == {"winner": "timer", "at": "2030-01-01T08:10:00+00:00"}


async def test_an_orchestrator_failure_is_reported_from_the_worker(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("unhandled_failure")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.FAILED
    assert "orchestrator gave up after before" in str(status.output)


async def test_what_the_app_prints_does_not_disturb_the_replays(engine: DurableEngine) -> None:
    instance_id = await engine.start_new("chatty")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == {"echo": "spoken"}


async def test_a_killed_worker_is_replaced_and_loses_nothing(
    engine: DurableEngine, workers: LanguageWorkers
) -> None:
    instance_id = await engine.start_new("waits_forever", "killed-worker")
    await engine.run_until_idle()
    for pid in workers.worker_pids():
        os.kill(pid, signal.SIGKILL)

    await engine.raise_event(instance_id, "Go", "after the crash")
    await engine.run_until_idle()

    status = await engine.get_status(instance_id, show_history=True)
    assert status is not None
    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert status.output == ["started", "after the crash"]
    history = status.history or []
    assert [e["EventType"] for e in history].count(EventType.EVENT_RAISED) == 1
    assert [e["EventType"] for e in history].count(EventType.TASK_SCHEDULED) == 1
    assert len(workers.worker_pids()) == 2
