"""Fenced state writes of the step workflow, and who is told what (D4, D6, E5, E8, C1, C2, R2).

Each function is one blind conditional write through `StateStore.fenced_update`, applied
only while `LockedBy` still names the attempt (D4): an expired attempt that wakes up late
changes nothing. A refused write returns `applied=False` and nothing to send. An activity
may run twice (C8): a write that moves the order to a final state recognises, when refused,
that this same attempt made it already, and returns the same messages again (their stable
ids de-duplicate them, R2).

Progress (R2): the app hears `in-progress` with the step's name as each step completes,
then the final status; operators hear of `Error` and `CompensationFailed` (E8, C2). The
write that moves an order to a final state counts it (C9); a repeat that finds the state
already reached does not.

Logs (C9), with the attempt's ids and the step only: a write the fence refused (`write
superseded`), a step that failed for good, each undo that finished or failed, and the order
reaching its final state (`services.steps.count_if_finished`). The step and undo that began
are logged by the activity once their agent has its request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain import transitions
from domain.contracts import AlertKind, OperatorAlert, OrderStatus, StatusMessage
from domain.policies import Timeouts, compensation_deadline
from domain.ports import StateStore
from domain.records import CompletedStep, InstanceId, ProcessState, StateRecord, StepState
from domain.transitions import FencedChange, Undo
from observability import logs
from services.status import alert_for, left_to_undo, status_for
from services.steps import already_reached, count_if_finished, superseded


@dataclass(frozen=True)
class StepWriteOutcome:
    """The record after a write, what to send because it applied, and what is left to undo
    when the write started compensation."""

    applied: bool
    record: StateRecord | None
    statuses: tuple[StatusMessage, ...] = ()
    alert: OperatorAlert | None = None
    undo: tuple[Undo, ...] = ()


@dataclass(frozen=True)
class Done:
    """A step that completed (or was undone) just before a write, by position."""

    index: int
    name: str
    reference: str | None


REFUSED = StepWriteOutcome(applied=False, record=None)

log = logs.get_logger("app.steps")


def begin_step(
    states: StateStore,
    instance: InstanceId,
    *,
    index: int,
    name: str,
    done: Done | None,
    now: datetime,
    complete_by: datetime,
    reply_queues: frozenset[str],
) -> StepWriteOutcome:
    """Start step `index` with its CompleteBy (D6, E2); the step before it, `done`, is
    recorded completed and logged for compensation in the same write (C1)."""
    completed = None if done is None else (done.index, _logged(done, now))
    change = transitions.begin_step(
        instance,
        index=index,
        name=name,
        complete_by=complete_by,
        now=now,
        completed=completed,
    )
    record = states.fenced_update(change) or _begun_already(states, instance, index, done)
    if record is None:
        return _refused(instance, "begin_step", name)
    progress = () if done is None else _progress(record, done, now, reply_queues)
    return StepWriteOutcome(True, record, progress)


def finish_steps(
    states: StateStore,
    instance: InstanceId,
    *,
    done: Done,
    now: datetime,
    reply_queues: frozenset[str],
) -> StepWriteOutcome:
    """The last step completed: Processed under the fence (E5), `in-progress` for the last
    step and then `completed` (R2)."""
    change = transitions.finish_steps(
        instance, index=done.index, completed=_logged(done, now), now=now
    )
    record = _written_or_reached(states, change, instance, ProcessState.PROCESSED)
    if record is None:
        return _refused(instance, "finish_steps", done.name)
    statuses = (
        *_progress(record, done, now, reply_queues),
        *_status(record, OrderStatus.COMPLETED, now, reply_queues),
    )
    return StepWriteOutcome(True, record, statuses)


def fail_step(
    states: StateStore,
    instance: InstanceId,
    *,
    index: int,
    name: str,
    reason: str,
    now: datetime,
    timeouts: Timeouts,
    reply_queues: frozenset[str],
) -> StepWriteOutcome:
    """Step `index` failed for good (E8). The steps before it completed (an attempt runs them
    in order), so with `index` 0 nothing is undone: Error, a `failed` status and an
    `order-error` alert. Otherwise the order starts compensating, and the outcome holds what
    to undo, newest first (C1)."""
    compensate = index > 0
    change = transitions.fail_step(
        instance,
        index=index,
        name=name,
        reason=reason,
        now=now,
        compensate_by=compensation_deadline(now, timeouts) if compensate else None,
    )
    if compensate:
        record = _written_or_reached(states, change, instance, ProcessState.COMPENSATING)
        if record is None:
            return _refused(instance, "fail_step", name)
        log.info("step failed", instance_id=instance, step=name, compensate=True)
        return StepWriteOutcome(True, record, undo=transitions.compensation_plan(record))
    record = _written_or_reached(states, change, instance, ProcessState.ERROR)
    if record is None:
        return _refused(instance, "fail_step", name)
    log.info("step failed", instance_id=instance, step=name, compensate=False)
    return StepWriteOutcome(
        True,
        record,
        _status(record, OrderStatus.FAILED, now, reply_queues, reason=reason),
        alert_for(record, AlertKind.ORDER_ERROR, reason=reason, now=now),
    )


def begin_undo(
    states: StateStore,
    instance: InstanceId,
    undo: Undo,
    *,
    undone: Undo | None,
    now: datetime,
    complete_by: datetime,
) -> StepWriteOutcome:
    """Start undoing a step with its own CompleteBy; the undo before it, `undone`, is
    recorded Compensated in the same write (C1, C2)."""
    change = transitions.begin_undo(
        instance,
        undo,
        complete_by=complete_by,
        now=now,
        undone=undone,
    )
    record = states.fenced_update(change)
    if record is None:
        return _refused(instance, "begin_undo", undo.name)
    _undone(instance, undone)
    return StepWriteOutcome(True, record)


def finish_undo(
    states: StateStore,
    instance: InstanceId,
    *,
    undone: Undo | None,
    now: datetime,
    reply_queues: frozenset[str],
) -> StepWriteOutcome:
    """Every step was undone: Compensated and a `compensated` status (C2, R2)."""
    change = transitions.finish_undo(instance, undone=undone, now=now)
    record = _written_or_reached(states, change, instance, ProcessState.COMPENSATED, undone=undone)
    if record is None:
        return _refused(instance, "finish_undo", None if undone is None else undone.name)
    return StepWriteOutcome(
        True, record, _status(record, OrderStatus.COMPENSATED, now, reply_queues)
    )


def undo_failed(
    states: StateStore,
    instance: InstanceId,
    undo: Undo,
    *,
    reason: str,
    now: datetime,
    reply_queues: frozenset[str],
) -> StepWriteOutcome:
    """Undoing a step failed for good: CompensationFailed, a `compensation-failed` status and
    an operator alert that names the step and why (C2)."""
    change = transitions.undo_failed(instance, undo, reason=reason, now=now)
    record = _written_or_reached(states, change, instance, ProcessState.COMPENSATION_FAILED)
    if record is None:
        return _refused(instance, "undo_failed", undo.name)
    log.info("undo failed", instance_id=instance, step=undo.name)
    why = f"undoing {undo.name} failed: {reason}"
    return StepWriteOutcome(
        True,
        record,
        _status(record, OrderStatus.COMPENSATION_FAILED, now, reply_queues, reason=why),
        alert_for(
            record,
            AlertKind.COMPENSATION_FAILED,
            reason=f"{why}; {left_to_undo(record)}",
            now=now,
        ),
    )


def _refused(instance: InstanceId, write: str, step: str | None) -> StepWriteOutcome:
    superseded(instance, write, step)
    return REFUSED


def _undone(instance: InstanceId, undone: Undo | None) -> None:
    """Log the undo that finished just before this write, when there was one (C2)."""
    if undone is not None:
        log.info("undo finished", instance_id=instance, step=undone.name)


def _written_or_reached(
    states: StateStore,
    change: FencedChange,
    instance: InstanceId,
    state: ProcessState,
    *,
    undone: Undo | None = None,
) -> StateRecord | None:
    """The record `change` wrote, counted (and logged) when it finished the order, or the one
    this attempt wrote before (C8); `undone` is the undo the write records as finished."""
    written = states.fenced_update(change)
    if written is not None:
        _undone(instance, undone)
        count_if_finished(written)
        return written
    return already_reached(states, instance, state)


def _begun_already(
    states: StateStore, instance: InstanceId, index: int, done: Done | None
) -> StateRecord | None:
    """After a refused `begin_step`: the record, when THIS attempt already made that write
    (the activity ran twice, C8): step `index` running, `done` completed and logged once.
    Its progress status is sent again under its stable id (R2); a stale attempt gets None."""
    if done is None:
        return None
    record = states.get(instance.order_id)
    if (
        record is None
        or record.locked_by != str(instance)
        or record.process_state is not ProcessState.PROCESSING
        or index >= len(record.steps)
        or record.steps[index].state is not StepState.RUNNING
        or record.steps[done.index].state is not StepState.COMPLETED
    ):
        return None
    return record


def _logged(done: Done, now: datetime) -> CompletedStep:
    return CompletedStep(done.name, done.reference, now)


def _progress(
    record: StateRecord, done: Done, now: datetime, reply_queues: frozenset[str]
) -> tuple[StatusMessage, ...]:
    return _status(record, OrderStatus.IN_PROGRESS, now, reply_queues, step=done.name)


def _status(
    record: StateRecord,
    status: OrderStatus,
    now: datetime,
    reply_queues: frozenset[str],
    *,
    reason: str | None = None,
    step: str | None = None,
) -> tuple[StatusMessage, ...]:
    message = status_for(
        record, status, reply_queues=reply_queues, now=now, reason=reason, step=step
    )
    return () if message is None else (message,)
