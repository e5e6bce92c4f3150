"""Submission of an order message (S1-S4, R1, C6).

Validate the message, then two independent idempotent writes keyed by OrderID: the order
into the orders database, then the state record into the state store. A redelivered or
duplicate message finds both already there and is accepted again - but only when the
stored order's immutable data equals the message's (S2). Anything else is a dead letter
with a reason and an operator alert, and nothing is overwritten (S3).

The order is written first, so a state record never exists without its order: a crash
between the writes leaves an order without a record, which the message's redelivery
completes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from domain.contracts import (
    AlertKind,
    InvalidSubmission,
    OperatorAlert,
    Order,
    OrderStatus,
    StatusMessage,
    operator_alert,
    parse_submission,
)
from domain.ports import OrderStore, StateStore
from domain.records import StateRecord
from domain.transitions import new_record
from services.status import status_for


@dataclass(frozen=True)
class Accepted:
    """Both writes are in place; complete the message and send `status` if there is one."""

    order: Order
    record: StateRecord
    order_created: bool
    state_created: bool
    status: StatusMessage | None


@dataclass(frozen=True)
class DeadLetter:
    """Dead-letter the message with `reason` and send `alert` to the operators (S3)."""

    reason: str
    description: str
    alert: OperatorAlert


INVALID_MESSAGE_REASON = "InvalidMessage"
ORDER_CONFLICT_REASON = "OrderConflict"


def submit_order(
    body: str | bytes,
    *,
    reply_to: str | None,
    message_id: str,
    orders: OrderStore,
    states: StateStore,
    reply_queues: frozenset[str],
    now: datetime,
    steps: Sequence[str] = (),
) -> Accepted | DeadLetter:
    """Handle one submission message; `message_id` is the broker's id of that message.

    `reply_queues` is the allow-list of reply queues an app may name (R1); `steps` the
    workflow a new order runs (ORDER_STEPS), fixed in its record when it is accepted (C7).
    """
    parsed = parse_submission(body, reply_to, reply_queues)
    if isinstance(parsed, InvalidSubmission):
        return _invalid(parsed, message_id, now)
    order = parsed.order
    stored_order = orders.create(order)
    if not stored_order.created and stored_order.record.immutable_data() != order.immutable_data():
        return _conflict(order, stored_order.record, message_id, now)
    stored_state = states.create(new_record(order.order_id, parsed.reply_to, now, steps))
    return Accepted(
        order=order,
        record=stored_state.record,
        order_created=stored_order.created,
        state_created=stored_state.created,
        status=status_for(
            stored_state.record, OrderStatus.RECEIVED, reply_queues=reply_queues, now=now
        ),
    )


def _invalid(invalid: InvalidSubmission, message_id: str, now: datetime) -> DeadLetter:
    description = f"message {message_id!r} rejected: {invalid.reason}"
    return DeadLetter(
        reason=INVALID_MESSAGE_REASON,
        description=description,
        alert=operator_alert(
            kind=AlertKind.INVALID_MESSAGE,
            order_id=invalid.order_id,
            reason=description,
            at=now,
            message_id=f"{AlertKind.INVALID_MESSAGE.value}:{message_id}",
        ),
    )


def _conflict(order: Order, existing: Order, message_id: str, now: datetime) -> DeadLetter:
    submitted, stored = order.immutable_data(), existing.immutable_data()
    differing = sorted(name for name in submitted if submitted[name] != stored.get(name))
    description = (
        f"order {order.order_id!r} already exists with different immutable data "
        f"(differs in {', '.join(differing)}); message {message_id!r} not applied, "
        f"stored order kept"
    )
    return DeadLetter(
        reason=ORDER_CONFLICT_REASON,
        description=description,
        alert=operator_alert(
            kind=AlertKind.ORDER_CONFLICT,
            order_id=order.order_id,
            reason=description,
            at=now,
            message_id=f"{AlertKind.ORDER_CONFLICT.value}:{order.order_id}:{message_id}",
        ),
    )
