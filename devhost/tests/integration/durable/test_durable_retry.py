"""call_activity_with_retry with DTFx semantics (first interval, backoff
coefficient, max interval, max attempts, retry timeout), on virtual time."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from devhost_tests_support.durable_apps.semantics_app import ATTEMPTS

from devhost.durable import DurableEngine, RuntimeStatus
from devhost.durable.history import EventType, parse_timestamp

pytestmark = pytest.mark.asyncio


def _key() -> str:
    return f"retry-{uuid.uuid4().hex}"


def _retry_delays(history: list[dict[str, object]]) -> list[float]:
    """Seconds between each TaskFailed and the retry timer created for it."""
    delays: list[float] = []
    failed_at = None
    for event in history:
        if event["EventType"] == EventType.TASK_FAILED:
            failed_at = parse_timestamp(str(event["Timestamp"]))
        elif event["EventType"] == EventType.TIMER_CREATED and failed_at is not None:
            delays.append((parse_timestamp(str(event["FireAt"])) - failed_at).total_seconds())
            failed_at = None
    return delays


async def test_backoff_grows_by_the_coefficient_up_to_the_max_interval(
    engine: DurableEngine,
) -> None:
    key = _key()
    spec = {
        "activity": {"key": key, "fail_times": 3},
        "retry": {
            "first_retry_interval_in_milliseconds": 1000,
            "max_number_of_attempts": 5,
            "backoff_coefficient": 2.0,
            "max_retry_interval_in_milliseconds": 3000,
        },
    }
    instance_id = await engine.start_new("retrying", input=spec)
    status = await engine.run_until_complete(instance_id)
    full = await engine.get_status(instance_id, show_history=True)

    assert status.output == {"result": "ok after 4", "after": "after"}
    assert ATTEMPTS[key] == 4
    assert full is not None
    assert _retry_delays(full.history or []) == [1.0, 2.0, 3.0]


async def test_exhausted_attempts_surface_the_last_failure(engine: DurableEngine) -> None:
    key = _key()
    spec = {
        "activity": {"key": key, "fail_times": 99},
        "retry": {"first_retry_interval_in_milliseconds": 5000, "max_number_of_attempts": 3},
    }
    instance_id = await engine.start_new("retrying", input=spec)
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED
    assert ATTEMPTS[key] == 3
    assert f"flaky failure 3 for {key}" in status.output["failed"]


async def test_retry_timeout_stops_further_attempts(engine: DurableEngine) -> None:
    key = _key()
    spec = {
        "activity": {"key": key, "fail_times": 99},
        "retry": {
            "first_retry_interval_in_milliseconds": 1000,
            "max_number_of_attempts": 10,
            "retry_timeout_in_milliseconds": 2500,
        },
    }
    instance_id = await engine.start_new("retrying", input=spec)
    status = await engine.run_until_complete(instance_id)

    # Failures at 0 s, 1 s and 2 s are retried; the one at 3 s is past the 2.5 s timeout.
    assert ATTEMPTS[key] == 4
    assert "Retry timeout exceeded" in status.output["failed"]
    assert f"flaky failure 4 for {key}" in status.output["failed"]


async def test_parallel_retries_interleave_their_sequence_ids(engine: DurableEngine) -> None:
    keys = [_key(), _key()]
    instance_id = await engine.start_new("retry_in_parallel", input=keys)
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED, status.output
    assert status.output == ["ok after 3", "ok after 2", "last"]
    assert engine.clock.now() - dt.datetime(2030, 1, 1, 8, 0, tzinfo=dt.UTC) == dt.timedelta(
        seconds=2
    )


async def test_retry_branch_that_lost_a_race_keeps_its_own_sequence_ids(
    engine: DurableEngine,
) -> None:
    key = _key()
    instance_id = await engine.start_new("stale_retry", input=key)
    await engine.run_until_idle()
    await engine.advance_to_next_timer()  # the 1-minute timer wins the race
    for _ in range(2):  # the retry timers at 10 and 20 minutes
        await engine.advance_to_next_timer()
    await engine.raise_event(instance_id, "Done", "yes")
    status = await engine.run_until_complete(instance_id)

    assert status.runtime_status is RuntimeStatus.COMPLETED, status.output
    assert status.output == {
        "timer_won": True,
        "after": "after the race",
        "retried": "ok after 3",
        "done": "yes",
    }
    assert ATTEMPTS[key] == 3
