"""Fenced state writes of an attempt, and who is told what (D4, D6, E5, E8, C1, C2, C4, C6, C8, R2).

Each function is one blind conditional write (`StateStore.fenced_update`) returning a
`Written`: refused, `applied=False` and nothing to send (D4); applied, the statuses and
alerts to send (R2, E8, C2), which the same write stored in the record's outbox (C6,
`services.outbox`). A write run again after its own earlier one applied returns what the
record still owes (C8, `already_reached`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from domain import transitions
from domain.contracts import AlertKind, OperatorAlert, OrderStatus, StatusMessage
from domain.ports import StateStore
from domain.records import (
    FINISHED_STATES,
    InstanceId,
    OwedMessage,
    ProcessState,
    StateRecord,
    StepState,
)
from domain.transitions import FencedChange
from domain.workflow import Step
from observability import logs, metrics
from services.outbox import delivery, fenced_owed, owed_alert, owed_status
from services.status import left_to_undo

log = logs.get_logger("app.steps")


@dataclass(frozen=True)
class Written:
    """The record after a write, what to send because it applied (the record's outbox), and
    what is left to undo when the write started compensation; for a write that began a
    request, the `tries` it drew that fit in the order's retry budget (C4)."""

    applied: bool
    record: StateRecord | None
    undo: tuple[Step, ...] = ()
    tries: int = 0

    @property
    def statuses(self) -> tuple[StatusMessage, ...]:
        return () if self.record is None else delivery(self.record).statuses

    @property
    def alert(self) -> OperatorAlert | None:
        alerts = () if self.record is None else delivery(self.record).alerts
        return alerts[0] if alerts else None


REFUSED = Written(applied=False, record=None)


def begin_step(
    states: StateStore,
    instance: InstanceId,
    step: Step,
    *,
    done: Step | None,
    now: datetime,
    complete_by: datetime,
    draw: int = 0,
) -> Written:
    """Start `step` with the CompleteBy the orchestration chose (D6, E2); the step before
    it, `done`, is recorded completed and logged for compensation in the same write (C1).
    The write draws `draw` tries for the step's request from the order's retry budget, and
    `tries` is the part that fit (C4). Run again after it applied (C8), it draws again and
    keeps what the record still owes."""
    change = transitions.begin_step(
        instance, step, complete_by=complete_by, now=now, done=done, draw=draw
    )
    # The progress of `done` is this attempt's to send at once; the relay takes it over
    # only if the attempt dies, which its step's CompleteBy tells (C6).
    progress = () if done is None else (_status(instance, OrderStatus.IN_PROGRESS, now, done),)
    change = replace(change, owed=fenced_owed(progress, due=complete_by))
    record = states.fenced_update(change)
    if record is None and _begun_already(states, instance, step, done):
        record = states.fenced_update(transitions.draw_again(instance, step, draw=draw, now=now))
    if record is None:
        return _refused(instance, begin_step, step.name)
    return Written(True, record, tries=record.budget.step_tries(draw, record.tries_spent))


def finish_steps(states: StateStore, instance: InstanceId, done: Step, *, now: datetime) -> Written:
    """The last step completed: Processed under the fence (E5), `in-progress` for the last
    step and then `completed` (R2)."""
    owed = (
        _status(instance, OrderStatus.IN_PROGRESS, now, done),
        _status(instance, OrderStatus.COMPLETED, now),
    )
    change = replace(
        transitions.finish_steps(instance, done, now=now), owed=fenced_owed(owed, due=now)
    )
    record = _written_or_reached(states, change, instance, ProcessState.PROCESSED)
    if record is None:
        return _refused(instance, finish_steps, done.name)
    return Written(True, record)


def fail_step(
    states: StateStore,
    instance: InstanceId,
    step: Step,
    *,
    reason: str,
    now: datetime,
    compensate_by: datetime,
) -> Written:
    """`step` failed for good (E8). The steps before it completed (an attempt runs them in
    order), so for the first step nothing is undone: Error, a `failed` status and an
    `order-error` alert. Otherwise the order starts compensating with `compensate_by` as
    its deadline, and the outcome holds what to undo, newest first (C1)."""
    if step.index > 0:
        change = transitions.fail_step(
            instance, step, reason=reason, now=now, compensate_by=compensate_by
        )
        # This attempt goes on to undo the steps: nothing is owed (C6).
        change = replace(change, owed=None)
        record = _written_or_reached(states, change, instance, ProcessState.COMPENSATING)
        if record is None:
            return _refused(instance, fail_step, step.name)
        log.info("step failed", instance_id=instance, step=step.name, compensate=True)
        return Written(True, record, undo=transitions.compensation_plan(record))
    owed = (
        _status(instance, OrderStatus.FAILED, now, reason=reason),
        owed_alert(AlertKind.ORDER_ERROR, attempt=instance.attempt, at=now, reason=reason),
    )
    change = replace(
        transitions.fail_step(instance, step, reason=reason, now=now, compensate_by=None),
        owed=fenced_owed(owed, due=now),
    )
    record = _written_or_reached(states, change, instance, ProcessState.ERROR)
    if record is None:
        return _refused(instance, fail_step, step.name)
    log.info("step failed", instance_id=instance, step=step.name, compensate=False)
    return Written(True, record)


def begin_undo(
    states: StateStore,
    instance: InstanceId,
    undo: Step,
    *,
    undone: Step | None,
    now: datetime,
    complete_by: datetime,
    draw: int = 0,
) -> Written:
    """Start undoing `undo` with its own CompleteBy; the undo before it, `undone`, is
    recorded Compensated in the same write (C1, C2), which draws `draw` tries for the
    undo's request from the order's retry budget; `tries` is the part that fit (C4)."""
    change = transitions.begin_undo(
        instance, undo, complete_by=complete_by, now=now, undone=undone, draw=draw
    )
    # Whoever started this instance delivered what the record owed first; nothing more is
    # owed until the compensation ends (C6).
    record = states.fenced_update(replace(change, owed=None))
    if record is None:
        return _refused(instance, begin_undo, undo.name)
    _undone(instance, undone)
    tries = record.budget.undo_tries(draw, record.tries_spent, record.undo_tries_spent)
    return Written(True, record, tries=tries)


def finish_undo(
    states: StateStore,
    instance: InstanceId,
    *,
    undone: Step | None,
    now: datetime,
    ends_in: ProcessState = ProcessState.COMPENSATED,
) -> Written:
    """Every step was undone: Compensated and a `compensated` status (C2, R2); or, for an
    order the supervisor gave up on (`ends_in` Error), Error with a `failed` status and an
    `order-error` alert that give the give-up's reason and say nothing is left (U4, E8)."""
    change = transitions.finish_undo(instance, undone=undone, now=now, ends_in=ends_in)
    if ends_in is ProcessState.COMPENSATED:
        owed: tuple[OwedMessage, ...] = (_status(instance, OrderStatus.COMPENSATED, now),)
    else:
        # The give-up's reason is in the record, which a blind write does not know.
        before, after = _read_around(states, instance, change)
        reason = (before.last_error if before is not None else None) or "the order was given up"
        left = "" if after is None else f"; {left_to_undo(after)}"
        owed = (
            _status(instance, OrderStatus.FAILED, now, reason=reason),
            owed_alert(
                AlertKind.ORDER_ERROR, attempt=instance.attempt, at=now, reason=reason + left
            ),
        )
    change = replace(change, owed=fenced_owed(owed, due=now))
    record = _written_or_reached(states, change, instance, ends_in, undone=undone)
    if record is None:
        return _refused(instance, finish_undo, None if undone is None else undone.name)
    return Written(True, record)


def undo_failed(
    states: StateStore, instance: InstanceId, undo: Step, *, reason: str, now: datetime
) -> Written:
    """Undoing a step failed for good: CompensationFailed, a `compensation-failed` status and
    an operator alert that names the step and why (C2)."""
    change = transitions.undo_failed(instance, undo, reason=reason, now=now)
    why = f"undoing {undo.name} failed: {reason}"
    # The alert names what is left to undo, which the record after this write tells.
    _, after = _read_around(states, instance, change)
    left = None if after is None else left_to_undo(after)
    owed = (
        _status(instance, OrderStatus.COMPENSATION_FAILED, now, reason=why),
        owed_alert(
            AlertKind.COMPENSATION_FAILED,
            attempt=instance.attempt,
            at=now,
            reason=why if left is None else f"{why}; {left}",
        ),
    )
    change = replace(change, owed=fenced_owed(owed, due=now))
    record = _written_or_reached(states, change, instance, ProcessState.COMPENSATION_FAILED)
    if record is None:
        return _refused(instance, undo_failed, undo.name)
    log.info("undo failed", instance_id=instance, step=undo.name)
    return Written(True, record)


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


def already_reached(
    states: StateStore, instance: InstanceId, state: ProcessState
) -> StateRecord | None:
    """After a refused write: the record, when THIS attempt already moved it to `state`.

    The first run of the activity applied its write but did not send its message (C8); the
    repeat sends it again under its stable id, while a stale attempt still gets nothing.
    Only the refusal path pays this read.
    """
    record = states.get(instance.order_id)
    if record is not None and record.locked_by == str(instance) and record.process_state is state:
        return record
    return None


def _refused(instance: InstanceId, write: Callable[..., Written], step: str | None) -> Written:
    """The fence refused `write`: the supervisor or a newer attempt owns the order now
    (D4), so the attempt ends without sending anything."""
    log.info("write superseded", instance_id=instance, step=step, write=write.__name__)
    return REFUSED


def _undone(instance: InstanceId, undone: Step | None) -> None:
    if undone is not None:
        log.info("undo finished", instance_id=instance, step=undone.name)


def _read_around(
    states: StateStore, instance: InstanceId, change: FencedChange
) -> tuple[StateRecord | None, StateRecord | None]:
    """The record before a rare failure path's blind write and after it (None when the fence
    does not hold), for what the write owes to name. A read first, since a blind write does
    not know the record; only this attempt writes it while the fence holds, so the read plus
    the change is what the write makes."""
    before = states.get(instance.order_id)
    if before is None or not change.holds_for(before):
        return before, None
    return before, change.apply(before)


def _written_or_reached(
    states: StateStore,
    change: FencedChange,
    instance: InstanceId,
    state: ProcessState,
    *,
    undone: Step | None = None,
) -> StateRecord | None:
    """The record `change` wrote, counted when it finished the order, or the one this
    attempt wrote before (C8); `undone` is the undo the write records as finished, logged
    only by the write that applied."""
    written = states.fenced_update(change)
    if written is not None:
        _undone(instance, undone)
        return count_if_finished(written)
    return already_reached(states, instance, state)


def _begun_already(states: StateStore, instance: InstanceId, step: Step, done: Step | None) -> bool:
    """After a refused `begin_step`: whether THIS attempt already made that write (the
    activity ran twice, C8): `step` running, `done` completed and logged once. Its progress
    status is sent again under its stable id (R2); a stale attempt gets False."""
    if done is None:
        return False
    record = states.get(instance.order_id)
    return not (
        record is None
        or record.locked_by != str(instance)
        or record.process_state is not ProcessState.PROCESSING
        or step.index >= len(record.steps)
        or record.steps[step.index].state is not StepState.RUNNING
        or record.steps[done.index].state is not StepState.COMPLETED
    )


def _status(
    instance: InstanceId,
    status: OrderStatus,
    now: datetime,
    step: Step | None = None,
    *,
    reason: str | None = None,
) -> OwedMessage:
    return owed_status(
        status,
        attempt=instance.attempt,
        at=now,
        reason=reason,
        step=None if step is None else step.name,
    )
