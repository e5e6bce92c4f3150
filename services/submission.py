"""Submission of an order message (S1-S4, R1, C5, C6): `submit_order`.

It validates the message, then writes the order and then the state record, each
idempotently by OrderID; a resend is accepted again only when the stored order's immutable
data equals the message's (S2). A resend of a retired order (C3) runs nothing: its record's
`BodyHash` stands for the deleted order, and an equal body is answered with the order's final
status again. The result is `Accepted`, `Rejected` at the backlog bound
with nothing written (C5), or a `DeadLetter` with its reason and operator alert (S3).
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
from domain.policies import RetryBudget
from domain.ports import OrderStore, StateStore
from domain.records import DEFAULT_BUDGET, ProcessState, StateRecord
from domain.transitions import new_record
from observability import metrics
from services.admission import BacklogGate, Full
from services.status import rejection_for, status_for


@dataclass(frozen=True)
class Accepted:
    """Both writes are in place; complete the message and send `status` if there is one."""

    order: Order
    record: StateRecord
    order_created: bool
    state_created: bool
    status: StatusMessage | None
    retired: bool = False
    """The order was retired (C3): nothing runs, `status` is its final status again."""


@dataclass(frozen=True)
class DeadLetter:
    """Dead-letter the message with `reason` and send `alert` to the operators (S3)."""

    reason: str
    description: str
    alert: OperatorAlert


@dataclass(frozen=True)
class Rejected:
    """Admission control refused a new order (C5): nothing was written; complete the
    message and send `status` (`rejected`, saying why) if there is one."""

    order: Order
    reason: str
    backlog: int
    bound: int
    status: StatusMessage | None


INVALID_MESSAGE_REASON = "InvalidMessage"
ORDER_CONFLICT_REASON = "OrderConflict"


def submit_order(
    body: str | bytes,
    *,
    reply_to: str | None,
    message_id: str,
    orders: OrderStore,
    states: StateStore,
    admission: BacklogGate,
    reply_queues: frozenset[str],
    now: datetime,
    steps: Sequence[str],
    trace_parent: str | None = None,
    budget: RetryBudget = DEFAULT_BUDGET,
) -> Accepted | Rejected | DeadLetter:
    """Handle one submission message; `message_id` is the broker's id of that message.

    `admission` holds the backlog bound (C5); `reply_queues` is the allow-list of reply
    queues an app may name (R1); `steps` the workflow a new order runs (ORDER_STEPS) and
    `budget` its retry budget (RETRY_BUDGET), both fixed in its record when it is accepted
    (C7, C4); `trace_parent` the submission's W3C trace context, kept in the record for the
    order's later hops (C9).
    """
    parsed = parse_submission(body, reply_to, reply_queues)
    if isinstance(parsed, InvalidSubmission):
        return _invalid(parsed, message_id, now)
    order = parsed.order
    place = admission.reserve()
    if isinstance(place, Full):
        if states.get(order.order_id) is None and orders.get(order.order_id) is None:
            metrics.order_rejected(metrics.REJECTED_BACKLOG_FULL)
            return _rejected(order, parsed.reply_to, place, now)
        # Accepted before, or half-accepted by a submission that stored the order and
        # crashed before its record: a resend is never refused, it completes what the first
        # one began and is answered as it was (S2, C6).
        return _write(
            order,
            parsed.reply_to,
            message_id,
            orders,
            states,
            now,
            steps,
            trace_parent,
            budget,
        )
    stored = True  # a write that failed may have landed: keep its place until the next count
    try:
        result = _write(
            order,
            parsed.reply_to,
            message_id,
            orders,
            states,
            now,
            steps,
            trace_parent,
            budget,
        )
        stored = isinstance(result, Accepted) and result.state_created
        return result
    finally:
        admission.settle(place, stored=stored)


def _write(
    order: Order,
    reply_to: str | None,
    message_id: str,
    orders: OrderStore,
    states: StateStore,
    now: datetime,
    steps: Sequence[str],
    trace_parent: str | None,
    budget: RetryBudget,
) -> Accepted | DeadLetter:
    """The two idempotent writes (S2, S4), or the conflict that stops them (S3)."""
    stored_order = orders.create(order)
    if not stored_order.created and stored_order.record.immutable_data() != order.immutable_data():
        return _conflict(order, stored_order.record, message_id, now)
    stored_state = states.create(
        new_record(
            order.order_id,
            reply_to,
            now,
            steps,
            trace_parent,
            budget=budget,
            body_hash=order.body_hash(),
        )
    )
    if stored_state.record.retired_at is not None:
        return _retired(order, stored_state.record, orders, message_id, now)
    if stored_state.created:
        metrics.order_received()
    return Accepted(
        order=order,
        record=stored_state.record,
        order_created=stored_order.created,
        state_created=stored_state.created,
        status=status_for(stored_state.record, OrderStatus.RECEIVED, now=now),
    )


_FINAL_STATUS = {
    ProcessState.PROCESSED: OrderStatus.COMPLETED,
    ProcessState.COMPENSATED: OrderStatus.COMPENSATED,
    ProcessState.ERROR: OrderStatus.FAILED,
}


def _retired(
    order: Order, record: StateRecord, orders: OrderStore, message_id: str, now: datetime
) -> Accepted | DeadLetter:
    """A resend of a retired order (C3, S2, S3): the order document this submission (or a
    crashed delivery of it) wrote again goes, and the order runs nothing. An equal body is
    answered with the final status, under its stable message id; a different one is a
    conflict. A tombstone without a hash (its order document was gone before the hash was
    kept) cannot tell them apart and answers with the final status: either way nothing runs."""
    orders.delete(order.order_id)
    if record.body_hash is not None and record.body_hash != order.body_hash():
        description = (
            f"order {order.order_id!r} was retired with different immutable data (its body "
            f"hash differs); message {message_id!r} not applied, the order stays retired"
        )
        return _conflict_dead_letter(order.order_id, description, message_id, now)
    final = _FINAL_STATUS[record.process_state]
    reason = None if final is OrderStatus.COMPLETED else record.last_error
    return Accepted(
        order=order,
        record=record,
        order_created=False,
        state_created=False,
        status=status_for(record, final, now=now, reason=reason),
        retired=True,
    )


def _rejected(order: Order, reply_to: str | None, full: Full, now: datetime) -> Rejected:
    reason = (
        f"backlog at its bound: {full.backlog} of at most {full.bound} orders are Pending, "
        "Processing or Compensating; the order was not stored, submit it again later"
    )
    return Rejected(
        order=order,
        reason=reason,
        backlog=full.backlog,
        bound=full.bound,
        status=rejection_for(order.order_id, reply_to, reason=reason, now=now),
    )


def unreadable_submission(problem: str, *, message_id: str, now: datetime) -> DeadLetter:
    """A message whose body could not be read as bytes at all (an AMQP value or sequence
    section): dead-lettered with `problem` at once, like any invalid message (S3)."""
    return _invalid(InvalidSubmission(problem, None), message_id, now)


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
    return _conflict_dead_letter(order.order_id, description, message_id, now)


def _conflict_dead_letter(
    order_id: str, description: str, message_id: str, now: datetime
) -> DeadLetter:
    return DeadLetter(
        reason=ORDER_CONFLICT_REASON,
        description=description,
        alert=operator_alert(
            kind=AlertKind.ORDER_CONFLICT,
            order_id=order_id,
            reason=description,
            at=now,
            message_id=f"{AlertKind.ORDER_CONFLICT.value}:{order_id}:{message_id}",
        ),
    )
