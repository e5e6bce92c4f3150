"""The demo's evidence: what the state store and the services' ledgers show (C1, C2, C9, U4).

Everything here is read from the final state records and from what each simulated service
performed (its ledger of side effects, with their times), never from the app's own
counters: the report proves the invariants with the evidence a user or an auditor would
have.

- Net effects (C1, U4, E8): for an order that ended ``Compensated`` or in ``Error``, every
  side effect a service performed for it was undone: actions minus compensations is zero at
  every service. Error comes only with nothing left: its first step declined (the service
  performs nothing for that request, however often it is delivered), a give-up before any
  step, or a give-up's compensation that undid its step in doubt (CompensationEndsIn).
  (``CompensationFailed`` is the state that says something may be left.)
- Steps after compensation (C1, E7): once an order began compensating, no service performs
  another action for it. It began at its record's CompensationStartedAt, set by the write
  that moved it to Compensating (a step failing for good, or the supervisor giving up) and
  kept after the compensation ends: an action performed at or after it is a violation.
- Step latency: a step's time runs from the completion of the step before it (for the
  first step, from the order's acceptance) to its own completion, both from the record's
  compensation log; retries and supervisor retries within it are part of it.
- Supervisor work (U4, U5, C2): FailureCount counts each expired attempt, retried or given
  up (at MAX_FAILURES); CompensationFailures each stalled compensation, resumed or, at
  MAX_FAILURES, left to an operator.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from domain.records import ProcessState, StateRecord
from tools.demo.report import percentile
from tools.simulators.services import SERVICES, Role, SideEffect

COMPENSATION_STATES = frozenset(
    {ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED}
)


@dataclass(frozen=True)
class ServiceLedger:
    """What one simulated service performed: its side effects, with their times."""

    service: str
    entries: Sequence[SideEffect]


@dataclass
class Evidence:
    compensations: dict[str, int]
    supervisor: dict[str, int]
    net_effects: dict[str, dict[str, int]]
    net_effect_orders: list[str]
    steps_after_compensation: list[str]
    step_latency_ms: dict[str, dict[str, float | None]]
    compensation_began: dict[str, str] = field(default_factory=dict)
    start_latency_ms: dict[str, float | None] = field(default_factory=dict)
    """From an order's acceptance (its record's CreatedAt) to the first side effect a service
    performed for it, the first agent request that reached a service: p50 and p95."""


def gather(
    records: Mapping[str, StateRecord | None],
    ledgers: Iterable[ServiceLedger],
    *,
    max_failures: int,
    steps: Sequence[str],
) -> Evidence:
    """The evidence about `records` (by order id) in `ledgers`; `steps` are the step names
    in workflow order."""
    found = {order_id: record for order_id, record in records.items() if record is not None}
    ledgers = list(ledgers)
    entries = _by_order(ledgers)
    began = _compensation_began(found)
    return Evidence(
        compensations=_compensations(found.values()),
        supervisor=_supervisor(found.values(), max_failures),
        net_effects=_net_effects(found, ledgers, entries),
        net_effect_orders=_unbalanced(found, entries),
        steps_after_compensation=_actions_after(began, entries),
        step_latency_ms=_step_latency(found.values(), steps),
        compensation_began={order_id: at.isoformat() for order_id, at in sorted(began.items())},
        start_latency_ms=_start_latency(found, entries),
    )


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _by_order(ledgers: Iterable[ServiceLedger]) -> dict[str, list[tuple[str, SideEffect]]]:
    by_order: dict[str, list[tuple[str, SideEffect]]] = defaultdict(list)
    for ledger in ledgers:
        for entry in ledger.entries:
            by_order[entry.order_id].append((ledger.service, entry))
    return by_order


def _compensation_began(records: Mapping[str, StateRecord]) -> dict[str, datetime]:
    """For each order that began compensating, its record's CompensationStartedAt."""
    return {
        order_id: record.compensation_started_at
        for order_id, record in records.items()
        if record.compensation_started_at is not None
    }


def _actions_after(
    began: Mapping[str, datetime], entries: Mapping[str, list[tuple[str, SideEffect]]]
) -> list[str]:
    return [
        f"{order_id}: {service} performed {entry.kind.value} {entry.resource_id} (attempt "
        f"{entry.attempt}) at {entry.at}, after compensation began at {start.isoformat()}"
        for order_id, start in sorted(began.items())
        for service, entry in entries.get(order_id, ())
        if entry.role is Role.ACTION and _at(entry.at) >= start
    ]


def _net_effects(
    records: Mapping[str, StateRecord],
    ledgers: Sequence[ServiceLedger],
    entries: Mapping[str, list[tuple[str, SideEffect]]],
) -> dict[str, dict[str, int]]:
    """Per service, over the orders that must have left nothing: performed, undone, and the
    difference."""
    left_nothing = _left_nothing(records)
    effects: dict[str, dict[str, int]] = {}
    for ledger in ledgers:
        declaration = SERVICES[ledger.service]
        performed = undone = 0
        for order_id in left_nothing:
            for service, entry in entries.get(order_id, ()):
                if service == ledger.service:
                    performed += entry.role is Role.ACTION
                    undone += entry.role is Role.COMPENSATION
        effects[ledger.service] = {
            declaration.performed_status: performed,
            declaration.compensated_status: undone,
            "net": performed - undone,
        }
    return effects


def _unbalanced(
    records: Mapping[str, StateRecord], entries: Mapping[str, list[tuple[str, SideEffect]]]
) -> list[str]:
    """Orders that must have left nothing with a side effect left at some service."""
    unbalanced = []
    for order_id in _left_nothing(records):
        net: dict[str, int] = defaultdict(int)
        for service, entry in entries.get(order_id, ()):
            net[service] += 1 if entry.role is Role.ACTION else -1
        left = {service: count for service, count in net.items() if count}
        if left:
            unbalanced.append(f"{order_id}: {left}")
    return unbalanced


def _left_nothing(records: Mapping[str, StateRecord]) -> list[str]:
    """The orders that must have left nothing behind: Compensated, and every order in Error,
    whichever way it got there (C1, U4, E8)."""
    return sorted(
        order_id
        for order_id, record in records.items()
        if record.process_state in (ProcessState.COMPENSATED, ProcessState.ERROR)
    )


def _compensations(records: Iterable[StateRecord]) -> dict[str, int]:
    states = [record.process_state for record in records]
    return {
        "started": sum(1 for state in states if state in COMPENSATION_STATES),
        "completed": states.count(ProcessState.COMPENSATED),
        "failed": states.count(ProcessState.COMPENSATION_FAILED),
    }


def _supervisor(records: Iterable[StateRecord], max_failures: int) -> dict[str, int]:
    retries = gave_up = resumed = stalled = 0
    for record in records:
        given_up = record.failure_count >= max_failures
        retries += record.failure_count - given_up
        gave_up += given_up
        left = record.compensation_failures >= max_failures
        resumed += record.compensation_failures - left
        stalled += left
    return {
        "retries": retries,
        "gave_up": gave_up,
        "compensations_resumed": resumed,
        "compensations_stalled": stalled,
    }


def _start_latency(
    records: Mapping[str, StateRecord], entries: Mapping[str, list[tuple[str, SideEffect]]]
) -> dict[str, float | None]:
    times = [
        (min(_at(entry.at) for _, entry in entries[order_id]) - record.created_at).total_seconds()
        * 1000
        for order_id, record in records.items()
        if entries.get(order_id)
    ]
    return {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95)}


def _step_latency(
    records: Iterable[StateRecord], steps: Sequence[str]
) -> dict[str, dict[str, float | None]]:
    durations: dict[str, list[float]] = {step: [] for step in steps}
    for record in records:
        started = record.created_at
        for entry in record.compensation_log:
            durations.setdefault(entry.step, []).append(
                (entry.completed_at - started).total_seconds() * 1000
            )
            started = entry.completed_at
    return {
        step: {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95)}
        for step, times in durations.items()
    }
