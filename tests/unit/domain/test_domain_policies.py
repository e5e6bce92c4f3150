"""Settings, retry budget, backoff, breaker and supervisor decisions (E7, E9, U4, U5, C4)."""

from __future__ import annotations

import random
from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest

from domain.policies import (
    ENVIRONMENT_NAMES,
    BreakerState,
    CircuitBreaker,
    GiveUp,
    Retry,
    RetryBudget,
    Settings,
    SettingsError,
    claim_deadline,
    compensation_deadline,
    full_jitter_delay,
    next_retry_delay,
    step_deadline,
    supervisor_decision,
    sweep_window_start,
)

NOW = datetime(2026, 7, 1, tzinfo=UTC)


def test_defaults_use_the_contract_names_and_values() -> None:
    settings = Settings.from_environ({})
    assert settings == Settings()
    assert settings.orders_queue == "orders"
    assert settings.agent_requests_queue == "agent-requests"
    assert settings.agent_responses_queue == "agent-responses"
    assert settings.operator_alerts_queue == "operator-alerts"
    assert settings.state_store == "sqlite"
    assert settings.cosmos_database == "orderprocessing"
    assert (settings.cosmos_state_container, settings.cosmos_orders_container) == (
        "state",
        "orders",
    )
    assert settings.reply_queues == frozenset()
    contract = {
        "ORDERS_QUEUE",
        "AGENT_REQUESTS_QUEUE",
        "AGENT_RESPONSES_QUEUE",
        "OPERATOR_ALERTS_QUEUE",
        "REPLY_QUEUES",
        "STATE_STORE",
        "COSMOS_DATABASE",
        "COSMOS_STATE_CONTAINER",
        "COSMOS_ORDERS_CONTAINER",
        "STARTER_SCHEDULE",
        "SUPERVISOR_SCHEDULE",
        "STEP_TIMEOUT_SECONDS",
        "MAX_FAILURES",
    }
    assert contract <= set(ENVIRONMENT_NAMES.values())


def test_settings_are_read_from_the_environment() -> None:
    settings = Settings.from_environ(
        {
            "REPLY_QUEUES": " replies-a, replies-b ,,",
            "STEP_TIMEOUT_SECONDS": "2.5",
            "MAX_FAILURES": "5",
            "RETRY_BUDGET": "20",
            "STATE_STORE": "cosmos",
            "SUPERVISOR_SCHEDULE": "0 */1 * * * *",
            "ORDERS_QUEUE": "orders-eu",
            "UNRELATED": "ignored",
        }
    )
    assert settings.reply_queues == frozenset({"replies-a", "replies-b"})
    assert settings.step_timeout_seconds == 2.5
    assert settings.max_failures == 5
    assert settings.agent_max_tries == 4
    assert settings.state_store == "cosmos"
    assert settings.supervisor_schedule == "0 */1 * * * *"
    assert settings.orders_queue == "orders-eu"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MAX_FAILURES", "0", "MAX_FAILURES must be a positive integer, got '0'"),
        ("MAX_FAILURES", "three", "MAX_FAILURES must be a positive integer"),
        ("STEP_TIMEOUT_SECONDS", "-1", "STEP_TIMEOUT_SECONDS must be a number of seconds >= 0"),
        ("STEP_TIMEOUT_SECONDS", "nan", "STEP_TIMEOUT_SECONDS must be a number of seconds >= 0"),
        ("STEP_TIMEOUT_SECONDS", "soon", "STEP_TIMEOUT_SECONDS must be a number of seconds"),
        ("STATE_STORE", "postgres", "STATE_STORE must be 'sqlite' or 'cosmos'"),
        ("STARTER_SCHEDULE", "*/5 * * * *", "STARTER_SCHEDULE must be a six-field NCRONTAB"),
        ("ORDERS_QUEUE", "  ", "ORDERS_QUEUE must not be empty"),
        ("RETRY_BUDGET", "2", "RETRY_BUDGET=2 is smaller than MAX_FAILURES=3"),
    ],
)
def test_bad_settings_fail_fast_naming_the_setting(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("*", r"\*").replace("(", r"\(")):
        Settings.from_environ({name: value})


@pytest.mark.parametrize(
    ("total", "attempts", "deliveries", "agent_tries"),
    [(12, 3, 1, 4), (13, 3, 1, 4), (12, 3, 2, 2), (3, 3, 1, 1), (100, 1, 1, 100)],
)
def test_agent_tries_are_derived_so_the_combined_maximum_fits_the_budget_c4(
    total: int, attempts: int, deliveries: int, agent_tries: int
) -> None:
    budget = RetryBudget(total, attempts, deliveries)
    assert budget.agent_max_tries == agent_tries
    assert budget.combined_max_tries <= total


def test_budget_factors_must_be_positive_c4() -> None:
    with pytest.raises(SettingsError, match=">= 1"):
        RetryBudget(10, 0)
    with pytest.raises(SettingsError, match="raise RETRY_BUDGET"):
        RetryBudget(5, 3, 2)


def test_full_jitter_grows_exponentially_up_to_the_cap_e9() -> None:
    always_max = lambda: 0.999999  # noqa: E731
    ceilings = [
        full_jitter_delay(n, base_seconds=0.5, max_seconds=3.0, random=always_max)
        for n in range(1, 6)
    ]
    assert ceilings == pytest.approx([0.5, 1.0, 2.0, 3.0, 3.0], rel=1e-5)
    assert full_jitter_delay(4, base_seconds=0.5, max_seconds=3.0, random=lambda: 0.0) == 0.0


def test_full_jitter_spreads_delays_over_the_whole_range_e9() -> None:
    source = random.Random(7)
    delays = [
        full_jitter_delay(3, base_seconds=1.0, max_seconds=10.0, random=source.random)
        for _ in range(2000)
    ]
    assert all(0.0 <= delay < 4.0 for delay in delays)
    assert min(delays) < 0.1
    assert max(delays) > 3.9
    with pytest.raises(ValueError, match="1-based"):
        full_jitter_delay(0, base_seconds=1.0, max_seconds=1.0, random=source.random)


def delay_after(
    tries_done: int, *, max_tries: int = 10, deadline_in: float = 3600.0, base: float = 1.0
) -> float | None:
    return next_retry_delay(
        tries_done=tries_done,
        max_tries=max_tries,
        now=NOW,
        deadline=NOW + timedelta(seconds=deadline_in),
        base_seconds=base,
        max_seconds=8.0,
        random=lambda: 0.5,
    )


def test_agent_stops_when_its_tries_are_spent_c4() -> None:
    assert [delay_after(n, max_tries=3) for n in (1, 2, 3, 4)] == [0.5, 1.0, None, None]


def test_agent_starts_no_try_at_or_after_its_deadline_e7() -> None:
    assert delay_after(1, base=4.0, deadline_in=3.0) == 2.0
    assert delay_after(1, base=4.0, deadline_in=2.0) is None
    assert delay_after(1, base=4.0, deadline_in=0.0) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state_of(breaker: CircuitBreaker) -> BreakerState:
    """Read through a call so the type checker does not pin the state between assertions."""
    return breaker.state


def test_breaker_opens_after_consecutive_failures_and_refuses_calls_e9() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=3, reset_seconds=10.0, clock=clock)
    for _ in range(2):
        assert breaker.allow_request()
        breaker.record_failure()
    assert state_of(breaker) is BreakerState.CLOSED
    breaker.record_success()
    for _ in range(2):
        breaker.record_failure()
    assert state_of(breaker) is BreakerState.CLOSED, "a success resets the count"
    breaker.record_failure()
    assert state_of(breaker) is BreakerState.OPEN
    assert not breaker.allow_request()
    clock.now += 9.9
    assert not breaker.allow_request()


def test_breaker_half_opens_for_one_trial_that_closes_it_on_success_e9() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, reset_seconds=10.0, clock=clock)
    breaker.record_failure()
    clock.now += 10.0
    assert state_of(breaker) is BreakerState.HALF_OPEN
    assert breaker.allow_request()
    assert not breaker.allow_request(), "only one trial call while half-open"
    breaker.record_success()
    assert state_of(breaker) is BreakerState.CLOSED
    assert all(breaker.allow_request() for _ in range(5))


def test_breaker_reopens_when_the_trial_fails_e9() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=5, reset_seconds=10.0, clock=clock)
    for _ in range(5):
        breaker.record_failure()
    clock.now += 10.0
    assert breaker.allow_request()
    breaker.record_failure()
    assert state_of(breaker) is BreakerState.OPEN
    clock.now += 5.0
    assert not breaker.allow_request()
    clock.now += 5.0
    assert breaker.allow_request()
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker(failure_threshold=0, reset_seconds=1.0, clock=clock)


def test_supervisor_retries_below_the_threshold_and_gives_up_at_it_u4() -> None:
    settings = Settings(max_failures=3, long_wait_after_failures=5, retry_delay_seconds=2.0)
    first = supervisor_decision(0, NOW, settings)
    assert first == Retry(1, NOW + timedelta(seconds=2), long_wait=False)
    assert supervisor_decision(1, NOW, settings) == Retry(2, NOW + timedelta(seconds=2), False)
    given_up = supervisor_decision(2, NOW, settings)
    assert isinstance(given_up, GiveUp)
    assert given_up.failures == 3
    assert "MAX_FAILURES=3" in given_up.reason
    assert isinstance(supervisor_decision(7, NOW, settings), GiveUp)


def test_supervisor_waits_longer_past_the_long_wait_threshold_u5() -> None:
    settings = Settings(
        max_failures=5,
        retry_budget=10,
        long_wait_after_failures=2,
        retry_delay_seconds=1.0,
        long_retry_delay_seconds=60.0,
    )
    decisions = [supervisor_decision(count, NOW, settings) for count in range(5)]
    assert decisions[:4] == [
        Retry(1, NOW + timedelta(seconds=1), long_wait=False),
        Retry(2, NOW + timedelta(seconds=60), long_wait=True),
        Retry(3, NOW + timedelta(seconds=60), long_wait=True),
        Retry(4, NOW + timedelta(seconds=60), long_wait=True),
    ]
    assert isinstance(decisions[4], GiveUp)


def test_deadlines_follow_their_settings_d3_e2_u2() -> None:
    settings = Settings(
        step_timeout_seconds=30,
        claim_timeout_seconds=45,
        compensation_timeout_seconds=90,
        supervisor_window_seconds=3600,
    )
    assert step_deadline(NOW, settings) == NOW + timedelta(seconds=30)
    assert claim_deadline(NOW, settings) == NOW + timedelta(seconds=45)
    assert compensation_deadline(NOW, settings) == NOW + timedelta(seconds=90)
    assert sweep_window_start(NOW, settings) == NOW - timedelta(hours=1)


def test_every_settings_field_has_its_own_environment_name() -> None:
    names = [field.name for field in fields(Settings)]
    assert sorted(names) == sorted(ENVIRONMENT_NAMES)
    assert len(set(ENVIRONMENT_NAMES.values())) == len(names)
