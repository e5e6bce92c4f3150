"""The chaos run's invariants, each checked on evidence outside the app: the services' ledger
journal, the state store, the reply queue, the operator alerts queue and the dead-letter queue
(never the app's own counters). The demo's evidence (`demo.evidence.gather`: net effects,
actions after compensation began) and its lost-order rule (`demo.report.lost_orders`) are
reused as they are.

- ``lost``: an accepted order without a record (C5 rejections aside); ``stuck``: a record
  without a final state when the settle time ran out (C10, U4).
- ``side_effect_at_most_once``: at every service, per order, at most one action and at most
  one compensation performed (E7, C8).
- ``compensated_net_zero``: a ``Compensated`` order, and every order in ``Error`` (its first
  step declined, or a give-up, compensated or not), left nothing behind (C1, U4, E8).
- ``no_side_effect_after_compensation_began`` (C1, E7).
- ``no_stale_fence_write_accepted``: replaying each service's journal in order, no side effect
  was performed by an attempt lower than the order's fence at that moment; and in the
  schedulers' Durable histories, no fenced state-store write applied for an attempt that the
  orchestration asked for after a later attempt of the same order had started (D4, E7:
  `stale_state_writes`).
- ``processed_matches_ledgers``: a ``Processed`` order's compensation log names, for every
  step, the one side effect its service performed for the order, never undone: the state
  store and the services agree (D4, E5, C1).
- ``operator_alerted``: every ``Error`` order has an ``order-error`` alert and every
  ``CompensationFailed`` order a ``compensation-failed`` one (E8, C2).
- ``final_status_replied``: every order in a final state has that final status on its reply
  queue, all its final status messages under one stable message id (R1, R2).
- ``bad_submissions_dead_lettered``: every conflicting and every malformed submission is in
  the orders queue's dead-letter queue with a reason (S3).
- ``ledgers_survive_restart``: a services process restarted after a kill holds every side
  effect its ledgers held before it (E7, C8), from the services' ``GET /stats`` just before
  the kill and just after the restart (`forgotten_side_effects`; the run reads them).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from devhost.durable.history import EventType

from domain.contracts import AlertKind, OrderStatus
from domain.records import (
    InstanceId,
    ProcessState,
    RecordFormatError,
    StateRecord,
    parse_utc,
)
from domain.workflow import declaration as step_declaration
from tools.demo.client import Workload
from tools.demo.evidence import Evidence, ServiceLedger, gather
from tools.demo.report import FINAL_STATES, lost_orders
from tools.simulators.services import SERVICES, Role, SideEffect
from tools.simulators.services.journal import LedgerJournal
from tools.simulators.services.ledger import Ledger, restore_ledgers

FINAL_STATUS = {
    ProcessState.PROCESSED: OrderStatus.COMPLETED,
    ProcessState.ERROR: OrderStatus.FAILED,
    ProcessState.COMPENSATED: OrderStatus.COMPENSATED,
    ProcessState.COMPENSATION_FAILED: OrderStatus.COMPENSATION_FAILED,
}
ALERT_FOR = {
    ProcessState.ERROR: AlertKind.ORDER_ERROR,
    ProcessState.COMPENSATION_FAILED: AlertKind.COMPENSATION_FAILED,
}
SHOWN = 10
"""Violations listed per invariant in the report (all are counted)."""


@dataclass(frozen=True)
class QueueMessage:
    message_id: str | None
    body: Mapping[str, Any]
    reason: str | None = None


@dataclass
class Findings:
    invariants: dict[str, list[str]]
    """Per invariant, its violations (empty: it held)."""
    evidence: Evidence
    rejected: list[str]

    @property
    def broken(self) -> list[str]:
        return [f"{name}: {len(found)}" for name, found in self.invariants.items() if found]

    def to_json(self) -> dict[str, Any]:
        return {
            name: {"held": not found, "violations": len(found), "examples": found[:SHOWN]}
            for name, found in self.invariants.items()
        }


def read_ledgers(journal_path: Path) -> dict[str, Ledger]:
    """Every service's ledger as its journal holds it (read after the services stopped)."""
    ledgers = {name: Ledger(service) for name, service in SERVICES.items()}
    if journal_path.exists():
        restore_ledgers(LedgerJournal(journal_path), ledgers)
    return ledgers


def check(
    records: Mapping[str, StateRecord | None],
    workload: Workload,
    journal_path: Path,
    *,
    replies: Sequence[QueueMessage],
    alerts: Sequence[QueueMessage],
    dead_letters: Sequence[QueueMessage],
    max_failures: int,
    steps: Sequence[str],
    ledgers_forgotten: Sequence[str] = (),
    histories: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> Findings:
    """Every invariant on the evidence; ``ledgers_forgotten`` are the services restarts that
    lost side effects (`forgotten_side_effects` of each restart), ``histories`` the
    orchestration histories of the schedulers (`stale_state_writes`)."""
    ledgers = read_ledgers(journal_path)
    evidence = gather(
        records,
        [ServiceLedger(name, ledger.entries()) for name, ledger in ledgers.items()],
        max_failures=max_failures,
        steps=steps,
    )
    rejected = sorted(
        {
            str(m.body.get("orderId"))
            for m in replies
            if m.body.get("status") == OrderStatus.REJECTED.value
        }
    )
    found = {order_id: r for order_id, r in records.items() if r is not None}
    return Findings(
        invariants={
            "lost": lost_orders(records, rejected),
            "stuck": sorted(
                f"{order_id}: {record.process_state.value}"
                for order_id, record in found.items()
                if record.process_state.value not in FINAL_STATES
            ),
            "side_effect_at_most_once": _repeated_side_effects(ledgers),
            "compensated_net_zero": evidence.net_effect_orders,
            "no_side_effect_after_compensation_began": evidence.steps_after_compensation,
            "no_stale_fence_write_accepted": stale_writes(journal_path)
            + stale_state_writes(histories or {}),
            "processed_matches_ledgers": _processed_disagreements(found, ledgers),
            "operator_alerted": _unalerted(found, alerts),
            "final_status_replied": _unreplied(found, replies),
            "bad_submissions_dead_lettered": _not_dead_lettered(workload, dead_letters),
            "ledgers_survive_restart": list(ledgers_forgotten),
        },
        evidence=evidence,
        rejected=rejected,
    )


def _repeated_side_effects(ledgers: Mapping[str, Ledger]) -> list[str]:
    counts: Counter[tuple[str, str, Role]] = Counter()
    for name, ledger in ledgers.items():
        for entry in ledger.entries():
            counts[(name, entry.order_id, entry.role)] += 1
    return sorted(
        f"{order_id}: {service} {role.value} performed {count} times"
        for (service, order_id, role), count in counts.items()
        if count > 1
    )


def _processed_disagreements(
    records: Mapping[str, StateRecord], ledgers: Mapping[str, Ledger]
) -> list[str]:
    by_order: dict[tuple[str, str], list[SideEffect]] = defaultdict(list)
    for name, ledger in ledgers.items():
        for entry in ledger.entries():
            by_order[(name, entry.order_id)].append(entry)
    problems = []
    for order_id, record in sorted(records.items()):
        if record.process_state is not ProcessState.PROCESSED or not record.steps:
            continue
        logged = {entry.step: entry.reference for entry in record.compensation_log}
        for step in record.steps:
            service = step_declaration(step.name).agent
            effects = by_order.get((service, order_id), [])
            actions = [e.resource_id for e in effects if e.role is Role.ACTION]
            undone = [e.resource_id for e in effects if e.role is Role.COMPENSATION]
            if actions != [logged.get(step.name)] or undone:
                problems.append(
                    f"{order_id}: {step.name} logged {logged.get(step.name)!r}, {service} "
                    f"performed {actions} and undid {undone}"
                )
    return problems


def side_effects(stats: Mapping[str, Any]) -> int:
    """Actions plus compensations a service's ``GET /stats`` counts in its ledger."""
    per_order = stats.get("side_effects_per_order", {})
    return sum(sum(counts.values()) for counts in per_order.values())


def forgotten_side_effects(
    before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """The services whose ledgers hold fewer side effects after a restart than before the
    kill, from every service's ``GET /stats`` then (by service name): a restart that forgot
    side effects forgot their idempotency keys and fences too (E7, C8)."""
    held = {name: side_effects(stats) for name, stats in after.items()}
    return [
        f"{name}: {side_effects(before[name])} side effects before the kill, "
        f"{held.get(name, 0)} after"
        for name in sorted(before)
        if held.get(name, 0) < side_effects(before[name])
    ]


def stale_writes(journal_path: Path) -> list[str]:
    """Side effects a service performed for an attempt below the order's fence then."""
    if not journal_path.exists():
        return []
    fences: dict[tuple[str, str], int] = defaultdict(int)
    found = []
    for number, event in LedgerJournal(journal_path).events():
        key = (str(event["service"]), str(event["orderId"]))
        attempt = int(event["attempt"])
        if (
            event["event"] not in ("fence", "tombstone", "decline", "dispatch")
            and attempt < fences[key]
        ):
            found.append(
                f"{key[1]}: {key[0]} performed {event['event']} for attempt {attempt} after "
                f"attempt {fences[key]} (journal line {number})"
            )
        fences[key] = max(fences[key], attempt)
    return found


def stale_state_writes(histories: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Fenced state-store writes applied for an attempt after a later attempt had started.

    ``histories``: every orchestration instance's history (instance id ``{OrderID}:{attempt}``,
    D2) as the Durable backend recorded it. A fenced write is an activity whose input carries
    the orchestration's time ``at`` and whose result says whether the write ``applied``; one
    that applied although its ``at`` is later than the ExecutionStarted of a later attempt of
    the order ran after that attempt's claim moved the fence, which the state store must have
    refused (D4). A write asked for before that start is not judged here: the services'
    journals and the stateful property tests cover what this evidence cannot order.
    """
    started: defaultdict[str, dict[int, datetime]] = defaultdict(dict)
    applied: list[tuple[InstanceId, str, datetime]] = []
    for instance_id, events in histories.items():
        try:
            instance = InstanceId.parse(instance_id)
        except RecordFormatError:
            continue  # not an order attempt
        scheduled: dict[int, tuple[str, datetime]] = {}
        for event in events:
            kind = event.get("EventType")
            if kind == EventType.EXECUTION_STARTED:
                at = parse_utc(str(event["Timestamp"]))
                known = started[instance.order_id].get(instance.attempt)
                started[instance.order_id][instance.attempt] = (
                    at if known is None else min(known, at)
                )
            elif kind == EventType.TASK_SCHEDULED:
                call = _json_object(event.get("Input"))
                if call is not None and isinstance(call.get("at"), str):
                    scheduled[int(event["EventId"])] = (str(event["Name"]), parse_utc(call["at"]))
            elif kind == EventType.TASK_COMPLETED and event.get("TaskScheduledId") in scheduled:
                result = _json_object(event.get("Result"))
                if result is not None and result.get("applied") is True:
                    name, at = scheduled[int(event["TaskScheduledId"])]
                    applied.append((instance, name, at))
    found = []
    for instance, name, at in applied:
        for attempt, start in sorted(started[instance.order_id].items()):
            if attempt > instance.attempt and at > start:
                found.append(
                    f"{instance.order_id}: {name} of attempt {instance.attempt} applied at "
                    f"{at.isoformat()}, after attempt {attempt} started at {start.isoformat()}"
                )
                break
    return sorted(found)


def _json_object(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _unalerted(records: Mapping[str, StateRecord], alerts: Iterable[QueueMessage]) -> list[str]:
    alerted = {(str(m.body.get("orderId")), str(m.body.get("kind"))) for m in alerts}
    return sorted(
        f"{order_id}: {record.process_state.value} without an {ALERT_FOR[record.process_state]} "
        "alert"
        for order_id, record in records.items()
        if record.process_state in ALERT_FOR
        and (order_id, ALERT_FOR[record.process_state].value) not in alerted
    )


def _unreplied(records: Mapping[str, StateRecord], replies: Iterable[QueueMessage]) -> list[str]:
    finals = {status.value for status in FINAL_STATUS.values()}
    heard: dict[str, dict[str, set[str | None]]] = defaultdict(lambda: defaultdict(set))
    for message in replies:
        status = str(message.body.get("status"))
        if status in finals:
            heard[str(message.body.get("orderId"))][status].add(message.message_id)
    problems = []
    for order_id, record in sorted(records.items()):
        expected = FINAL_STATUS.get(record.process_state)
        if expected is None:
            continue
        statuses = heard.get(order_id, {})
        if expected.value not in statuses:
            problems.append(
                f"{order_id}: {record.process_state.value}, no {expected.value} status "
                f"(heard {sorted(statuses) or 'no final status'})"
            )
            continue
        ids = set().union(*statuses.values())
        if len(statuses) > 1 or len(ids) > 1:
            problems.append(f"{order_id}: final statuses {sorted(statuses)} under ids {ids}")
    return problems


def _not_dead_lettered(workload: Workload, dead_letters: Iterable[QueueMessage]) -> list[str]:
    reasons = {m.message_id: m.reason for m in dead_letters}
    return [
        f"{message.message_id} ({message.kind}): "
        + ("not dead-lettered" if message.message_id not in reasons else "no reason")
        for message in workload.messages
        if message.kind in ("conflict", "malformed") and not reasons.get(message.message_id)
    ]
