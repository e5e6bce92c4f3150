"""Retirement of finished orders past their retention (C3, S2, C6): `retire_finished`.

After FINISHED_RETENTION_SECONDS a finished order loses its order document and the
orchestration histories of its attempts; its state record, which holds no order data, stays
as a tombstone (`RetiredAt`) that keeps the OrderID known, so a resend never runs the order
again (S2). Each step is idempotent and the mark comes last: a crash in between leaves the
record for the next run. Design: docs/architecture.md, "Retention".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from domain import transitions
from domain.policies import ScanBounds
from domain.ports import BlockingCalls, OrderStore, PreconditionFailed, StateStore
from domain.records import RETIRABLE_STATES, InstanceId, StateRecord
from observability import logs
from services.paging import BoundedScan, StopReason

log = logs.get_logger("app.retention")

PurgeHistory = Callable[[str], Awaitable[None]]
"""Deletes the Durable history of one orchestration instance, named by its instance id;
idempotent (an instance with no history is no error)."""


@dataclass(frozen=True)
class RetirementReport:
    """What one bounded retirement run read, did and cost (C3, U2)."""

    until: datetime
    """Records last changed before this moment were due."""
    pages: int
    items_read: int
    request_charge: float
    stopped: StopReason | None
    retired: int
    expiry_removed: int
    """Records that still carried an expiry of an older version, kept by removing it."""
    lost_races: int
    failed: int
    """Records whose retirement failed (logged); the next run tries them again."""


async def retire_finished(
    states: StateStore,
    orders: OrderStore,
    purge: PurgeHistory,
    *,
    now: datetime,
    retention: timedelta,
    scan: ScanBounds,
    blocking: BlockingCalls,
) -> RetirementReport:
    """Retire the finished orders last changed more than `retention` before `now`, within
    the bounds of `scan` (C3, U2): for each, delete its order document, purge the history of
    each attempt's instance, then mark its record retired with a conditional replace, and
    delete the order document once more."""
    until = now - retention
    bounded: BoundedScan[StateRecord] = BoundedScan(
        fetch=lambda size, token: states.query_retirable(
            until=until, page_size=size, continuation=token
        ),
        page_size=scan.page_size,
        max_items=scan.max_items,
        max_pages=scan.max_pages,
    )
    found = await blocking(list, bounded)
    retired = expiry_removed = lost_races = failed = 0
    for record in found:
        try:
            if _due(record, until):
                await _retire(record, states, orders, purge, now, blocking)
                retired += 1
            else:
                # Served only for the expiry an older version wrote: the replace drops it.
                await blocking(states.replace, record)
                expiry_removed += 1
        except PreconditionFailed:
            lost_races += 1
        except Exception:
            log.exception("retirement failed; the next sweep tries again", order_id=record.order_id)
            failed += 1
    return RetirementReport(
        until=until,
        pages=bounded.pages,
        items_read=bounded.items_read,
        request_charge=bounded.request_charge,
        stopped=bounded.stopped,
        retired=retired,
        expiry_removed=expiry_removed,
        lost_races=lost_races,
        failed=failed,
    )


def _due(record: StateRecord, until: datetime) -> bool:
    return (
        record.retired_at is None
        and record.process_state in RETIRABLE_STATES
        and record.updated_at < until
    )


async def _retire(
    record: StateRecord,
    states: StateStore,
    orders: OrderStore,
    purge: PurgeHistory,
    now: datetime,
    blocking: BlockingCalls,
) -> None:
    """One order's retirement, each step idempotent, the tombstone last; raises
    `PreconditionFailed` when the record changed since it was read."""
    if record.body_hash is None:
        # A record of an older version: keep the hash before the order document goes, so a
        # resend can still be told from a conflict (S3).
        order = await blocking(orders.get, record.order_id)
        if order is not None:
            record = await blocking(states.replace, replace(record, body_hash=order.body_hash()))
    await blocking(orders.delete, record.order_id)
    for attempt in range(1, record.attempt + 1):
        await purge(str(InstanceId(record.order_id, attempt)))
    await blocking(states.replace, transitions.retire(record, now=now))
    # A resend that wrote the order document again before the mark found the record not yet
    # retired, so it left the document; one that writes it after the mark deletes it itself.
    await blocking(orders.delete, record.order_id)
    log.info("order retired", order_id=record.order_id, attempts=record.attempt)
