"""The status messages the app owes one order, for the operator console's timeline (R1, R2,
S2, C10, E8).

A status message goes to the order's reply queue and leaves no copy in the app; storing one
per status would cost a state-store write each. The state record is the truth (C10), and
each status follows one transition it shows:

- `received`: the record's creation. The submission function sends it once the write that
  created the record returned (S2), outside any orchestration.
- `in-progress`, one per entry of the compensation log (workflow version 2): the fenced write
  that logged the step - ``begin_step`` of the next step (``run_step_in_activity`` with the
  agent as an activity), or ``finish_steps`` after the last - sends it.
- the final status of a finished record: `completed` (Processed), `failed` (Error),
  `compensated`, `compensation-failed`, sent by the activity whose write reached the state,
  or, for `failed` and `compensation-failed`, by the supervisor's sweep when it gave up on an
  expired attempt (U4) or found a compensation stalling once too often (C2).

An operator's resubmit (from Error) or compensation retry (from CompensationFailed) moves the
record on under a new attempt, and it no longer shows the final state an earlier attempt
reached. That attempt's history does: its output says it ended `failed` or
`compensation-failed`, so its ``fail_step`` (``fail_order_step``) or ``undo_failed`` sent that
status under its attempt; the time it follows is when that activity completed. A final state
an earlier attempt reached through the supervisor leaves no trace in any history: the note
says how often the order was resubmitted.

Each message is built by `services.status.status_for`, the function its senders use, so its
id is the one sent: `"{orderId}:{status}:{attempt}"`, or `"{orderId}:in-progress:{step}"`.

Whether it went out is read from the orchestration history of the attempt that sends it: an
activity sends before it returns, so a completed sending activity means `sent`. One that the
history does not show (yet) completed means `owed`: the activity, retried by the durable
runtime, sends it, or the supervisor recovers the attempt (U4). The console keeps no inputs
or results of a history (C3), so the `in-progress` of each step is matched by position:
every ``begin_step`` (or ``run_step_in_activity``) of an attempt but its first, and its
``finish_steps``, logged one step
and sent its `in-progress`, in the order of the log; an attempt whose output says it was superseded
(D4) did not apply its last write, which sent nothing. Without the history of an attempt
(purged, or older than the timeline lists) its messages are `unknown`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from domain.contracts import OrderStatus, StatusMessage
from domain.records import (
    WORKFLOW_STEPS,
    InstanceId,
    ProcessState,
    RecordFormatError,
    StateRecord,
    format_utc,
    parse_utc,
)
from services.status import reply_queue_allowed, status_for

SENT = "sent"
OWED = "owed"
UNKNOWN = "unknown"
SENT_WITH_RECORD = "sent with the record's creation (S2)"
SENT_BY_SUPERVISOR = "sent by the supervisor"

SUBMISSION = "receive_order"
SUPERVISOR = "the supervisor's sweep"

WRITE_ACTIVITIES = frozenset(
    {
        "begin_attempt",
        "complete_order_step",
        "fail_order_step",
        "begin_step",
        "run_step_in_activity",
        "finish_steps",
        "fail_step",
        "begin_undo",
        "run_undo_in_activity",
        "finish_undo",
        "undo_failed",
    }
)
"""The activities that write the state record under the attempt's fence (D4)."""

BEGIN_STEP_ACTIVITIES = ("begin_step", "run_step_in_activity")
"""The activities that begin a step, each logging the step before it (C1)."""

TERMINAL_RUNTIME_STATUSES = frozenset({"Completed", "Failed", "Terminated"})


@dataclass(frozen=True)
class _Final:
    status: OrderStatus
    senders: tuple[str, ...]
    """The activities that send it, either workflow version."""
    by_supervisor: bool
    """The supervisor's sweep may have reached the state, and sent the status, itself."""


FINAL_STATUSES: Mapping[ProcessState, _Final] = {
    ProcessState.PROCESSED: _Final(
        OrderStatus.COMPLETED, ("finish_steps", "complete_order_step"), False
    ),
    ProcessState.ERROR: _Final(OrderStatus.FAILED, ("fail_step", "fail_order_step"), True),
    ProcessState.COMPENSATED: _Final(OrderStatus.COMPENSATED, ("finish_undo",), False),
    ProcessState.COMPENSATION_FAILED: _Final(
        OrderStatus.COMPENSATION_FAILED, ("undo_failed",), True
    ),
}


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


EARLIER_FINALS: Mapping[str, tuple[OrderStatus, tuple[str, ...]]] = {
    "failed": (OrderStatus.FAILED, ("fail_step", "fail_order_step")),
    "compensation-failed": (OrderStatus.COMPENSATION_FAILED, ("undo_failed",)),
}
"""An earlier attempt's orchestration output `outcome`, the final status it sent, and the
activities that send it (an operator moved the record on since, E8, C2)."""


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

    @property
    def progress_sent(self) -> int:
        begun = sum(self.completed.count(begins) for begins in BEGIN_STEP_ACTIVITIES)
        return max(0, begun - 1) + self.completed.count("finish_steps")

    @property
    def begins_steps_with(self) -> str:
        """The activity that begins this attempt's steps: with an activity agent it runs
        the agent too."""
        if "run_step_in_activity" in self.completed:
            return "run_step_in_activity"
        return "begin_step"


def owed_statuses(
    record: StateRecord,
    attempts: Sequence[InstanceId],
    orchestrations: Mapping[str, Mapping[str, Any] | None],
    *,
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
    runs = {instance.attempt: _run(orchestrations.get(str(instance))) for instance in attempts}
    messages = [_received(record, reply_queues)]
    if record.workflow_version == WORKFLOW_STEPS:
        messages += _progress(record, attempts, runs, reply_queues)
    messages += _earlier_finals(record, runs, reply_queues)
    final = _final(record, runs.get(record.attempt), reply_queues)
    if final is not None:
        messages.append(final)
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


def _earlier_finals(
    record: StateRecord, runs: Mapping[int, _Run | None], reply_queues: frozenset[str]
) -> list[OwedStatus]:
    """The final statuses earlier attempts sent before an operator moved the record on."""
    finals = []
    for attempt, run in sorted(runs.items()):
        earlier = None if run is None else EARLIER_FINALS.get(run.outcome or "")
        if attempt >= record.attempt or run is None or earlier is None:
            continue
        status, senders = earlier
        sender = next((name for name in senders if name in run.completed_at), None)
        if sender is None:
            continue
        at = run.completed_at[sender]
        finals.append(
            OwedStatus(
                _built(replace(record, attempt=attempt), status, at, reply_queues),
                step=None,
                attempt=attempt,
                follows=at,
                delivery=SENT,
                sent_by=sender,
            )
        )
    return finals


def _received(record: StateRecord, reply_queues: frozenset[str]) -> OwedStatus:
    return OwedStatus(
        _built(record, OrderStatus.RECEIVED, record.created_at, reply_queues),
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
    reply_queues: frozenset[str],
) -> list[OwedStatus]:
    """One `in-progress` per logged step, attributed by position to the attempts whose
    histories show their sending activity completed."""
    log = record.compensation_log
    senders: list[tuple[int, str]] = []
    known = bool(attempts) and attempts[0].attempt == 1
    for instance in attempts if known else ():
        run = runs.get(instance.attempt)
        if run is None:
            known = False
            break
        senders += [(instance.attempt, run.begins_steps_with)] * run.progress_sent
    last = len(record.steps) - 1
    progress = []
    for position, entry in enumerate(log):
        attempt, begins = senders[position] if position < len(senders) else (None, "begin_step")
        delivery = SENT if attempt is not None else OWED if known else UNKNOWN
        at_step = record.step_index(entry.step)
        sender = "finish_steps" if at_step == last else begins
        sent = record if attempt is None else replace(record, attempt=attempt)
        progress.append(
            OwedStatus(
                _built(sent, OrderStatus.IN_PROGRESS, entry.completed_at, reply_queues, entry.step),
                step=entry.step,
                attempt=attempt,
                follows=entry.completed_at,
                delivery=delivery,
                sent_by=sender,
            )
        )
    return progress


def _final(
    record: StateRecord, run: _Run | None, reply_queues: frozenset[str]
) -> OwedStatus | None:
    final = FINAL_STATUSES.get(record.process_state)
    if final is None:
        return None
    senders = " or ".join(final.senders) + (f", or {SUPERVISOR}" if final.by_supervisor else "")
    if run is None:
        delivery = UNKNOWN
    elif any(name in run.completed for name in final.senders):
        delivery = SENT
    elif final.by_supervisor and run.finished:
        # The attempt ended without the sending activity: the state was reached by the
        # supervisor, whose sweep sends the status with its write and has no history.
        delivery, senders = SENT_BY_SUPERVISOR, SUPERVISOR
    else:
        delivery = OWED
    return OwedStatus(
        _built(record, final.status, record.updated_at, reply_queues),
        step=None,
        attempt=record.attempt,
        follows=record.updated_at,
        delivery=delivery,
        sent_by=senders,
    )


def _built(
    record: StateRecord,
    status: OrderStatus,
    at: datetime,
    reply_queues: frozenset[str],
    step: str | None = None,
) -> StatusMessage:
    message = status_for(record, status, reply_queues=reply_queues, now=at, step=step)
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


def _run(view: Mapping[str, Any] | None) -> _Run | None:
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
        writes = [i for i, name in enumerate(completed) if name in WRITE_ACTIVITIES]
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
