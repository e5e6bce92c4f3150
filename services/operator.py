"""What an orchestration and an operator read or ask of the stores (D6, E8, C2, C4, U4, U6).

`load_order` is an attempt's one read of the orders database (D6). The rest serves the
operator console: `list_orders` and `order_timeline` read; `resubmit_order`,
`retry_compensation` and `cancel_order` each make one conditional replace on the etag read,
or on the one the operator passes, so the loser of a race gets `PreconditionFailed` or
`IllegalTransition`. The last two return the `CompensationRequest` the caller starts (C7),
which the same replace stored in the record's outbox: if that start fails, the supervisor's
relay starts it (C6, U4, C2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from domain import transitions
from domain.contracts import Order
from domain.policies import Timeouts, compensation_deadline
from domain.ports import OrderStore, Page, PreconditionFailed, RecordNotFound, StateStore
from domain.records import InstanceId, ProcessState, StateRecord
from domain.workflow import Step
from services.outbox import owed_compensation, owing
from services.owed_statuses import OwedStatuses, owed_statuses_view

MAX_LISTED_ATTEMPTS = 20
"""A timeline names at most this many attempts, the newest."""


def load_order(orders: OrderStore, instance: InstanceId) -> Order:
    """The order an attempt works on; its absence means submission never completed."""
    order = orders.get(instance.order_id)
    if order is None:
        raise RecordNotFound(
            f"order {instance.order_id!r} of attempt {instance} is not in the orders database; "
            f"its state record exists only if a submission wrote it, so check the orders store"
        )
    return order


def list_orders(
    states: StateStore, state: ProcessState, *, page_size: int, continuation: str | None = None
) -> Page[StateRecord]:
    """One page of the orders in `state`; `continuation` comes from the previous page."""
    return states.query_by_state(state=state, page_size=page_size, continuation=continuation)


@dataclass(frozen=True)
class OrderTimeline:
    """What the state store knows of one order, for an operator (E8, C1, C2)."""

    record: StateRecord
    attempts: tuple[InstanceId, ...]
    """The instance id of each attempt, oldest first (at most MAX_LISTED_ATTEMPTS, the
    newest); each attempt, compensation runs included, is one orchestration instance (D2)."""
    left_to_undo: tuple[Step, ...]
    """What a compensation would undo now, in order (C1)."""


def order_timeline(states: StateStore, order_id: str) -> OrderTimeline:
    record = _read(states, order_id)
    first = max(1, record.attempt - MAX_LISTED_ATTEMPTS + 1)
    attempts = tuple(InstanceId(order_id, n) for n in range(first, record.attempt + 1))
    return OrderTimeline(record, attempts, transitions.compensation_plan(record))


def resubmit_order(
    states: StateStore,
    order_id: str,
    now: datetime,
    *,
    max_resubmits: int,
    expected_etag: str | None = None,
) -> StateRecord:
    """Put an order in Error back to Pending for the starter (E8), within its budget (C4).

    Raises `RecordNotFound` for an unknown order, `IllegalTransition` when it is not in
    Error or was resubmitted `max_resubmits` times, and `PreconditionFailed` when it changed
    while being resubmitted (or since `expected_etag`).
    """
    record = _read(states, order_id, expected_etag)
    return states.replace(transitions.resubmit(record, now=now, max_resubmits=max_resubmits))


@dataclass(frozen=True)
class CompensationRequest:
    """An operator action won: start `instance` of the order's workflow to undo `undo`.

    `superseded` is the attempt that held the order before (for a cancel, the one running;
    None for an order in Error, whose attempts all ended), which the new attempt fenced out;
    terminating it only tidies the durable view.
    """

    record: StateRecord
    instance: InstanceId
    undo: tuple[Step, ...]
    superseded: str | None


def retry_compensation(
    states: StateStore,
    order_id: str,
    now: datetime,
    *,
    timeouts: Timeouts,
    expected_etag: str | None = None,
) -> CompensationRequest:
    """Compensate a CompensationFailed order again, from the step that failed (C2)."""
    record = _read(states, order_id, expected_etag)
    planned = transitions.retry_compensation(
        record, now=now, compensation_deadline=compensation_deadline(now, timeouts)
    )
    return _compensation(record, states.replace(_owing_start(planned, now)))


def cancel_order(
    states: StateStore,
    order_id: str,
    now: datetime,
    *,
    timeouts: Timeouts,
    reason: str,
    expected_etag: str | None = None,
) -> CompensationRequest:
    """Cancel a Pending, Processing or Error order: it compensates whatever may be left, and
    ends Compensated (C1, C2, E8)."""
    record = _read(states, order_id, expected_etag)
    planned = transitions.cancel(
        record,
        now=now,
        reason=f"cancelled by an operator: {reason}",
        compensation_deadline=compensation_deadline(now, timeouts),
    )
    request = _compensation(record, states.replace(_owing_start(planned, now)))
    if record.process_state is ProcessState.ERROR:
        return replace(request, superseded=None)
    return request


def _owing_start(planned: StateRecord, now: datetime) -> StateRecord:
    """`planned`, compensating under a new attempt, owing that attempt's start (C6)."""
    instance = planned.instance_id
    if instance is None:  # every compensating transition sets LockedBy
        raise AssertionError(f"order {planned.order_id!r} compensates without an attempt")
    return owing(planned, (owed_compensation(instance, at=now),), now=now)


def _compensation(before: StateRecord, stored: StateRecord) -> CompensationRequest:
    instance = stored.instance_id
    if instance is None:  # every compensating transition sets LockedBy
        raise AssertionError(f"order {stored.order_id!r} compensates without an attempt")
    return CompensationRequest(
        record=stored,
        instance=instance,
        undo=transitions.compensation_plan(stored),
        superseded=before.locked_by,
    )


def _read(states: StateStore, order_id: str, expected_etag: str | None = None) -> StateRecord:
    record = states.get(order_id)
    if record is None:
        raise RecordNotFound(f"no state record for order {order_id!r}")
    if expected_etag is not None and record.etag != expected_etag:
        raise PreconditionFailed(order_id, expected_etag)
    return record


# --- the JSON the console's faces exchange -------------------------------------------------


def record_view(record: StateRecord) -> dict[str, Any]:
    """A state record as the console shows it: its contract document and its etag. The
    record holds no order data and no customer id (C3), so it can be shown whole."""
    return {**record.to_document(), "etag": record.etag}


def list_view(page: Page[StateRecord], state: ProcessState) -> dict[str, Any]:
    return {
        "state": state.value,
        "orders": [record_view(record) for record in page.items],
        "continuation": page.continuation,
        "requestCharge": page.request_charge,
    }


def timeline_view(
    timeline: OrderTimeline,
    orchestrations: Mapping[str, Mapping[str, Any] | None],
    owed: OwedStatuses,
) -> dict[str, Any]:
    """The timeline, with what the durable client said of each attempt's instance (None:
    no such instance, e.g. a claim whose start never happened, or a purged one) and the
    status messages `owed` to the order's reply queue (R2). The view shows the newest
    attempt's history."""
    newest = str(timeline.attempts[-1]) if timeline.attempts else None
    return {
        "record": record_view(timeline.record),
        "steps": [step.to_document() for step in timeline.record.steps],
        "compensationLog": [entry.to_document() for entry in timeline.record.compensation_log],
        "leftToUndo": [
            {"index": u.index, "step": u.name, "reference": u.reference}
            for u in timeline.left_to_undo
        ],
        "attempts": [
            {
                "instanceId": str(instance),
                "orchestration": _shown(orchestrations.get(str(instance)), str(instance) == newest),
            }
            for instance in timeline.attempts
        ],
        "statusMessages": owed_statuses_view(owed),
    }


def _shown(view: Mapping[str, Any] | None, newest: bool) -> Mapping[str, Any] | None:
    if view is None or newest:
        return view
    return {name: value for name, value in view.items() if name != "history"}


def compensation_view(request: CompensationRequest) -> dict[str, Any]:
    return {
        "record": record_view(request.record),
        "instanceId": str(request.instance),
        "superseded": request.superseded,
        "toUndo": [
            {"index": u.index, "step": u.name, "reference": u.reference} for u in request.undo
        ],
    }
