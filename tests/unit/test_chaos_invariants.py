"""The chaos run's invariant checks name every violation in the evidence they read: the
services' ledger journal, the state records and the queues (C1, C2, D4, E7, E8, R2, S3, C10).
Each check must see a violation when there is one, or a passing run would prove nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devhost.durable.history import EventType, execution_started, new_event

from domain.records import CompletedStep, ProcessState, StateRecord, format_utc
from domain.transitions import new_record
from orchestrators.order_workflow import BEGIN_STEP
from tools.chaos.invariants import (
    QueueMessage,
    check,
    forgotten_side_effects,
    read_ledgers,
    stale_state_writes,
)
from tools.demo.client import Outgoing, Workload

NOW = datetime(2030, 1, 1, tzinfo=UTC)
STEPS = ("reserve-stock",)


def record(order_id: str, state: ProcessState, reference: str | None = None) -> StateRecord:
    stored = new_record(order_id, "replies", NOW, steps=STEPS)
    log = () if reference is None else (CompletedStep("reserve-stock", reference, NOW),)
    return replace(stored, process_state=state, attempt=1, compensation_log=log)


def reservation(order_id: str, resource_id: str, attempt: int, key: str) -> dict[str, Any]:
    return {
        "service": "stock",
        "event": "reservation",
        "reservationId": resource_id,
        "orderId": order_id,
        "attempt": attempt,
        "idempotencyKey": key,
        "items": [{"sku": "a", "quantity": 1}],
        "at": (NOW + timedelta(seconds=attempt)).isoformat(),
    }


def journal(path: Path, *events: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    return path


def reply(order_id: str, status: str, attempt: int = 1) -> QueueMessage:
    return QueueMessage(f"{order_id}:{status}:{attempt}", {"orderId": order_id, "status": status})


def workload(*messages: Outgoing) -> Workload:
    return Workload(
        [m.order_id for m in messages if m.kind == "order" and m.order_id], list(messages)
    )


def test_consistent_evidence_breaks_no_invariant(tmp_path: Path) -> None:
    ledger = journal(tmp_path / "ledger.jsonl", reservation("o-1", "res-000001", 1, "o-1:stock"))
    bad = Outgoing(b"not json", "malformed-1", "malformed", None)

    findings = check(
        {"o-1": record("o-1", ProcessState.PROCESSED, "res-000001")},
        workload(Outgoing(b"{}", "o-1", "order", "o-1"), bad),
        ledger,
        replies=[reply("o-1", "received"), reply("o-1", "completed")],
        alerts=[],
        dead_letters=[QueueMessage("malformed-1", {}, "InvalidMessage")],
        max_failures=3,
        steps=STEPS,
    )

    assert findings.broken == []
    assert all(result["held"] for result in findings.to_json().values())
    assert findings.to_json()["ledgers_survive_restart"]["held"]


def test_each_check_names_the_violations_in_its_evidence(tmp_path: Path) -> None:
    ledger = journal(
        tmp_path / "ledger.jsonl",
        reservation("o-1", "res-000001", 2, "o-1:stock"),
        # Accepted from attempt 1 after attempt 2 raised the fence, and a second reservation.
        reservation("o-1", "res-000002", 1, "o-1:other"),
    )
    records = {
        "o-1": record("o-1", ProcessState.PROCESSED, "res-000001"),
        "o-2": record("o-2", ProcessState.ERROR),
        "o-3": record("o-3", ProcessState.PROCESSING),
        "o-4": None,
        "o-5": record("o-5", ProcessState.COMPENSATION_FAILED),
    }
    messages = [Outgoing(b"{}", order_id, "order", order_id) for order_id in records]
    conflict = Outgoing(b"{}", "o-1:conflict", "conflict", "o-1")

    findings = check(
        records,
        workload(*messages, conflict),
        ledger,
        replies=[
            reply("o-2", "failed"),
            reply("o-5", "compensation-failed", 1),
            reply("o-5", "compensation-failed", 2),
        ],
        alerts=[QueueMessage("a", {"orderId": "o-5", "kind": "compensation-failed"})],
        dead_letters=[QueueMessage("o-1:conflict", {}, None)],
        max_failures=3,
        steps=STEPS,
    )

    violations = {name: found for name, found in findings.invariants.items() if found}
    assert set(violations) == {
        "lost",
        "stuck",
        "side_effect_at_most_once",
        "no_stale_fence_write_accepted",
        "processed_matches_ledgers",
        "operator_alerted",
        "final_status_replied",
        "bad_submissions_dead_lettered",
    }
    assert violations["lost"] == ["o-4"]
    assert violations["stuck"] == ["o-3: Processing"]
    assert "attempt 1 after attempt 2" in violations["no_stale_fence_write_accepted"][0]
    assert violations["operator_alerted"] == ["o-2: Error without an order-error alert"]
    # o-1 heard nothing final; o-5 heard its final status under two message ids.
    assert [v.split(":")[0] for v in violations["final_status_replied"]] == ["o-1", "o-5"]
    assert violations["bad_submissions_dead_lettered"] == ["o-1:conflict (conflict): no reason"]


def stats_read_back(journal_path: Path) -> dict[str, dict[str, Any]]:
    """Every service's ``GET /stats`` ledger counts as a services process that reads
    ``journal_path`` back at its start would give them."""
    return {name: ledger.stats() for name, ledger in read_ledgers(journal_path).items()}


def test_a_services_restart_that_forgot_side_effects_is_named_with_its_counts(
    tmp_path: Path,
) -> None:
    """E7, C8: a restarted services process that lost ledger entries lost the idempotency keys
    and fences that stop a retry from performing a side effect twice."""
    first = reservation("o-1", "res-000001", 1, "o-1:stock")
    second = reservation("o-2", "res-000002", 1, "o-2:stock")
    kept = journal(tmp_path / "kept.jsonl", first, second)
    torn = journal(tmp_path / "torn.jsonl", first)
    before = stats_read_back(kept)

    assert forgotten_side_effects(before, stats_read_back(kept)) == []
    forgotten = forgotten_side_effects(before, stats_read_back(torn))
    assert forgotten == ["stock: 2 side effects before the kill, 1 after"]
    # A service that is not there after the restart holds nothing.
    gone = {name: stats for name, stats in stats_read_back(kept).items() if name != "stock"}
    assert forgotten_side_effects(before, gone) == [
        "stock: 2 side effects before the kill, 0 after"
    ]

    findings = check(
        {},
        workload(),
        kept,
        replies=[],
        alerts=[],
        dead_letters=[],
        max_failures=3,
        steps=STEPS,
        ledgers_forgotten=forgotten,
    )

    assert findings.broken == ["ledgers_survive_restart: 1"]
    assert findings.to_json()["ledgers_survive_restart"]["examples"] == forgotten


def attempt_history(
    order_id: str, attempt: int, started: datetime, *writes: tuple[datetime, bool]
) -> tuple[str, list[dict[str, Any]]]:
    """One attempt's orchestration history: its start, then each fenced step write the
    orchestration asked for at its time, with whether the state store applied it."""
    instance = f"{order_id}:{attempt}"
    events = [execution_started(started, "order_workflow", instance, None, version="2.0")]
    for task_id, (at, applied) in enumerate(writes):
        call = {"order_id": order_id, "attempt": attempt, "at": format_utc(at)}
        events.append(
            new_event(
                EventType.TASK_SCHEDULED, at, task_id, Name=BEGIN_STEP, Input=json.dumps(call)
            )
        )
        events.append(
            new_event(
                EventType.TASK_COMPLETED,
                at,
                TaskScheduledId=task_id,
                Result=json.dumps({"applied": applied, "request": None, "undo": []}),
            )
        )
    return instance, events


def test_a_state_write_applied_for_an_attempt_after_a_later_one_started_is_named_d4() -> None:
    later_start = NOW + timedelta(seconds=30)
    histories = dict(
        [
            # Before attempt 2 started: its own, applied; after it: refused, as it must be.
            attempt_history(
                "o-1",
                1,
                NOW,
                (NOW + timedelta(seconds=1), True),
                (later_start + timedelta(seconds=1), False),
            ),
            attempt_history("o-1", 2, later_start, (later_start, True)),
            # Attempt 1 of o-2 wrote after attempt 2 had started, and the store applied it.
            attempt_history("o-2", 1, NOW, (later_start + timedelta(seconds=5), True)),
            attempt_history("o-2", 2, later_start),
        ]
    )
    histories["not-an-attempt"] = []

    found = stale_state_writes(histories)

    assert len(found) == 1
    assert found[0].startswith("o-2: begin_step of attempt 1 applied at")
    assert "after attempt 2 started" in found[0]
