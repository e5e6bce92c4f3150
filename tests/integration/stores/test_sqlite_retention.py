"""The SQLite state store keeps finished records for the retention, as Cosmos DB's TTL does,
and the supervisor's sweep has it remove the older ones (C3)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from adapters.sqlite_store import open_sqlite_stores
from domain import transitions
from domain.ports import StoreMetrics
from domain.records import ProcessState, StateRecord

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)


def record(order_id: str, state: ProcessState, updated: datetime) -> StateRecord:
    fresh = transitions.new_record(order_id, None, updated, ("reserve-stock",))
    return replace(fresh, process_state=state, updated_at=updated)


def test_finished_records_past_the_retention_are_removed_and_no_others_c3(
    tmp_path: Path,
) -> None:
    states, orders = open_sqlite_stores(
        tmp_path, StoreMetrics(), finished_retention_seconds=RETENTION.total_seconds()
    )
    old = NOW - RETENTION - timedelta(minutes=1)
    recent = NOW - RETENTION + timedelta(minutes=1)
    kept = {
        "recent-done": record("recent-done", ProcessState.PROCESSED, recent),
        "old-pending": record("old-pending", ProcessState.PENDING, old),
        "old-compensating": record("old-compensating", ProcessState.COMPENSATING, old),
    }
    removed = {
        name: record(name, state, old)
        for name, state in (
            ("old-processed", ProcessState.PROCESSED),
            ("old-error", ProcessState.ERROR),
            ("old-compensated", ProcessState.COMPENSATED),
            ("old-failed", ProcessState.COMPENSATION_FAILED),
        )
    }
    for each in (*kept.values(), *removed.values()):
        states.create(each)

    assert states.expire_finished(now=NOW, limit=3) == 3
    assert states.expire_finished(now=NOW, limit=3) == 1
    assert states.expire_finished(now=NOW, limit=3) == 0
    assert all(states.get(name) is None for name in removed)
    assert all(states.get(name) is not None for name in kept)
    states.close()
    orders.close()
