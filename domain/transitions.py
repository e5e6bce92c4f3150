"""The order state machine (S4, D1-D4, E5, E6, E8, U4, U5, C1, C2).

Two kinds of transition, matching the two kinds of conditional write the stores offer:

- Whole-record transitions (`claim`, `retry_later`, `give_up`, `stall_compensation`,
  `resubmit`) take a record that was read with its etag and return the next record; the
  caller replaces it conditionally on that etag, so two starters or two supervisors that
  read the same version cannot both win (D3, U6).
- Fenced changes (`set_step_deadline`, `mark_processed`, `mark_error`, `begin_compensation`,
  `mark_compensated`, `mark_compensation_failed`) are written blind, without a read: a
  `FencedChange` is a small patch plus a guard (`LockedBy` equals the attempt's instance id
  and `ProcessState` is one of the allowed states, D4). A store applies it as one
  conditional write; `FencedChange.apply` is the same semantics in plain Python, which is
  what the unit tests and the store contract suite compare against.

Illegal transitions raise `IllegalTransition`; a fenced change whose guard fails raises
`FenceLost` from `apply` (stores report it as a refused write instead).

`ProcessState` flow::

    Pending --claim--> Processing --mark_processed--> Processed
       ^                  |  |--mark_error--> Error --resubmit--> Pending
       |                  |  '--begin_compensation--> Compensating --> Compensated
       '--retry_later-----|                                   |  '--> CompensationFailed
                          '--give_up--> Error (empty log) | Compensating (C1 log not empty)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from domain.records import (
    CompletedStep,
    InstanceId,
    ProcessState,
    StateRecord,
    format_utc,
)

JsonValue = Any
"""A value that JSON can carry (str, int, float, bool, None, list, dict)."""


class IllegalTransition(Exception):
    """A transition was asked of a record in a state that does not allow it."""

    def __init__(self, record: StateRecord, action: str, why: str) -> None:
        super().__init__(
            f"cannot {action} order {record.order_id!r} (ProcessState={record.process_state}, "
            f"LockedBy={record.locked_by!r}, attempt {record.attempt}): {why}"
        )
        self.order_id = record.order_id
        self.action = action


class FenceLost(Exception):
    """A fenced change met a record that its attempt no longer holds (D4, E5)."""

    def __init__(self, change: FencedChange, record: StateRecord) -> None:
        super().__init__(
            f"{change.action} by {change.locked_by!r} refused for order {record.order_id!r}: "
            f"record is {record.process_state} and LockedBy={record.locked_by!r}; "
            f"a newer attempt or the supervisor owns it"
        )
        self.change = change
        self.record = record


def new_record(order_id: str, reply_to: str | None, now: datetime) -> StateRecord:
    """First write of the state record (S4): Pending, unlocked, no deadline, no failures."""
    return StateRecord(
        order_id=order_id,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        reply_to=reply_to,
        attempt=0,
        created_at=now,
        updated_at=now,
    )


def is_claimable(record: StateRecord, now: datetime) -> bool:
    """Pending, unlocked and past any retry delay the supervisor set (D1, U5)."""
    return (
        record.process_state is ProcessState.PENDING
        and record.locked_by is None
        and (record.complete_by is None or record.complete_by <= now)
    )


def is_expired(record: StateRecord, now: datetime) -> bool:
    """A running attempt or compensation whose deadline passed (U1, C2)."""
    return (
        record.process_state in (ProcessState.PROCESSING, ProcessState.COMPENSATING)
        and record.complete_by is not None
        and record.complete_by <= now
    )


def claim(record: StateRecord, *, now: datetime, claim_deadline: datetime) -> StateRecord:
    """Claim the next attempt (D2, D3) with a provisional CompleteBy.

    The provisional deadline covers a starter that crashes between the claim and starting
    the orchestration: the supervisor then finds the claim expired and recovers it.
    """
    if not is_claimable(record, now):
        raise IllegalTransition(record, "claim", "only a due, unlocked Pending record is claimable")
    attempt = record.attempt + 1
    return replace(
        record,
        process_state=ProcessState.PROCESSING,
        locked_by=str(InstanceId(record.order_id, attempt)),
        complete_by=claim_deadline,
        attempt=attempt,
        current_step=None,
        last_error=None,
        updated_at=now,
    )


def _require_expired(record: StateRecord, action: str, now: datetime) -> None:
    if not is_expired(record, now):
        raise IllegalTransition(record, action, "the record is not running past its CompleteBy")


def retry_later(record: StateRecord, *, now: datetime, not_before: datetime) -> StateRecord:
    """Count the expired attempt as a failure and hand the order back to the starter (U4, U5).

    The new CompleteBy of the Pending record is the earliest time the starter may claim it,
    which is how the supervisor makes a longer wait past a threshold (U5).
    """
    _require_expired(record, "retry", now)
    if record.process_state is not ProcessState.PROCESSING:
        raise IllegalTransition(record, "retry", "only a processing attempt is retried")
    return replace(
        record,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=not_before,
        failure_count=record.failure_count + 1,
        current_step=None,
        updated_at=now,
    )


def give_up(
    record: StateRecord, *, now: datetime, reason: str, compensation_deadline: datetime
) -> StateRecord:
    """The failure is non-transient (U4): Error, or compensation when steps completed (C1).

    With an empty compensation log the record goes to Error. Otherwise the supervisor
    requests compensation: the record moves to Compensating under a new attempt's instance
    id, which the caller starts as a compensation orchestration.
    """
    _require_expired(record, "give up", now)
    if record.process_state is not ProcessState.PROCESSING:
        raise IllegalTransition(record, "give up", "only a processing attempt is given up")
    if not record.compensation_log:
        return replace(
            record,
            process_state=ProcessState.ERROR,
            complete_by=None,
            failure_count=record.failure_count + 1,
            last_error=reason,
            updated_at=now,
        )
    attempt = record.attempt + 1
    return replace(
        record,
        process_state=ProcessState.COMPENSATING,
        locked_by=str(InstanceId(record.order_id, attempt)),
        complete_by=compensation_deadline,
        failure_count=record.failure_count + 1,
        attempt=attempt,
        current_step=None,
        last_error=reason,
        updated_at=now,
    )


def stall_compensation(record: StateRecord, *, now: datetime, reason: str) -> StateRecord:
    """A compensation that outlived its deadline needs an operator (C2)."""
    _require_expired(record, "fail stalled compensation", now)
    if record.process_state is not ProcessState.COMPENSATING:
        raise IllegalTransition(record, "fail stalled compensation", "it is not compensating")
    return replace(
        record,
        process_state=ProcessState.COMPENSATION_FAILED,
        complete_by=None,
        last_error=reason,
        updated_at=now,
    )


def resubmit(record: StateRecord, *, now: datetime) -> StateRecord:
    """An operator resubmits an order in Error after investigating it (E8)."""
    if record.process_state is not ProcessState.ERROR:
        raise IllegalTransition(record, "resubmit", "only an order in Error is resubmitted")
    return replace(
        record,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        current_step=None,
        updated_at=now,
    )


@dataclass(frozen=True)
class FencedChange:
    """A blind conditional patch of one state record, guarded by the attempt's fence (D4).

    `sets` assigns document fields, `appends` adds entries to list fields. A store applies
    both only when `LockedBy == locked_by` and `ProcessState` is in `allowed_states`.
    """

    action: str
    order_id: str
    locked_by: str
    allowed_states: frozenset[ProcessState]
    sets: tuple[tuple[str, JsonValue], ...]
    appends: tuple[tuple[str, JsonValue], ...] = ()

    def holds_for(self, record: StateRecord) -> bool:
        return (
            record.order_id == self.order_id
            and record.locked_by == self.locked_by
            and record.process_state in self.allowed_states
        )

    def apply(self, record: StateRecord) -> StateRecord:
        """The record after this change, or `FenceLost` when the guard fails."""
        if not self.holds_for(record):
            raise FenceLost(self, record)
        document = record.to_document()
        for name, value in self.sets:
            document[name] = value
        for name, value in self.appends:
            document[name] = [*document[name], value]
        return StateRecord.from_document(document, etag=record.etag)


def _fenced(
    action: str,
    instance: InstanceId,
    allowed: Iterable[ProcessState],
    now: datetime,
    sets: dict[str, JsonValue],
    completed: CompletedStep | None = None,
) -> FencedChange:
    sets["UpdatedAt"] = format_utc(now)
    appends = () if completed is None else (("CompensationLog", completed.to_document()),)
    return FencedChange(
        action=action,
        order_id=instance.order_id,
        locked_by=str(instance),
        allowed_states=frozenset(allowed),
        sets=tuple(sets.items()),
        appends=appends,
    )


def set_step_deadline(
    instance: InstanceId,
    *,
    step: str,
    complete_by: datetime,
    now: datetime,
    completed: CompletedStep | None = None,
) -> FencedChange:
    """The orchestrator sets CompleteBy for the step it starts (D6, E2).

    `completed` appends the previous step to the compensation log (C1) in the same write,
    so a step costs one write, not two.
    """
    return _fenced(
        "set step deadline",
        instance,
        [ProcessState.PROCESSING],
        now,
        {"CompleteBy": format_utc(complete_by), "CurrentStep": step},
        completed,
    )


def mark_processed(
    instance: InstanceId, *, now: datetime, completed: CompletedStep | None = None
) -> FencedChange:
    """The response came before the timer: Processed, only if the fence holds (E5)."""
    return _fenced(
        "mark processed",
        instance,
        [ProcessState.PROCESSING],
        now,
        {"ProcessState": ProcessState.PROCESSED.value, "CompleteBy": None, "CurrentStep": None},
        completed,
    )


def mark_error(instance: InstanceId, *, now: datetime, reason: str) -> FencedChange:
    """A non-transient error with nothing to undo (E8): Error, for an operator."""
    return _fenced(
        "mark error",
        instance,
        [ProcessState.PROCESSING],
        now,
        {"ProcessState": ProcessState.ERROR.value, "CompleteBy": None, "LastError": reason},
    )


def begin_compensation(
    instance: InstanceId, *, now: datetime, reason: str, complete_by: datetime
) -> FencedChange:
    """The task cannot finish and steps completed: undo them in reverse order (C1, C2)."""
    return _fenced(
        "begin compensation",
        instance,
        [ProcessState.PROCESSING],
        now,
        {
            "ProcessState": ProcessState.COMPENSATING.value,
            "CompleteBy": format_utc(complete_by),
            "CurrentStep": None,
            "LastError": reason,
        },
    )


def mark_compensated(instance: InstanceId, *, now: datetime) -> FencedChange:
    """Every logged step was undone (C2)."""
    return _fenced(
        "mark compensated",
        instance,
        [ProcessState.COMPENSATING],
        now,
        {"ProcessState": ProcessState.COMPENSATED.value, "CompleteBy": None},
    )


def mark_compensation_failed(instance: InstanceId, *, now: datetime, reason: str) -> FencedChange:
    """A compensating step failed for good: an operator must finish the job (C2)."""
    return _fenced(
        "mark compensation failed",
        instance,
        [ProcessState.COMPENSATING],
        now,
        {
            "ProcessState": ProcessState.COMPENSATION_FAILED.value,
            "CompleteBy": None,
            "LastError": reason,
        },
    )


def steps_to_compensate(record: StateRecord) -> tuple[CompletedStep, ...]:
    """The compensation log in the order compensation must run: newest first (C1)."""
    return tuple(reversed(record.compensation_log))
