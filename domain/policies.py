"""Settings and the policies that use them (D3, E2, E7, E9, U2, U4, U5, U7, C4).

- `Settings`: the app settings of contracts.md (and this project's additions) with their
  defaults, parsed from the environment; a bad value fails fast with the setting's name.
- `RetryBudget` (C4): the end-to-end budget of tries is owned here; the agent's own number
  of tries is derived from it so that agent tries x message deliveries x supervisor
  attempts can never exceed it.
- `full_jitter_delay` / `next_retry_delay` (E7, E9): exponential backoff with full jitter
  from an injected random source, and never a try that would start past the deadline.
- `CircuitBreaker` (E9): closed / open / half-open on an injected clock.
- `supervisor_decision` (U4, U5): retry soon, retry after a longer wait, or give up.
- Deadline helpers for claims, steps, compensation and the sweep window (D3, E2, U2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any


class SettingsError(ValueError):
    """An app setting has a value this app cannot run with."""


@dataclass(frozen=True)
class RetryBudget:
    """The one end-to-end retry budget of an order (C4).

    `supervisor_attempts` is how many attempts the supervisor allows (MAX_FAILURES) and
    `deliveries_per_request` how often messaging may deliver one agent request. The agent
    gets what is left: `total_tries // (supervisor_attempts * deliveries_per_request)`.
    """

    total_tries: int
    supervisor_attempts: int
    deliveries_per_request: int = 1

    def __post_init__(self) -> None:
        if min(self.total_tries, self.supervisor_attempts, self.deliveries_per_request) < 1:
            raise SettingsError(f"every factor of the retry budget must be >= 1: {self}")
        if self.agent_max_tries < 1:
            raise SettingsError(
                f"RETRY_BUDGET={self.total_tries} is smaller than MAX_FAILURES="
                f"{self.supervisor_attempts} x AGENT_DELIVERY_ATTEMPTS="
                f"{self.deliveries_per_request}: raise RETRY_BUDGET or lower the others"
            )

    @property
    def agent_max_tries(self) -> int:
        return self.total_tries // (self.supervisor_attempts * self.deliveries_per_request)

    @property
    def combined_max_tries(self) -> int:
        """Worst case of calls to the remote service for one order; never above the budget."""
        return self.agent_max_tries * self.supervisor_attempts * self.deliveries_per_request


def _text(value: str, name: str) -> str:
    if not value.strip():
        raise SettingsError(f"{name} must not be empty")
    return value.strip()


def _positive_int(value: str, name: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise SettingsError(f"{name} must be a positive integer, got {value!r}") from None
    if parsed < 1:
        raise SettingsError(f"{name} must be a positive integer, got {value!r}")
    return parsed


def _seconds(value: str, name: str) -> float:
    try:
        parsed = float(value)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds, got {value!r}") from None
    if not parsed >= 0:
        raise SettingsError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return parsed


def _ncrontab(value: str, name: str) -> str:
    if len(value.split()) != 6:
        raise SettingsError(
            f"{name} must be a six-field NCRONTAB expression "
            f"('{{second}} {{minute}} {{hour}} {{day}} {{month}} {{day-of-week}}'), got {value!r}"
        )
    return value.strip()


def _queue_list(value: str, name: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


AGENT_TRANSPORT_SERVICEBUS = "servicebus"
AGENT_TRANSPORT_ACTIVITY = "activity"


def _agent_transport(value: str, name: str) -> str:
    """E1: the agent sits behind the Service Bus queue pair or runs as an activity."""
    if value not in (AGENT_TRANSPORT_SERVICEBUS, AGENT_TRANSPORT_ACTIVITY):
        raise SettingsError(f"{name} must be 'servicebus' or 'activity', got {value!r}")
    return value


def _store_kind(value: str, name: str) -> str:
    if value not in ("sqlite", "cosmos"):
        raise SettingsError(f"{name} must be 'sqlite' or 'cosmos', got {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    """App settings (contracts.md names in `ENVIRONMENT_NAMES`), with defaults."""

    orders_queue: str = "orders"
    agent_requests_queue: str = "agent-requests"
    agent_responses_queue: str = "agent-responses"
    operator_alerts_queue: str = "operator-alerts"
    reply_queues: frozenset[str] = frozenset()
    state_store: str = "sqlite"
    sqlite_directory: str = ".data"
    cosmos_database: str = "orderprocessing"
    cosmos_state_container: str = "state"
    cosmos_orders_container: str = "orders"
    starter_schedule: str = "*/2 * * * * *"
    supervisor_schedule: str = "*/15 * * * * *"
    step_timeout_seconds: float = 30.0
    claim_timeout_seconds: float = 60.0
    compensation_timeout_seconds: float = 60.0
    max_failures: int = 3
    retry_delay_seconds: float = 1.0
    long_wait_after_failures: int = 2
    long_retry_delay_seconds: float = 30.0
    retry_budget: int = 12
    agent_delivery_attempts: int = 1
    agent_backoff_base_seconds: float = 0.1
    agent_backoff_max_seconds: float = 5.0
    breaker_failure_threshold: int = 5
    breaker_reset_seconds: float = 30.0
    store_page_size: int = 100
    starter_max_claims: int = 200
    starter_max_pages: int = 20
    supervisor_window_seconds: float = 86400.0
    supervisor_max_items: int = 500
    supervisor_max_pages: int = 20
    agent_transport: str = AGENT_TRANSPORT_SERVICEBUS

    def __post_init__(self) -> None:
        RetryBudget(self.retry_budget, self.max_failures, self.agent_delivery_attempts)

    @property
    def budget(self) -> RetryBudget:
        return RetryBudget(self.retry_budget, self.max_failures, self.agent_delivery_attempts)

    @property
    def agent_max_tries(self) -> int:
        """Tries the agent may make per attempt, derived from the budget (C4)."""
        return self.budget.agent_max_tries

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Read every setting named in `ENVIRONMENT_NAMES`; absent ones keep their default."""
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = ENVIRONMENT_NAMES[field.name]
            raw = environ.get(name)
            if raw is not None:
                values[field.name] = _PARSERS[field.name](raw, name)
        return replace(cls(), **values)


ENVIRONMENT_NAMES: dict[str, str] = {
    "orders_queue": "ORDERS_QUEUE",
    "agent_requests_queue": "AGENT_REQUESTS_QUEUE",
    "agent_responses_queue": "AGENT_RESPONSES_QUEUE",
    "operator_alerts_queue": "OPERATOR_ALERTS_QUEUE",
    "reply_queues": "REPLY_QUEUES",
    "state_store": "STATE_STORE",
    "sqlite_directory": "SQLITE_DIRECTORY",
    "cosmos_database": "COSMOS_DATABASE",
    "cosmos_state_container": "COSMOS_STATE_CONTAINER",
    "cosmos_orders_container": "COSMOS_ORDERS_CONTAINER",
    "starter_schedule": "STARTER_SCHEDULE",
    "supervisor_schedule": "SUPERVISOR_SCHEDULE",
    "step_timeout_seconds": "STEP_TIMEOUT_SECONDS",
    "claim_timeout_seconds": "CLAIM_TIMEOUT_SECONDS",
    "compensation_timeout_seconds": "COMPENSATION_TIMEOUT_SECONDS",
    "max_failures": "MAX_FAILURES",
    "retry_delay_seconds": "RETRY_DELAY_SECONDS",
    "long_wait_after_failures": "LONG_WAIT_AFTER_FAILURES",
    "long_retry_delay_seconds": "LONG_RETRY_DELAY_SECONDS",
    "retry_budget": "RETRY_BUDGET",
    "agent_delivery_attempts": "AGENT_DELIVERY_ATTEMPTS",
    "agent_backoff_base_seconds": "AGENT_BACKOFF_BASE_SECONDS",
    "agent_backoff_max_seconds": "AGENT_BACKOFF_MAX_SECONDS",
    "breaker_failure_threshold": "BREAKER_FAILURE_THRESHOLD",
    "breaker_reset_seconds": "BREAKER_RESET_SECONDS",
    "store_page_size": "STORE_PAGE_SIZE",
    "starter_max_claims": "STARTER_MAX_CLAIMS",
    "starter_max_pages": "STARTER_MAX_PAGES",
    "supervisor_window_seconds": "SUPERVISOR_WINDOW_SECONDS",
    "supervisor_max_items": "SUPERVISOR_MAX_ITEMS",
    "supervisor_max_pages": "SUPERVISOR_MAX_PAGES",
    "agent_transport": "AGENT_TRANSPORT",
}
"""Field of `Settings` -> app setting name. contracts.md names are kept exactly."""

_PARSERS: dict[str, Callable[[str, str], object]] = {
    "orders_queue": _text,
    "agent_requests_queue": _text,
    "agent_responses_queue": _text,
    "operator_alerts_queue": _text,
    "reply_queues": _queue_list,
    "state_store": _store_kind,
    "sqlite_directory": _text,
    "cosmos_database": _text,
    "cosmos_state_container": _text,
    "cosmos_orders_container": _text,
    "starter_schedule": _ncrontab,
    "supervisor_schedule": _ncrontab,
    "step_timeout_seconds": _seconds,
    "claim_timeout_seconds": _seconds,
    "compensation_timeout_seconds": _seconds,
    "max_failures": _positive_int,
    "retry_delay_seconds": _seconds,
    "long_wait_after_failures": _positive_int,
    "long_retry_delay_seconds": _seconds,
    "retry_budget": _positive_int,
    "agent_delivery_attempts": _positive_int,
    "agent_backoff_base_seconds": _seconds,
    "agent_backoff_max_seconds": _seconds,
    "breaker_failure_threshold": _positive_int,
    "breaker_reset_seconds": _seconds,
    "store_page_size": _positive_int,
    "starter_max_claims": _positive_int,
    "starter_max_pages": _positive_int,
    "supervisor_window_seconds": _seconds,
    "supervisor_max_items": _positive_int,
    "supervisor_max_pages": _positive_int,
    "agent_transport": _agent_transport,
}


def claim_deadline(now: datetime, settings: Settings) -> datetime:
    """Provisional CompleteBy of a claim, before the orchestration sets its own (D3)."""
    return now + timedelta(seconds=settings.claim_timeout_seconds)


def step_deadline(now: datetime, settings: Settings) -> datetime:
    """CompleteBy of a step: the durable timer races the agent against it (E2)."""
    return now + timedelta(seconds=settings.step_timeout_seconds)


def compensation_deadline(now: datetime, settings: Settings) -> datetime:
    """CompleteBy of a compensation run; past it the supervisor reports it stalled (C2)."""
    return now + timedelta(seconds=settings.compensation_timeout_seconds)


def sweep_window_start(now: datetime, settings: Settings) -> datetime:
    """Oldest CompleteBy a sweep looks at: the time bound of every sweep (U2)."""
    return now - timedelta(seconds=settings.supervisor_window_seconds)


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


def supervisor_decision(failure_count: int, now: datetime, settings: Settings) -> Retry | GiveUp:
    """What the supervisor does with an expired attempt of a record with `failure_count`.

    The expired attempt is one more failure. Below MAX_FAILURES the order is retried, after
    LONG_RETRY_DELAY_SECONDS once LONG_WAIT_AFTER_FAILURES failures have accumulated (U5);
    at MAX_FAILURES it is given up (U4).
    """
    failures = failure_count + 1
    if failures >= settings.max_failures:
        return GiveUp(
            failures,
            f"{failures} attempts expired without completing (MAX_FAILURES="
            f"{settings.max_failures})",
        )
    if failures >= settings.long_wait_after_failures:
        delay = settings.long_retry_delay_seconds
        return Retry(failures, now + timedelta(seconds=delay), long_wait=True)
    return Retry(failures, now + timedelta(seconds=settings.retry_delay_seconds), long_wait=False)
