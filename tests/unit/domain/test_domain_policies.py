"""Budget, backoff, breaker, deadlines and supervisor decisions (D3, E2, E7, E9, U2, U4, U5, C4)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from domain.policies import (
    BreakerState,
    CatchUpWindowTooNarrow,
    CircuitBreaker,
    GiveUp,
    Retry,
    RetryBudget,
    RetryBudgetTooSmall,
    ScanBounds,
    SupervisorPolicy,
    Timeouts,
    beyond_catch_up_window_end,
    catch_up_window,
    claim_deadline,
    compensation_deadline,
    full_jitter_delay,
    next_retry_delay,
    step_deadline,
    supervisor_decision,
    sweep_window_start,
)

NOW = datetime(2026, 7, 1, tzinfo=UTC)
SCAN = ScanBounds(page_size=100, max_items=500, max_pages=20)


def supervisor_policy(
    *,
    max_failures: int,
    long_wait_after_failures: int,
    retry_delay_seconds: float = 1.0,
    long_retry_delay_seconds: float = 30.0,
    window_seconds: float = 86400.0,
    catch_up_window_seconds: float = 30 * 86400.0,
) -> SupervisorPolicy:
    return SupervisorPolicy(
        max_failures=max_failures,
        retry_delay_seconds=retry_delay_seconds,
        long_wait_after_failures=long_wait_after_failures,
        long_retry_delay_seconds=long_retry_delay_seconds,
        window_seconds=window_seconds,
        catch_up_window_seconds=catch_up_window_seconds,
        scan=SCAN,
    )


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
    with pytest.raises(ValueError, match=">= 1"):
        RetryBudget(10, 0)
    with pytest.raises(RetryBudgetTooSmall, match="5 tries is smaller than 3 supervisor attempts"):
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
    policy = supervisor_policy(max_failures=3, long_wait_after_failures=5, retry_delay_seconds=2.0)
    first = supervisor_decision(0, NOW, policy)
    assert first == Retry(1, NOW + timedelta(seconds=2), long_wait=False)
    assert supervisor_decision(1, NOW, policy) == Retry(2, NOW + timedelta(seconds=2), False)
    given_up = supervisor_decision(2, NOW, policy)
    assert isinstance(given_up, GiveUp)
    assert given_up.failures == 3
    assert "MAX_FAILURES=3" in given_up.reason
    assert isinstance(supervisor_decision(7, NOW, policy), GiveUp)


def test_supervisor_waits_longer_past_the_long_wait_threshold_u5() -> None:
    policy = supervisor_policy(
        max_failures=5,
        long_wait_after_failures=2,
        retry_delay_seconds=1.0,
        long_retry_delay_seconds=60.0,
    )
    decisions = [supervisor_decision(count, NOW, policy) for count in range(5)]
    assert decisions[:4] == [
        Retry(1, NOW + timedelta(seconds=1), long_wait=False),
        Retry(2, NOW + timedelta(seconds=60), long_wait=True),
        Retry(3, NOW + timedelta(seconds=60), long_wait=True),
        Retry(4, NOW + timedelta(seconds=60), long_wait=True),
    ]
    assert isinstance(decisions[4], GiveUp)


def test_deadlines_follow_their_timeouts_and_the_sweep_window_d3_e2_u2() -> None:
    timeouts = Timeouts(claim_seconds=45, step_seconds=30, compensation_seconds=90)
    assert step_deadline(NOW, timeouts) == NOW + timedelta(seconds=30)
    assert claim_deadline(NOW, timeouts) == NOW + timedelta(seconds=45)
    assert compensation_deadline(NOW, timeouts) == NOW + timedelta(seconds=90)
    policy = supervisor_policy(max_failures=3, long_wait_after_failures=2, window_seconds=3600)
    assert sweep_window_start(NOW, policy) == NOW - timedelta(hours=1)


def test_the_catch_up_looks_only_past_the_sweep_window_up_to_its_own_u2() -> None:
    policy = supervisor_policy(
        max_failures=3,
        long_wait_after_failures=2,
        window_seconds=3600,
        catch_up_window_seconds=2 * 86400,
    )
    start, end = catch_up_window(NOW, policy)
    assert start == NOW - timedelta(days=2)
    assert end == sweep_window_start(NOW, policy) - timedelta(microseconds=1)
    assert beyond_catch_up_window_end(NOW, policy) == start - timedelta(microseconds=1)
    with pytest.raises(CatchUpWindowTooNarrow):
        supervisor_policy(
            max_failures=3,
            long_wait_after_failures=2,
            window_seconds=3600,
            catch_up_window_seconds=3600,
        )
