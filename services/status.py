"""Status replies and operator alerts: who is told what (R1, R2, S3, E8, U4, C2, C5).

`status_for` and `rejection_for` build the status messages; the Functions layer sends a
status only to the order's recorded reply queue, while `reply_queue_allowed` finds it on the
REPLY_QUEUES allow-list (R1).
"""

from __future__ import annotations

from datetime import datetime

from domain.contracts import (
    OrderStatus,
    StatusMessage,
    status_message,
)
from domain.records import StateRecord
from domain.transitions import compensation_plan


def reply_queue_allowed(queue: str | None, reply_queues: frozenset[str]) -> bool:
    """R1: a reply queue is usable only when it is on the allow-list `reply_queues`."""
    return queue is not None and queue in reply_queues


def status_for(
    record: StateRecord,
    status: OrderStatus,
    *,
    now: datetime,
    reason: str | None = None,
    step: str | None = None,
    attempt: int | None = None,
) -> StatusMessage | None:
    """The status message for the order's own reply queue, or None when it has none (R2).

    `received` carries no attempt (none has started); later statuses carry the attempt
    that reached them (`attempt`, by default the record's), which keeps their message ids
    distinct across attempts.
    """
    if record.reply_to is None:
        return None
    if status is OrderStatus.RECEIVED:
        attempt = None
    elif attempt is None:
        attempt = record.attempt
    return status_message(
        queue=record.reply_to,
        order_id=record.order_id,
        status=status,
        attempt=attempt,
        reason=reason,
        at=now,
        step=step,
    )


def rejection_for(
    order_id: str,
    reply_to: str | None,
    *,
    reason: str,
    now: datetime,
) -> StatusMessage | None:
    """The `rejected` status of an order admission control refused (C5, R2), for the reply
    queue its message named; the order has no state record, so none carries the queue.
    No attempt: its message id is `"{orderId}:rejected:-"`, stable across redeliveries of the
    message - and across later submissions of the same order, whose rejection the reply
    queue's duplicate detection then drops within its window."""
    if reply_to is None:
        return None
    return status_message(
        queue=reply_to,
        order_id=order_id,
        status=OrderStatus.REJECTED,
        attempt=None,
        reason=reason,
        at=now,
    )


def left_to_undo(record: StateRecord) -> str:
    """What an operator must still undo by hand, for the alert of a compensation that cannot
    finish (C2): each step with the reference of its side effect."""
    plan = compensation_plan(record)
    if not plan:
        return "nothing is left to undo"
    steps = ", ".join(f"{u.name} ({u.reference or 'by idempotency key'})" for u in plan)
    return f"left to undo: {steps}"
