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
    delivery_tries,
    full_jitter_delay,
    next_retry_delay,
    step_deadline,
    supervisor_decision,
    sweep_window_start,
    tries_per_request,
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
    ("total", "steps", "attempts", "per_request"),
    [(48, 3, 3, 6), (24, 3, 3, 3), (8, 3, 3, 1), (12, 1, 3, 3), (100, 2, 1, 25)],
)
def test_each_request_draws_a_share_sized_for_a_run_its_retries_and_its_undo_c4(
    total: int, steps: int, attempts: int, per_request: int
) -> None:
    """A request per step to do it, MAX_FAILURES - 1 more to retry one failing step, and one
    per step to undo it: a run whose last step fails every attempt still fits, and the undo
    of every step is kept apart."""
    assert tries_per_request(total, steps=steps, supervisor_attempts=attempts) == per_request
    budget = RetryBudget.for_order(total, steps=steps, supervisor_attempts=attempts)
    assert budget.undo_reserve == steps * per_request
    assert (steps - 1 + attempts) * per_request <= budget.forward_limit
    assert budget.forward_limit + budget.undo_reserve == total


def test_a_budget_too_small_for_one_try_per_request_is_refused_c4() -> None:
    with pytest.raises(RetryBudgetTooSmall, match="7 tries is smaller than the 8 requests"):
        RetryBudget.for_order(7, steps=3, supervisor_attempts=3)
    with pytest.raises(RetryBudgetTooSmall, match="leaves the steps nothing"):
        RetryBudget(6, 6)


def test_the_steps_draws_never_get_more_than_is_left_above_the_reserve_c4() -> None:
    """Draws of every size, one after another as the store counts them: each gets at most
    what it drew, never below zero, and together never more than the steps' limit."""
    budget = RetryBudget(total=20, undo_reserve=6)
    for drawn in range(1, 9):
        spent, got = 0, []
        for _ in range(20):
            spent += drawn
            got.append(budget.step_tries(drawn, spent))
        assert all(0 <= each <= drawn for each in got), drawn
        assert sum(got) == budget.forward_limit == 14, drawn
        assert budget.forward_left(spent) == 0


def test_the_undos_get_the_reserve_and_what_the_steps_left_never_more_c4() -> None:
    budget = RetryBudget(total=20, undo_reserve=6)
    for steps_spent, undo_budget in ((0, 20), (10, 10), (14, 6), (40, 6)):
        assert budget.undo_left(steps_spent, 0) == undo_budget
        undo_spent, got = 0, []
        for _ in range(12):
            undo_spent += 4
            got.append(budget.undo_tries(4, steps_spent, undo_spent))
        assert all(0 <= each <= 4 for each in got)
        assert sum(got) == undo_budget, steps_spent
        assert budget.undo_left(steps_spent, undo_spent) == 0
        assert min(steps_spent, budget.forward_limit) + sum(got) <= budget.total


@pytest.mark.parametrize("deliveries", [1, 2, 3, 5])
def test_the_deliveries_of_a_request_share_its_tries_and_never_spend_more_c4(
    deliveries: int,
) -> None:
    """However many of its deliveries messaging makes, a request's calls stay within what it
    was granted: the shares add up to the grant, and a delivery past MaxDeliveryCount gets
    none; a delivery counted from 2 instead of 1 only gets less."""
    for granted in range(0, 13):
        shares = [
            delivery_tries(granted, delivery=d, deliveries=deliveries)
            for d in range(1, deliveries + 3)
        ]
        assert sum(shares) == granted
        assert shares[deliveries:] == [0, 0]
        assert shares == sorted(shares, reverse=True)
        assert max(shares) - min(shares[:deliveries]) <= 1
    with pytest.raises(ValueError, match="1-based"):
        delivery_tries(3, delivery=0, deliveries=2)


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
    first = supervisor_decision(0, NOW, policy, tries_left=5)
    assert first == Retry(1, NOW + timedelta(seconds=2), long_wait=False)
    second = supervisor_decision(1, NOW, policy, tries_left=5)
    assert second == Retry(2, NOW + timedelta(seconds=2), False)
    given_up = supervisor_decision(2, NOW, policy, tries_left=5)
    assert isinstance(given_up, GiveUp)
    assert given_up.failures == 3
    assert "MAX_FAILURES=3" in given_up.reason
    assert isinstance(supervisor_decision(7, NOW, policy, tries_left=5), GiveUp)


def test_supervisor_gives_up_below_the_threshold_once_the_retry_budget_is_spent_u4_c4() -> None:
    """A new attempt would draw from an order's retry budget: with none left for its steps,
    the supervisor gives up at once, naming the budget."""
    policy = supervisor_policy(max_failures=3, long_wait_after_failures=5)
    given_up = supervisor_decision(0, NOW, policy, tries_left=0)
    assert isinstance(given_up, GiveUp)
    assert given_up.failures == 1
    assert "retry budget for its steps is spent (RETRY_BUDGET)" in given_up.reason
    assert isinstance(supervisor_decision(0, NOW, policy, tries_left=1), Retry)


def test_supervisor_waits_longer_past_the_long_wait_threshold_u5() -> None:
    policy = supervisor_policy(
        max_failures=5,
        long_wait_after_failures=2,
        retry_delay_seconds=1.0,
        long_retry_delay_seconds=60.0,
    )
    decisions = [supervisor_decision(count, NOW, policy, tries_left=9) for count in range(5)]
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
