"""The rules that deadlines, budgets and thresholds drive (D3, E1, E2, E7, E9, U2, U4, U5, C2, C4).

Each value is a plain number passed in. `RetryBudget` (C4) derives an agent's tries from the
one end-to-end budget; `AgentPolicy` and `next_retry_delay` give its full-jitter backoff,
never past the deadline (E7, E9); `CircuitBreaker` (E9) runs on an injected clock.
`SupervisorPolicy` and `supervisor_decision` (U2, U4, U5) set how far back a sweep and its
catch-up look, and whether to retry soon, retry later or give up; `ScanBounds` bounds one scan
(U2); `Timeouts` and the deadline helpers give each CompleteBy (D3, E2, C2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

AGENT_TRANSPORT_SERVICEBUS = "servicebus"
"""E1: the agent is a worker behind the Service Bus request/response queue pair."""
AGENT_TRANSPORT_ACTIVITY = "activity"
"""E1: the agent runs as an activity that the orchestrator races against its timer."""


class RetryBudgetTooSmall(ValueError):
    """The budget leaves the agent no try of its own (C4)."""


class CatchUpWindowTooNarrow(ValueError):
    """The catch-up would look at no deadline the sweep does not already look at (U2)."""


@dataclass(frozen=True)
class RetryBudget:
    """The one end-to-end retry budget of an order (C4).

    `supervisor_attempts` is how many attempts the supervisor allows (its failure threshold)
    and `deliveries_per_request` how often messaging may deliver one agent request. The
    agent gets what is left: `total_tries // (supervisor_attempts * deliveries_per_request)`.
    """

    total_tries: int
    supervisor_attempts: int
    deliveries_per_request: int = 1

    def __post_init__(self) -> None:
        if min(self.total_tries, self.supervisor_attempts, self.deliveries_per_request) < 1:
            raise ValueError(f"every factor of the retry budget must be >= 1: {self}")
        if self.agent_max_tries < 1:
            raise RetryBudgetTooSmall(
                f"a budget of {self.total_tries} tries is smaller than "
                f"{self.supervisor_attempts} supervisor attempts x "
                f"{self.deliveries_per_request} deliveries per request: the agent gets no try"
            )

    @property
    def agent_max_tries(self) -> int:
        return self.total_tries // (self.supervisor_attempts * self.deliveries_per_request)

    @property
    def combined_max_tries(self) -> int:
        """Worst case of calls to the remote service for one order; never above the budget."""
        return self.agent_max_tries * self.supervisor_attempts * self.deliveries_per_request


@dataclass(frozen=True)
class Timeouts:
    """How long a claim, a step and a compensation run may take (D3, E2, C2)."""

    claim_seconds: float
    step_seconds: float
    compensation_seconds: float


@dataclass(frozen=True)
class ScanBounds:
    """The bounds of one paged scan of the state store (U2)."""

    page_size: int
    max_items: int
    max_pages: int


@dataclass(frozen=True)
class SupervisorPolicy:
    """What the supervisor looks at and how it treats an expired attempt (U2, U4, U5).

    `max_failures` expired attempts give the order up; from `long_wait_after_failures`
    failures on, a retry waits `long_retry_delay_seconds` instead of `retry_delay_seconds`.
    A sweep reads at most `scan`, and only deadlines of the last `window_seconds`; the
    catch-up reads at most `scan` too, over the deadlines older than that window and at
    most `catch_up_window_seconds` old, then at most `scan` again over every deadline older
    still (U2). The catch-up window must be the wider one.
    """

    max_failures: int
    retry_delay_seconds: float
    long_wait_after_failures: int
    long_retry_delay_seconds: float
    window_seconds: float
    catch_up_window_seconds: float
    scan: ScanBounds

    def __post_init__(self) -> None:
        if self.catch_up_window_seconds <= self.window_seconds:
            raise CatchUpWindowTooNarrow(
                f"the catch-up window of {self.catch_up_window_seconds:g} s does not reach "
                f"past the sweep window of {self.window_seconds:g} s"
            )


@dataclass(frozen=True)
class AgentPolicy:
    """An agent's tries and backoff (E7, E9, C4).

    `max_tries` is the agent's share of the `RetryBudget` (`agent_max_tries`).
    """

    max_tries: int
    backoff_base_seconds: float
    backoff_max_seconds: float


def claim_deadline(now: datetime, timeouts: Timeouts) -> datetime:
    """Provisional CompleteBy of a claim, before the orchestration sets its own (D3)."""
    return now + timedelta(seconds=timeouts.claim_seconds)


def step_deadline(now: datetime, timeouts: Timeouts) -> datetime:
    """CompleteBy of a step: the durable timer races the agent against it (E2)."""
    return now + timedelta(seconds=timeouts.step_seconds)


def compensation_deadline(now: datetime, timeouts: Timeouts) -> datetime:
    """CompleteBy of a compensation run; past it the supervisor reports it stalled (C2)."""
    return now + timedelta(seconds=timeouts.compensation_seconds)


def sweep_window_start(now: datetime, policy: SupervisorPolicy) -> datetime:
    """Oldest CompleteBy a sweep looks at: the time bound of every sweep (U2)."""
    return now - timedelta(seconds=policy.window_seconds)


CATCH_UP_GAP = timedelta(microseconds=1)
"""The catch-up window ends this much before the sweep window starts, so the two never
overlap: deadlines are stored to the microsecond."""


def catch_up_window(now: datetime, policy: SupervisorPolicy) -> tuple[datetime, datetime]:
    """The CompleteBy range, both ends included, that the catch-up looks at: older than
    the sweep window, at most `catch_up_window_seconds` old (U2)."""
    start = now - timedelta(seconds=policy.catch_up_window_seconds)
    return start, sweep_window_start(now, policy) - CATCH_UP_GAP


def beyond_catch_up_window_end(now: datetime, policy: SupervisorPolicy) -> datetime:
    """The newest CompleteBy of the deadlines older than the catch-up window, which the
    catch-up's last query looks at however old (U2): the moment before the window starts."""
    start, _ = catch_up_window(now, policy)
    return start - CATCH_UP_GAP


def full_jitter_delay(
    retry_number: int, *, base_seconds: float, max_seconds: float, random: Callable[[], float]
) -> float:
    """Delay before retry `retry_number` (1-based): uniform in [0, min(max, base x 2^(n-1))).

    Full jitter spreads the retries of many agents so a recovering service sees no storm.
    """
    if retry_number < 1:
        raise ValueError(f"retry_number is 1-based, got {retry_number}")
    ceiling = min(max_seconds, base_seconds * 2.0 ** (retry_number - 1))
    return random() * ceiling


def next_retry_delay(
    *,
    tries_done: int,
    max_tries: int,
    now: datetime,
    deadline: datetime,
    base_seconds: float,
    max_seconds: float,
    random: Callable[[], float],
) -> float | None:
    """Seconds to wait before the next try, or None when the agent must stop (E7, E9, C4).

    The agent stops when its share of the budget is spent or when the next try would start
    at or after its deadline: no new side effect is started past the deadline.
    """
    if tries_done >= max_tries:
        return None
    delay = full_jitter_delay(
        tries_done, base_seconds=base_seconds, max_seconds=max_seconds, random=random
    )
    if now + timedelta(seconds=delay) >= deadline:
        return None
    return delay


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class CircuitBreaker:
    """A circuit breaker guarding one remote service (E9); safe to share between threads.

    Closed: calls pass; `failure_threshold` failures in a row open it. Open: calls are
    refused until `reset_seconds` have passed on `clock`, then it is half-open and lets ONE
    trial call through; its success closes the breaker, its failure opens it again.
    """

    def __init__(
        self, *, failure_threshold: int, reset_seconds: float, clock: Callable[[], float]
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        self._threshold = failure_threshold
        self._reset_seconds = reset_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._current_state()

    def _current_state(self) -> BreakerState:
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self._reset_seconds
        ):
            self._state = BreakerState.HALF_OPEN
            self._trial_in_flight = False
        return self._state

    def allow_request(self) -> bool:
        """True when a call may go out now; in half-open, only for the one trial call."""
        with self._lock:
            state = self._current_state()
            if state is BreakerState.CLOSED:
                return True
            if state is BreakerState.HALF_OPEN and not self._trial_in_flight:
                self._trial_in_flight = True
                return True
            return False

    def record_success(self) -> None:
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._trial_in_flight = False

    def record_failure(self) -> None:
        with self._lock:
            state = self._current_state()
            self._failures += 1
            if state is BreakerState.HALF_OPEN or self._failures >= self._threshold:
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()
                self._trial_in_flight = False


@dataclass(frozen=True)
class Retry:
    """Hand the order back to the starter, claimable from `not_before` (U4, U5)."""

    failures: int
    not_before: datetime
    long_wait: bool


@dataclass(frozen=True)
class GiveUp:
    """The failure is treated as non-transient (U4)."""

    failures: int
    reason: str


def supervisor_decision(
    failure_count: int, now: datetime, policy: SupervisorPolicy
) -> Retry | GiveUp:
    """What the supervisor does with an expired attempt of a record with `failure_count`.

    The expired attempt is one more failure. Below `max_failures` the order is retried,
    after `long_retry_delay_seconds` once `long_wait_after_failures` failures have
    accumulated (U5); at `max_failures` it is given up (U4). The reason names the threshold
    as operators know it, the MAX_FAILURES of contracts.md.
    """
    failures = failure_count + 1
    if failures >= policy.max_failures:
        return GiveUp(
            failures,
            f"{failures} attempts expired without completing (MAX_FAILURES={policy.max_failures})",
        )
    if failures >= policy.long_wait_after_failures:
        delay = policy.long_retry_delay_seconds
        return Retry(failures, now + timedelta(seconds=delay), long_wait=True)
    return Retry(failures, now + timedelta(seconds=policy.retry_delay_seconds), long_wait=False)
