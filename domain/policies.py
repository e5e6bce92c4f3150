"""The rules that deadlines, budgets and thresholds drive (D3, E1, E2, E7, E9, U2, U4, U5, C2, C4).

Each value is a plain number passed in. `RetryBudget` (C4) is an order's one count of calls,
which each request draws its tries from, and `delivery_tries` splits a request's tries over
its deliveries; `AgentPolicy` and `next_retry_delay` give the agent's full-jitter backoff,
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
    """The budget leaves a request of an order no try (C4)."""


class CatchUpWindowTooNarrow(ValueError):
    """The catch-up would look at no deadline the sweep does not already look at (U2)."""


DEFAULT_RETRY_BUDGET = 48
"""RETRY_BUDGET's default: six tries per request for an order of three steps with three
supervisor attempts (`tries_per_request`)."""
DEFAULT_MAX_FAILURES = 3
"""MAX_FAILURES's default (U4)."""


def tries_per_request(total: int, *, steps: int, supervisor_attempts: int) -> int:
    """How many tries each request of a new order draws from its budget of `total` (C4): the
    budget split into `2 x steps + supervisor_attempts - 1` requests, so that one request per
    step does it, one more per retry retries a failing step `supervisor_attempts - 1` times,
    and one per step undoes it."""
    requests = 2 * steps + supervisor_attempts - 1
    if min(total, steps, supervisor_attempts) < 1 or total < requests:
        raise RetryBudgetTooSmall(
            f"a budget of {total} tries is smaller than the {requests} requests of an order "
            f"of {steps} steps with {supervisor_attempts} supervisor attempts: one to do each "
            "step, one to undo it, and one per retry"
        )
    return total // requests


@dataclass(frozen=True)
class RetryBudget:
    """The one durable count of an order's calls to its remote services (C4).

    Fixed when the order is accepted: `total` tries for its whole life, spent by every agent
    try, redelivery, supervisor retry, compensation resume and operator action, for each
    request drawn in advance. The steps' requests may draw down to `undo_reserve`, kept for
    the undo of what completed (C1); the undos draw from the reserve and whatever the steps
    left. The record counts both draws apart (`TriesSpent`, `UndoTriesSpent`) because they
    are blind increments: a draw may ask for more than is left, and what fits is worked out
    afterwards from the count it returns (`step_tries`, `undo_tries`), never below zero, so
    an over-draw of the steps never eats into the reserve.
    """

    total: int
    undo_reserve: int

    def __post_init__(self) -> None:
        if not 0 <= self.undo_reserve < self.total:
            raise RetryBudgetTooSmall(
                f"a budget of {self.total} tries leaves the steps nothing after the "
                f"{self.undo_reserve} kept to undo them"
            )

    @classmethod
    def for_order(cls, total: int, *, steps: int, supervisor_attempts: int) -> RetryBudget:
        """The budget of a new order of `steps` steps: one request per step is kept to undo
        it (`tries_per_request`)."""
        per_request = tries_per_request(total, steps=steps, supervisor_attempts=supervisor_attempts)
        return cls(total, steps * per_request)

    @property
    def forward_limit(self) -> int:
        """The most tries the steps' requests may spend, retries and resubmits included."""
        return self.total - self.undo_reserve

    def forward_left(self, spent: int) -> int:
        """Tries a new request of a step may still get, after `spent` (`TriesSpent`)."""
        return max(0, self.forward_limit - spent)

    def undo_left(self, spent: int, undo_spent: int) -> int:
        """Tries a new undo may still get: the reserve and what the steps left of their
        limit, less `undo_spent` (`UndoTriesSpent`)."""
        return max(0, self.total - min(spent, self.forward_limit) - undo_spent)

    def step_tries(self, drawn: int, spent_after: int) -> int:
        """What a step's request got of the `drawn` tries it asked for, given `spent_after`,
        the count its draw returned: the part that fit, 0 to `drawn`."""
        return min(drawn, self.forward_left(spent_after - drawn))

    def undo_tries(self, drawn: int, spent: int, undo_spent_after: int) -> int:
        """What an undo's request got of the `drawn` tries it asked for, given the counts its
        draw returned: the part that fit, 0 to `drawn`."""
        return min(drawn, self.undo_left(spent, undo_spent_after - drawn))


def delivery_tries(granted: int, *, delivery: int, deliveries: int) -> int:
    """The tries of delivery number `delivery` (1-based) of a request granted `granted`,
    when messaging may deliver it `deliveries` times (C4, E9): an even split, the remainder
    to the earliest, so the tries of every delivery together never exceed the grant. The
    agent cannot know what an earlier delivery spent, so each keeps to its own share; a
    delivery past `deliveries` gets none."""
    if delivery < 1 or deliveries < 1:
        raise ValueError(f"delivery and deliveries are 1-based, got {delivery} of {deliveries}")
    if delivery > deliveries:
        return 0
    share, remainder = divmod(granted, deliveries)
    return share + (1 if delivery <= remainder else 0)


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
    """An agent's backoff (E7, E9); its tries come with each request (C4)."""

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
    failure_count: int, now: datetime, policy: SupervisorPolicy, *, tries_left: int
) -> Retry | GiveUp:
    """What the supervisor does with an expired attempt of a record with `failure_count`,
    whose steps may still get `tries_left` tries of its retry budget (C4).

    The expired attempt is one more failure. Below `max_failures` the order is retried,
    after `long_retry_delay_seconds` once `long_wait_after_failures` failures have
    accumulated (U5); at `max_failures`, or when no try is left for a new attempt to spend,
    it is given up (U4). The reason names the threshold as operators know it, the
    MAX_FAILURES of contracts.md, or the spent budget.
    """
    failures = failure_count + 1
    if failures >= policy.max_failures:
        return GiveUp(
            failures,
            f"{failures} attempts expired without completing (MAX_FAILURES={policy.max_failures})",
        )
    if tries_left < 1:
        return GiveUp(
            failures,
            f"{failures} attempts expired without completing and the order's retry budget "
            "for its steps is spent (RETRY_BUDGET)",
        )
    if failures >= policy.long_wait_after_failures:
        delay = policy.long_retry_delay_seconds
        return Retry(failures, now + timedelta(seconds=delay), long_wait=True)
    return Retry(failures, now + timedelta(seconds=policy.retry_delay_seconds), long_wait=False)
