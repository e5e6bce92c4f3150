"""The app's metric instruments, each declared once, and the functions that record them (C9).

OpenTelemetry API only, under the scope ``scheduler_agent_supervisor``: without a provider
every call is a no-op, so callers record unconditionally; `bind` points the instruments at
another provider. Attributes are low-cardinality (step, outcome, reason, order.state, queue,
scan), never an order or instance id nor anything about the customer. `order_finished` is for
the write that reached the final state only (C8); the backlog gauges report the last counts
given to `backlog_observed`, `backlog_counted` and `pending_observed`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

SCOPE = "scheduler_agent_supervisor"

ORDERS_RECEIVED = "sas.orders.received"
ORDERS_REJECTED = "sas.orders.rejected"
ORDERS_COMPLETED = "sas.orders.completed"
ORDERS_FAILED = "sas.orders.failed"
ORDERS_COMPENSATED = "sas.orders.compensated"
ORDERS_COMPENSATION_FAILED = "sas.orders.compensation_failed"
ORDER_DURATION = "sas.order.duration"
STEP_DURATION = "sas.step.duration"
STEP_RETRIES = "sas.step.retries"
STEP_FAILURES = "sas.step.failures"
DEADLETTERS = "sas.deadletters"
SUPERVISOR_ITEMS_READ = "sas.supervisor.items_read"
SUPERVISOR_REQUEST_CHARGE = "sas.supervisor.request_charge"
SUPERVISOR_GIVEUPS = "sas.supervisor.giveups"
BACKLOG_PENDING = "sas.backlog.pending"
BACKLOG_UNFINISHED = "sas.backlog.unfinished"
BACKLOG_OLDEST_PENDING_AGE = "sas.backlog.oldest_pending_age"

REJECTED_BACKLOG_FULL = "backlog-full"
"""`reason` of a submission refused because the backlog is at MAX_BACKLOG_ORDERS (C5)."""

FINAL_STATE_COUNTERS = {
    "Processed": ORDERS_COMPLETED,
    "Error": ORDERS_FAILED,
    "Compensated": ORDERS_COMPENSATED,
    "CompensationFailed": ORDERS_COMPENSATION_FAILED,
}
"""The counter of each final ProcessState (contracts.md)."""

DURATION_BUCKETS_SECONDS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
"""Boundaries the duration histograms advise (OpenTelemetry's HTTP duration buckets, then
minutes for orders that wait on retries and the supervisor)."""


@dataclass(frozen=True)
class _Instruments:
    counters: Mapping[str, metrics.Counter]
    order_duration: metrics.Histogram
    step_duration: metrics.Histogram


class _Gauges:
    """The last values the observable gauges report; written by the app, read by callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: int | None = None
        self.unfinished: int | None = None
        self.oldest_pending_age: float | None = None


_COUNTERS = (
    (ORDERS_RECEIVED, "{order}", "Submissions accepted: a new state record was stored (S2)"),
    (ORDERS_REJECTED, "{order}", "Submissions refused by admission control, by reason (C5)"),
    (ORDERS_COMPLETED, "{order}", "Orders that reached Processed"),
    (ORDERS_FAILED, "{order}", "Orders that reached Error"),
    (ORDERS_COMPENSATED, "{order}", "Orders that reached Compensated"),
    (ORDERS_COMPENSATION_FAILED, "{order}", "Orders that reached CompensationFailed"),
    (STEP_RETRIES, "{retry}", "Tries of a step's call the agent made again, by step"),
    (STEP_FAILURES, "{failure}", "Steps that ended without success, by step and reason"),
    (DEADLETTERS, "{message}", "Dead-lettered messages, by queue and reason"),
    (SUPERVISOR_ITEMS_READ, "{item}", "Items the supervisor's sweeps and catch-ups read (U2)"),
    (SUPERVISOR_REQUEST_CHARGE, "RU", "Cosmos DB request charge of the supervisor's scans"),
    (SUPERVISOR_GIVEUPS, "{order}", "Orders the supervisor gave up retrying (U5)"),
)

_lock = threading.Lock()
_instruments: _Instruments | None = None
_gauges = _Gauges()


def _declare(meter: Meter) -> _Instruments:
    counters = {
        name: meter.create_counter(name, unit=unit, description=description)
        for name, unit, description in _COUNTERS
    }
    meter.create_observable_gauge(
        BACKLOG_PENDING,
        callbacks=[_observed("pending")],
        unit="{order}",
        description="Pending orders, waiting to be started, as the starter counted them at "
        "the start of its last run, up to MAX_BACKLOG_ORDERS (C5)",
    )
    meter.create_observable_gauge(
        BACKLOG_UNFINISHED,
        callbacks=[_observed("unfinished")],
        unit="{order}",
        description="Unfinished orders (Pending, Processing, Compensating), the backlog "
        "MAX_BACKLOG_ORDERS bounds, as the starter or admission control last counted them, up "
        "to that bound (C5)",
    )
    meter.create_observable_gauge(
        BACKLOG_OLDEST_PENDING_AGE,
        callbacks=[_observed("oldest_pending_age")],
        unit="s",
        description="How long the oldest claimable Pending order the starter read has waited",
    )
    return _Instruments(
        counters=counters,
        order_duration=meter.create_histogram(
            ORDER_DURATION,
            unit="s",
            description="From an order's submission to its final state, by order.state",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_SECONDS,
        ),
        step_duration=meter.create_histogram(
            STEP_DURATION,
            unit="s",
            description="From an agent's request to its answer, by step and outcome",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_SECONDS,
        ),
    )


def bind(provider: MeterProvider | None = None) -> None:
    """Declare the instruments on `provider`'s meter (the global provider when None).

    The global provider's meter forwards to whatever provider the host sets later, so the
    app never needs this; a test or a host that keeps its own provider calls it.
    """
    global _instruments
    meter = (provider or metrics.get_meter_provider()).get_meter(SCOPE)
    with _lock:
        _instruments = _declare(meter)


def _get() -> _Instruments:
    global _instruments
    with _lock:
        if _instruments is None:
            _instruments = _declare(metrics.get_meter(SCOPE))
        return _instruments


def _add(name: str, amount: float = 1, attributes: Mapping[str, str] | None = None) -> None:
    _get().counters[name].add(amount, attributes=attributes)


def order_received() -> None:
    """A submission stored a new state record (S2)."""
    _add(ORDERS_RECEIVED)


def order_rejected(reason: str) -> None:
    """Admission control refused a submission (C5); `reason` is a short code."""
    _add(ORDERS_REJECTED, attributes={"reason": reason})


def order_finished(state: str, *, submitted: datetime, finished: datetime) -> None:
    """An order reached the final ProcessState `state` (its value, e.g. ``"Error"``)."""
    counter = FINAL_STATE_COUNTERS.get(state)
    if counter is None:
        raise ValueError(f"{state!r} is not a final state")
    _add(counter)
    seconds = max(0.0, (finished - submitted).total_seconds())
    _get().order_duration.record(seconds, attributes={"order.state": state})


def step_answered(step: str, outcome: str, seconds: float) -> None:
    """An agent answered a step's request with `outcome` after `seconds` (E1, E7)."""
    _get().step_duration.record(max(0.0, seconds), attributes={"step": step, "outcome": outcome})


def step_retried(step: str) -> None:
    """An agent is about to try a step's call again (E7, C4)."""
    _add(STEP_RETRIES, attributes={"step": step})


def step_failed(step: str, reason: str) -> None:
    """A step ended without success; `reason` is a short code (refused, gave-up, ...)."""
    _add(STEP_FAILURES, attributes={"step": step, "reason": reason})


def dead_lettered(queue: str, reason: str) -> None:
    """A message of `queue` was dead-lettered with `reason` (the dead-letter watcher's)."""
    _add(DEADLETTERS, attributes={"queue": queue, "reason": reason})


def supervisor_scanned(scan: str, *, items_read: int, request_charge: float) -> None:
    """One supervisor scan read `items_read` items for `request_charge` request units (U2;
    0 where the store has no charge). `scan`: "sweep", "catch-up" (its window), or
    "beyond-window" (the catch-up's scan of the deadlines older than its window)."""
    attributes = {"scan": scan}
    _add(SUPERVISOR_ITEMS_READ, items_read, attributes)
    _add(SUPERVISOR_REQUEST_CHARGE, request_charge, attributes)


def supervisor_gave_up(recovery: str) -> None:
    """The supervisor gave up an order after MAX_FAILURES attempts (U5); `recovery` says
    whether it went to Error or to compensation."""
    _add(SUPERVISOR_GIVEUPS, attributes={"recovery": recovery})


def backlog_counted(unfinished: int) -> None:
    """Admission control's latest count of unfinished orders (C5)."""
    with _gauges.lock:
        _gauges.unfinished = unfinished


def backlog_observed(*, pending: int, unfinished: int) -> None:
    """The starter's counts at the start of a run: Pending orders and unfinished ones (C5)."""
    with _gauges.lock:
        _gauges.pending = pending
        _gauges.unfinished = unfinished


def pending_observed(oldest_since: datetime | None, *, now: datetime) -> None:
    """The age at `now` of the oldest Pending order, Pending since `oldest_since` (None: no
    order is Pending, age 0) (D1, C9)."""
    age = 0.0 if oldest_since is None else max(0.0, (now - oldest_since).total_seconds())
    with _gauges.lock:
        _gauges.oldest_pending_age = age


def _observed(field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """A gauge's callback: the value `_gauges` holds under `field`, none until one is set."""

    def observe(options: CallbackOptions) -> Iterable[Observation]:
        with _gauges.lock:
            value = getattr(_gauges, field)
        return [] if value is None else [Observation(value)]

    return observe


def reset_gauges() -> None:
    """Forget what the gauges last saw (a new process state, e.g. between tests)."""
    global _gauges
    with _lock:
        _gauges = _Gauges()
