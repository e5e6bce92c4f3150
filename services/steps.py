"""Fenced state writes of an orchestration attempt (D4, D6, E2, E5, E6, E8, C1, C2).

Each function is one blind conditional write through `StateStore.fenced_update`: it takes
effect only while `LockedBy` still names the attempt's instance id (D4), so an expired
attempt that wakes up late changes nothing (E5). A refused write returns an outcome with
`applied=False` and no messages: the attempt must end quietly, since the supervisor or a
newer attempt owns the order now.

Timer first (E6) needs no function here: the orchestration ends without touching the
record, whose expired CompleteBy is the supervisor's signal.

The write that moves an order to a final state counts it and its time since submission
(`count_if_finished`, C9); a repeat that finds the state already reached does not (C8).

Logs (C9): a refused write (`write superseded`), a step that failed for good and an order that
reached a final state, each with the attempt's ids only. A disabled level costs one level
check per call: the logger renders nothing before it (`observability.logs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain import transitions
from domain.contracts import AlertKind, OperatorAlert, OrderStatus, StatusMessage
from domain.policies import Timeouts, compensation_deadline, step_deadline
from domain.ports import StateStore
from domain.records import FINISHED_STATES, CompletedStep, InstanceId, ProcessState, StateRecord
from observability import logs, metrics
from services.status import alert_for, status_for

log = logs.get_logger("app.steps")


@dataclass(frozen=True)
class StepOutcome:
    """Result of a fenced write: the record after it, and what to send if it applied."""

    instance_id: InstanceId
    applied: bool
    record: StateRecord | None
    status: StatusMessage | None = None
    alert: OperatorAlert | None = None


def _outcome(instance: InstanceId, record: StateRecord | None, write: str) -> StepOutcome:
    if record is None:
        superseded(instance, write)
    return StepOutcome(instance, record is not None, record)


def superseded(instance: InstanceId, write: str, step: str | None = None) -> None:
    """Log a write of `instance` that the fence refused: the supervisor or a newer attempt
    owns the order now (D4), so the attempt ends without sending anything."""
    log.info("write superseded", instance_id=instance, step=step, write=write)


def count_if_finished(written: StateRecord) -> StateRecord:
    """Count an order that `written`, a write that just applied, moved to a final state
    (C9: sas.orders.* and sas.order.duration from its submission). Only the applying write
    calls this, so an activity that runs twice (C8) counts its order once."""
    if written.process_state in FINISHED_STATES:
        state = written.process_state.value
        metrics.order_finished(state, submitted=written.created_at, finished=written.updated_at)
        log.info(
            "order finished", order_id=written.order_id, instance_id=written.locked_by, state=state
        )
    return written


def _fenced(states: StateStore, change: transitions.FencedChange) -> StateRecord | None:
    written = states.fenced_update(change)
    return None if written is None else count_if_finished(written)


def already_reached(
    states: StateStore, instance: InstanceId, state: ProcessState
) -> StateRecord | None:
    """After a refused write: the record, when THIS attempt already moved it to `state`.

    An activity may run twice (C8): the first run's write applied but its status message was
    not sent. The repeat must recognise its own earlier write and send the message again
    (stable message ids de-duplicate it), while a stale attempt still gets nothing. Only the
    refusal path pays this read.
    """
    record = states.get(instance.order_id)
    if record is not None and record.locked_by == str(instance) and record.process_state is state:
        return record
    return None


def start_step(
    states: StateStore,
    instance: InstanceId,
    *,
    step: str,
    now: datetime,
    timeouts: Timeouts,
    completed: CompletedStep | None = None,
) -> StepOutcome:
    """Set CompleteBy = now + the step timeout of `timeouts` for `step` (D6, E2).

    The new deadline is `outcome.record.complete_by`: the orchestration's durable timer
    races the agent against it. `completed` logs the previous step for compensation (C1).
    """
    change = transitions.set_step_deadline(
        instance,
        step=step,
        complete_by=step_deadline(now, timeouts),
        now=now,
        completed=completed,
    )
    return _outcome(instance, states.fenced_update(change), "start_step")


def complete_order(
    states: StateStore,
    instance: InstanceId,
    *,
    now: datetime,
    reply_queues: frozenset[str],
    completed: CompletedStep | None = None,
) -> StepOutcome:
    """The agent answered before the timer: Processed and a `completed` status (E5, R2)."""
    record = _fenced(
        states, transitions.mark_processed(instance, now=now, completed=completed)
    ) or already_reached(states, instance, ProcessState.PROCESSED)
    if record is None:
        return _outcome(instance, None, "complete_order")
    status = status_for(record, OrderStatus.COMPLETED, reply_queues=reply_queues, now=now)
    return StepOutcome(instance, True, record, status=status)


def fail_order(
    states: StateStore,
    instance: InstanceId,
    *,
    reason: str,
    compensate: bool,
    now: datetime,
    timeouts: Timeouts,
    reply_queues: frozenset[str],
) -> StepOutcome:
    """A non-transient error from the remote service (E8).

    With nothing to undo: Error, an `order-error` alert and a `failed` status. When steps
    completed (`compensate`, the orchestration knows its own log): Compensating, and the
    orchestration runs the compensation next (C1); its end is reported by
    `finish_compensation`.
    """
    if compensate:
        change = transitions.begin_compensation(
            instance, now=now, reason=reason, complete_by=compensation_deadline(now, timeouts)
        )
        outcome = _outcome(instance, states.fenced_update(change), "fail_order")
        if outcome.applied:
            log.info("step failed", instance_id=instance, compensate=True)
        return outcome
    record = _fenced(
        states, transitions.mark_error(instance, now=now, reason=reason)
    ) or already_reached(states, instance, ProcessState.ERROR)
    if record is None:
        return _outcome(instance, None, "fail_order")
    log.info("step failed", instance_id=instance, compensate=False)
    return StepOutcome(
        instance,
        True,
        record,
        status=status_for(
            record, OrderStatus.FAILED, reply_queues=reply_queues, now=now, reason=reason
        ),
        alert=alert_for(record, AlertKind.ORDER_ERROR, reason=reason, now=now),
    )


def finish_compensation(
    states: StateStore,
    instance: InstanceId,
    *,
    failure: str | None,
    now: datetime,
    reply_queues: frozenset[str],
) -> StepOutcome:
    """Compensation ran: Compensated, or CompensationFailed with an alert (C2, R2).

    `failure` is None when every logged step was undone, else what went wrong.
    """
    if failure is None:
        record = _fenced(states, transitions.mark_compensated(instance, now=now))
        if record is None:
            return _outcome(instance, None, "finish_compensation")
        status = status_for(record, OrderStatus.COMPENSATED, reply_queues=reply_queues, now=now)
        return StepOutcome(instance, True, record, status=status)
    change = transitions.mark_compensation_failed(instance, now=now, reason=failure)
    record = _fenced(states, change)
    if record is None:
        return _outcome(instance, None, "finish_compensation")
    return StepOutcome(
        instance,
        True,
        record,
        status=status_for(
            record,
            OrderStatus.COMPENSATION_FAILED,
            reply_queues=reply_queues,
            now=now,
            reason=failure,
        ),
        alert=alert_for(record, AlertKind.COMPENSATION_FAILED, reason=failure, now=now),
    )
