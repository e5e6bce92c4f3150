"""The state record's outbox: what a committed transition owes, and its delivery (C6, R2, E8,
U2, U4, C1, C2).

A transition that owes messages (a status, an operator alert, the start of a compensation
instance) writes them into the record's `Owed` in the write that commits it:
`owed_status`, `owed_alert` and `owed_compensation` build the entries, `owing` adds them to
the record of a whole-record transition, and `fenced_owed` is the outbox a fenced write
replaces the record's with. `delivery` rebuilds the messages under their stable ids (R2, E4)
in the order they go out; `cleared` removes a delivered outbox with one conditional write;
`owed_scan` is the relay's bounded scan of outboxes still owed past a grace (U2). Design:
docs/architecture.md, "The outbox".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from domain.contracts import (
    AlertKind,
    OperatorAlert,
    OrderStatus,
    StatusMessage,
    operator_alert,
)
from domain.policies import ScanBounds
from domain.ports import PreconditionFailed, RecordNotFound, StateStore
from domain.records import InstanceId, Owed, OwedKind, OwedMessage, ProcessState, StateRecord
from domain.transitions import compensation_plan
from domain.workflow import Step
from services.paging import BoundedScan, StopReason
from services.status import status_for


@dataclass(frozen=True)
class CompensationStart:
    """Start `instance` of the order's workflow to undo `undo`, in that order (C1, C2)."""

    instance: InstanceId
    undo: tuple[Step, ...]


@dataclass(frozen=True)
class Delivery:
    """The messages an outbox stands for, in the order they go out: the alerts and statuses
    first, the compensation start last, so that an instance never starts before what the
    record owed before it went out."""

    alerts: tuple[OperatorAlert, ...] = ()
    statuses: tuple[StatusMessage, ...] = ()
    compensation: CompensationStart | None = None


def owed_status(
    status: OrderStatus,
    *,
    attempt: int,
    at: datetime,
    reason: str | None = None,
    step: str | None = None,
) -> OwedMessage:
    """A status for the order's reply queue, under the message id of `attempt` (R2)."""
    return OwedMessage(OwedKind.STATUS, status.value, attempt, at, reason, step)


def owed_alert(kind: AlertKind, *, attempt: int, at: datetime, reason: str) -> OwedMessage:
    """An operator alert about `attempt` of the order (E8, U2, U4, C2)."""
    return OwedMessage(OwedKind.ALERT, kind.value, attempt, at, reason)


def owed_compensation(instance: InstanceId, *, at: datetime) -> OwedMessage:
    """The start of the compensation instance `instance` (U4, C1, C2)."""
    return OwedMessage(OwedKind.COMPENSATION, "start", instance.attempt, at)


def owing(record: StateRecord, messages: Iterable[OwedMessage], *, now: datetime) -> StateRecord:
    """`record`, the next version of a whole-record transition, owing `messages` besides
    whatever it still owed: the write that commits the transition stores them (C6)."""
    added = tuple(messages)
    if not added:
        return record
    if record.owed is None:
        return replace(record, owed=Owed(now, added))
    due = min(record.owed.due, now)
    return replace(record, owed=Owed(due, (*record.owed.messages, *added)))


def fenced_owed(messages: Iterable[OwedMessage], *, due: datetime) -> Owed | None:
    """The outbox a fenced write of the workflow replaces the record's with: only what it
    owes itself. Nothing is lost by the replacement: an attempt writes only after its
    previous write delivered, and whoever starts an instance delivers what the record owed
    first (docs/architecture.md, "The outbox")."""
    owed = tuple(messages)
    return Owed(due, owed) if owed else None


def delivery(record: StateRecord) -> Delivery:
    """What `record`'s outbox stands for, rebuilt under each message's stable id (R2, E4).

    A status needs the record's reply queue (none: nothing to send, R1); a compensation
    start holds only while the record still compensates under that instance, and undoes
    what the record says is left (C1, C2)."""
    return messages(record, () if record.owed is None else record.owed.messages)


def messages(record: StateRecord, owed: Iterable[OwedMessage]) -> Delivery:
    """The messages that `owed`, entries of `record`'s outbox, stand for."""
    alerts: list[OperatorAlert] = []
    statuses: list[StatusMessage] = []
    compensation = None
    for entry in owed:
        if entry.kind is OwedKind.ALERT:
            alerts.append(
                operator_alert(
                    kind=AlertKind(entry.name),
                    order_id=record.order_id,
                    reason=entry.reason or "",
                    at=entry.at,
                    attempt=entry.attempt,
                )
            )
        elif entry.kind is OwedKind.STATUS:
            status = status_for(
                record,
                OrderStatus(entry.name),
                now=entry.at,
                reason=entry.reason,
                step=entry.step,
                attempt=entry.attempt,
            )
            if status is not None:
                statuses.append(status)
        elif entry.kind is OwedKind.COMPENSATION:
            instance = InstanceId(record.order_id, entry.attempt)
            if record.process_state is ProcessState.COMPENSATING and record.locked_by == str(
                instance
            ):
                compensation = CompensationStart(instance, compensation_plan(record))
    return Delivery(tuple(alerts), tuple(statuses), compensation)


def cleared(states: StateStore, record: StateRecord) -> bool:
    """Clear the outbox of `record`, delivered, with one write conditional on its etag.

    False when the record changed since: its new version owes what it says (a fenced write
    replaced the outbox, or a transition added to it), and the relay delivers what is left
    again, which the stable ids make harmless (R2, E4)."""
    if record.owed is None:
        return True
    try:
        states.replace(replace(record, owed=None))
    except (PreconditionFailed, RecordNotFound):
        return False
    return True


@dataclass(frozen=True)
class OwedScan:
    """What one bounded scan of the relay found and cost (U2)."""

    records: tuple[StateRecord, ...]
    pages: int
    items_read: int
    request_charge: float
    stopped: StopReason | None


def owed_scan(
    states: StateStore, now: datetime, *, grace_seconds: float, bounds: ScanBounds
) -> OwedScan:
    """The records whose outbox was due more than `grace_seconds` before `now`: their
    committer did not deliver and clear it (a failed send, a store error, a crash), so the
    relay delivers it. One bounded scan (U2): the next one continues with the rest, since a
    delivered outbox leaves the query."""
    until = now - timedelta(seconds=grace_seconds)
    scan: BoundedScan[StateRecord] = BoundedScan(
        fetch=lambda size, token: states.query_owed(
            until=until, page_size=size, continuation=token
        ),
        page_size=bounds.page_size,
        max_items=bounds.max_items,
        max_pages=bounds.max_pages,
    )
    found = tuple(scan)
    return OwedScan(found, scan.pages, scan.items_read, scan.request_charge, scan.stopped)
