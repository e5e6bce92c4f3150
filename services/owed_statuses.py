"""The status messages the app owes one order, for the operator console's timeline (R1, R2,
S2, C10, E8).

`owed_statuses` derives them from the state record (C10) and marks each sent, owed or
unknown from the history of the attempt that sends it, matched by activity name and
position, never by inputs or results (C3); one no history shows sent is owed while the
record's outbox holds it (C6). `StatusSenders`, given by the orchestrator module, says which
activity sends what. The rules: docs/console.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from domain.contracts import OrderStatus, StatusMessage
from domain.records import (
    InstanceId,
    ProcessState,
    RecordFormatError,
    StateRecord,
    format_utc,
    parse_utc,
)
from services.outbox import delivery
from services.status import reply_queue_allowed, status_for

SENT = "sent"
OWED = "owed"
UNKNOWN = "unknown"
SENT_WITH_RECORD = "sent with the record's creation (S2)"
SENT_BY_SUPERVISOR = "sent by the supervisor"
IN_OUTBOX = "the record's outbox: its writer, or the supervisor's relay (C6)"

SUBMISSION = "the submission"
SUPERVISOR = "the supervisor's sweep"
TERMINAL_RUNTIME_STATUSES = frozenset({"Completed", "Failed", "Terminated"})


@dataclass(frozen=True)
class StatusSenders:
    """The workflow's activities that write the record under the fence (D4) and send its
    statuses; the orchestrator module, which names its activities, builds this."""

    begin_step: tuple[str, ...]
    """The activities that begin a step, each logging the step before it (C1)."""
    finish_steps: str
    fail_step: str
    finish_undo: str
    undo_failed: str
    writes: frozenset[str]
    """Every activity that writes the record under the fence."""

    def final(self, record: StateRecord) -> _Final | None:
        """Who sent the final status of `record`'s state, and whether the supervisor may
        have: an Error its compensation ended in (U4) was written by `finish_undo`."""
        if (
            record.process_state is ProcessState.ERROR
            and record.compensation_ends_in is ProcessState.ERROR
        ):
            return _Final(OrderStatus.FAILED, self.finish_undo, False)
        return {
            ProcessState.PROCESSED: _Final(OrderStatus.COMPLETED, self.finish_steps, False),
            ProcessState.ERROR: _Final(OrderStatus.FAILED, self.fail_step, True),
            ProcessState.COMPENSATED: _Final(OrderStatus.COMPENSATED, self.finish_undo, False),
            ProcessState.COMPENSATION_FAILED: _Final(
                OrderStatus.COMPENSATION_FAILED, self.undo_failed, True
            ),
        }.get(record.process_state)

    def earlier_finals(self, outcome: str | None) -> tuple[_Final, ...]:
        """The final status an earlier attempt may have sent, by its orchestration's
        `outcome`, before an operator moved the record on (E8, C2): `failed` by its first
        step failing, or by the compensation of an order given up on (U4)."""
        failed = OrderStatus.FAILED
        return {
            "failed": (
                _Final(failed, self.fail_step, True),
                _Final(failed, self.finish_undo, False),
            ),
            "compensation-failed": (
                _Final(OrderStatus.COMPENSATION_FAILED, self.undo_failed, True),
            ),
        }.get(outcome or "", ())


@dataclass(frozen=True)
class _Final:
    status: OrderStatus
    sender: str
    """The activity that sends it."""
    by_supervisor: bool
    """The supervisor's sweep may have reached the state, and sent the status, itself."""


@dataclass(frozen=True)
class OwedStatus:
    """One status message the app owes the order, and whether it went out."""

    message: StatusMessage
    step: str | None
    attempt: int | None
    """The attempt the message body carries; None for `received`, and for an `in-progress`
    whose sending attempt no history shows."""
    follows: datetime
    """The time of the transition the message follows."""
    delivery: str
    sent_by: str


@dataclass(frozen=True)
class OwedStatuses:
    reply_to: str | None
    messages: tuple[OwedStatus, ...]
    note: str


@dataclass(frozen=True)
class _Run:
    """What one attempt's orchestration history shows."""

    completed: tuple[str, ...]
    """The activities the history shows completed, in order, less a last write the
    attempt's output says did not apply."""
    finished: bool
    outcome: str | None = None
    """The `outcome` of the attempt's orchestration output, once it ended."""
    completed_at: Mapping[str, datetime] = field(default_factory=dict)
    """When each activity last completed, as the history says."""

    def progress_sent(self, senders: StatusSenders) -> int:
        """How many `in-progress` statuses this attempt sent: every step it began but its
        first logged the step before it, and so does its last write after the last step."""
        begun = sum(self.completed.count(begins) for begins in senders.begin_step)
        return max(0, begun - 1) + self.completed.count(senders.finish_steps)

    def begins_steps_with(self, senders: StatusSenders) -> str:
        """The activity that begins this attempt's steps (it depends on the agent shape)."""
        return next((b for b in senders.begin_step if b in self.completed), senders.begin_step[0])


def owed_statuses(
    record: StateRecord,
    attempts: Sequence[InstanceId],
    orchestrations: Mapping[str, Mapping[str, Any] | None],
    *,
    senders: StatusSenders,
    reply_queues: frozenset[str],
) -> OwedStatuses:
    """The status messages `record` says the app owes its order's reply queue (R2), each
    with whether the history of `orchestrations` (instance id -> the durable client's view
    with its ``history``) shows it sent. `attempts` are the timeline's, oldest first."""
    if record.reply_to is None:
        return OwedStatuses(
            None,
            (),
            "the order has no reply queue (ReplyTo null): the app sends it no status messages (R2)",
        )
    if not reply_queue_allowed(record.reply_to, reply_queues):
        return OwedStatuses(
            record.reply_to,
            (),
            f"the reply queue {record.reply_to!r} is not on REPLY_QUEUES: the app sends it no "
            f"status messages (R1)",
        )
    runs = {
        instance.attempt: _run(orchestrations.get(str(instance)), senders) for instance in attempts
    }
    messages = [_received(record)]
    messages += _progress(record, attempts, runs, senders)
    messages += _earlier_finals(record, runs, senders)
    final = _final(record, runs.get(record.attempt), senders)
    if final is not None:
        messages.append(final)
    messages = _outboxed(record, messages)
    return OwedStatuses(
        record.reply_to,
        tuple(sorted(messages, key=lambda m: _order(m, record.attempt))),
        _note(record),
    )


def _order(message: OwedStatus, newest: int) -> tuple[int, int]:
    """`received` first, then attempt by attempt - an owed `in-progress`, whose attempt no
    history shows, with the newest - each attempt's final status after its progress."""
    if message.message.subject == OrderStatus.RECEIVED.value:
        return (0, 0)
    attempt = newest if message.attempt is None else message.attempt
    return (attempt, 0 if message.step is not None else 1)


def _outboxed(record: StateRecord, messages: list[OwedStatus]) -> list[OwedStatus]:
    """`messages`, each one no history shows sent marked owed while the record's outbox
    still holds it (C6): a history shows an activity's sends, not the supervisor's."""
    held = {status.message_id for status in delivery(record).statuses}
    return [
        replace(message, delivery=OWED, sent_by=IN_OUTBOX)
        if message.delivery != SENT and message.message.message_id in held
        else message
        for message in messages
    ]


def _earlier_finals(
    record: StateRecord, runs: Mapping[int, _Run | None], senders: StatusSenders
) -> list[OwedStatus]:
    """The final statuses earlier attempts sent before an operator moved the record on."""
    finals = []
    for attempt, run in sorted(runs.items()):
        if attempt >= record.attempt or run is None:
            continue
        sent = [f for f in senders.earlier_finals(run.outcome) if f.sender in run.completed_at]
        if not sent:
            continue
        earlier = sent[0]
        at = run.completed_at[earlier.sender]
        finals.append(
            OwedStatus(
                _built(replace(record, attempt=attempt), earlier.status, at),
                step=None,
                attempt=attempt,
                follows=at,
                delivery=SENT,
                sent_by=earlier.sender,
            )
        )
    return finals


def _received(record: StateRecord) -> OwedStatus:
    return OwedStatus(
        _built(record, OrderStatus.RECEIVED, record.created_at),
        step=None,
        attempt=None,
        follows=record.created_at,
        delivery=SENT_WITH_RECORD,
        sent_by=SUBMISSION,
    )


def _progress(
    record: StateRecord,
    attempts: Sequence[InstanceId],
    runs: Mapping[int, _Run | None],
    senders: StatusSenders,
) -> list[OwedStatus]:
    """One `in-progress` per logged step, attributed by position to the attempts whose
    histories show their sending activity completed."""
    by_position: list[tuple[int, str]] = []
    known = bool(attempts) and attempts[0].attempt == 1
    for instance in attempts if known else ():
        run = runs.get(instance.attempt)
        if run is None:
            known = False
            break
        begins = run.begins_steps_with(senders)
        by_position += [(instance.attempt, begins)] * run.progress_sent(senders)
    last = len(record.steps) - 1
    progress = []
    for position, entry in enumerate(record.compensation_log):
        attempt, begins = (
            by_position[position] if position < len(by_position) else (None, senders.begin_step[0])
        )
        delivery = SENT if attempt is not None else OWED if known else UNKNOWN
        at_step = record.step_index(entry.step)
        sender = senders.finish_steps if at_step == last else begins
        sent = record if attempt is None else replace(record, attempt=attempt)
        progress.append(
            OwedStatus(
                _built(sent, OrderStatus.IN_PROGRESS, entry.completed_at, entry.step),
                step=entry.step,
                attempt=attempt,
                follows=entry.completed_at,
                delivery=delivery,
                sent_by=sender,
            )
        )
    return progress


def _final(record: StateRecord, run: _Run | None, senders: StatusSenders) -> OwedStatus | None:
    final = senders.final(record)
    if final is None:
        return None
    sent_by = final.sender + (f", or {SUPERVISOR}" if final.by_supervisor else "")
    if run is None:
        delivery = UNKNOWN
    elif final.sender in run.completed:
        delivery = SENT
    elif final.by_supervisor and run.finished:
        # The attempt ended without the sending activity: the state was reached by the
        # supervisor, whose sweep sends the status with its write and has no history.
        delivery, sent_by = SENT_BY_SUPERVISOR, SUPERVISOR
    else:
        delivery = OWED
    return OwedStatus(
        _built(record, final.status, record.updated_at),
        step=None,
        attempt=record.attempt,
        follows=record.updated_at,
        delivery=delivery,
        sent_by=sent_by,
    )


def _built(
    record: StateRecord,
    status: OrderStatus,
    at: datetime,
    step: str | None = None,
) -> StatusMessage:
    message = status_for(record, status, now=at, step=step)
    if message is None:  # owed_statuses checked the reply queue first
        raise AssertionError(f"order {record.order_id!r} has no usable reply queue")
    return message


def _note(record: StateRecord) -> str:
    note = (
        "status messages leave no copy in the app: this is what the state record says the "
        "app owes the reply queue (C10), with the message ids it sends (R2); 'sent': the "
        "history shows the activity that sends it completed; 'owed': not yet, the activity "
        "or the supervisor sends it"
    )
    if record.resubmits:
        note += (
            f"; the order was resubmitted {record.resubmits} time(s) from Error: each Error "
            f"before sent a 'failed' status under the attempt that failed, listed when that "
            f"attempt's history shows it (not when the supervisor gave up)"
        )
    return note


def _run(view: Mapping[str, Any] | None, senders: StatusSenders) -> _Run | None:
    history = None if view is None else view.get("history")
    if view is None or not isinstance(history, list):
        return None
    scheduled = {
        event.get("EventId"): event.get("Name") or event.get("FunctionName")
        for event in history
        if _event_type(event) == "taskscheduled"
    }
    completed: list[str] = []
    completed_at: dict[str, datetime] = {}
    for event in history:
        if _event_type(event) != "taskcompleted":
            continue
        name = (
            event.get("FunctionName")
            or event.get("Name")
            or scheduled.get(event.get("TaskScheduledId"))
        )
        if not name:
            continue
        completed.append(str(name))
        at = _timestamp(event.get("Timestamp"))
        if at is not None:
            completed_at[str(name)] = at
    output = view.get("output")
    outcome = output.get("outcome") if isinstance(output, Mapping) else None
    if outcome == "superseded":
        writes = [i for i, name in enumerate(completed) if name in senders.writes]
        if writes:
            del completed[writes[-1]]
    finished = str(view.get("runtimeStatus")) in TERMINAL_RUNTIME_STATUSES
    return _Run(tuple(completed), finished, None if outcome is None else str(outcome), completed_at)


def _timestamp(text: object) -> datetime | None:
    try:
        return None if not isinstance(text, str) else parse_utc(text)
    except RecordFormatError:
        return None


def _event_type(event: Any) -> str:
    """`TaskCompleted` (the Functions host) and `TASK_COMPLETED` (the devhost) alike."""
    if not isinstance(event, Mapping):
        return ""
    return str(event.get("EventType", "")).replace("_", "").lower()


def owed_statuses_view(owed: OwedStatuses) -> dict[str, Any]:
    return {
        "replyTo": owed.reply_to,
        "messages": [
            {
                "status": message.message.subject,
                "step": message.step,
                "attempt": message.attempt,
                "messageId": message.message.message_id,
                "follows": format_utc(message.follows),
                "delivery": message.delivery,
                "sentBy": message.sent_by,
            }
            for message in owed.messages
        ],
        "note": owed.note,
    }
