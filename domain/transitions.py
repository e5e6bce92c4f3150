"""The order state machine (S4, D1-D4, E5, E6, E8, U4, U5, C1, C2, C4).

Whole-record transitions (`claim`, `retry_later`, `give_up`, `resume_compensation`,
`stall_compensation`, `resubmit`, `retry_compensation`, `cancel`, `retire`) return the next
record, to replace on the etag it was read with (D3, U6, E8), or raise `IllegalTransition`.
Fenced changes (`begin_step`, `draw_again`, `finish_steps`, `fail_step`, `begin_undo`,
`finish_undo`, `undo_failed`) build a `FencedChange`, written blind under the attempt's fence
(D4); the ones that begin a request draw its tries from the order's retry budget (C4). The
ProcessState flow: docs/architecture.md, "The order's life".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any

from domain.policies import RetryBudget
from domain.records import (
    DEFAULT_BUDGET,
    RETIRABLE_STATES,
    CompletedStep,
    InstanceId,
    Owed,
    ProcessState,
    StateRecord,
    StepState,
    StepStatus,
    format_utc,
)
from domain.workflow import WORKFLOW_VERSION, Step

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


def new_record(
    order_id: str,
    reply_to: str | None,
    now: datetime,
    steps: Sequence[str],
    trace_parent: str | None = None,
    budget: RetryBudget = DEFAULT_BUDGET,
    body_hash: str | None = None,
) -> StateRecord:
    """First write of the state record (S4): Pending, unlocked, no deadline, no failures,
    every one of `steps` NotStarted, under today's `WORKFLOW_VERSION` (C7). `trace_parent`
    is the submission's W3C trace context, which every later hop of the order joins (C9);
    `budget` the order's retry budget for its whole life, nothing spent yet (C4);
    `body_hash` the order's `Order.body_hash`, which outlives the order document (S2, C3).
    """
    if not steps:
        raise ValueError(f"order {order_id!r} needs at least one step")
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
        workflow_version=WORKFLOW_VERSION,
        steps=tuple(StepStatus(name) for name in steps),
        trace_parent=trace_parent,
        retry_budget=budget.total,
        undo_reserve=budget.undo_reserve,
        body_hash=body_hash,
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


def release_claim(record: StateRecord, *, now: datetime) -> StateRecord:
    """Hand back a claim whose orchestration could not be started (D3): Pending and due
    again, with the order's failure budget untouched, since no attempt ran (C4). The attempt
    number stays spent: were the start to have happened after all, that instance finds its
    fence gone (D4)."""
    if record.process_state is not ProcessState.PROCESSING or record.locked_by is None:
        raise IllegalTransition(record, "release the claim", "only a claimed record is released")
    return replace(
        record,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
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
    """The failure is non-transient (U4): Error only once nothing is left behind (C1).

    With nothing to undo (no step completed, none in doubt) the record goes to Error.
    Otherwise the supervisor requests compensation: the record moves to Compensating under
    a new attempt's instance id, which fences the expired attempt out (D4, E7) and which
    the caller starts as a compensation orchestration. With no step completed, what it
    undoes is the step in doubt, by its idempotency key, and it ends in Error.
    """
    _require_expired(record, "give up", now)
    if record.process_state is not ProcessState.PROCESSING:
        raise IllegalTransition(record, "give up", "only a processing attempt is given up")
    if not compensation_plan(record):
        return replace(
            record,
            process_state=ProcessState.ERROR,
            complete_by=None,
            failure_count=record.failure_count + 1,
            last_error=reason,
            updated_at=now,
        )
    # A processing record has never compensated, so its compensation starts now (C1).
    compensating = _compensating(
        record, now=now, compensation_deadline=compensation_deadline, reason=reason
    )
    return replace(
        compensating,
        failure_count=record.failure_count + 1,
        compensation_ends_in=(
            ProcessState.COMPENSATED if record.compensation_log else ProcessState.ERROR
        ),
    )


def resume_compensation(
    record: StateRecord, *, now: datetime, compensation_deadline: datetime
) -> StateRecord:
    """A compensation that outlived its deadline is resumed by a new attempt, which starts at
    the step the stalled one reached (C2): the supervisor only requests it (U4)."""
    _require_expired(record, "resume compensation", now)
    if record.process_state is not ProcessState.COMPENSATING:
        raise IllegalTransition(record, "resume compensation", "it is not compensating")
    attempt = record.attempt + 1
    return replace(
        record,
        locked_by=str(InstanceId(record.order_id, attempt)),
        complete_by=compensation_deadline,
        attempt=attempt,
        compensation_failures=record.compensation_failures + 1,
        current_step=None,
        updated_at=now,
    )


def stall_compensation(record: StateRecord, *, now: datetime, reason: str) -> StateRecord:
    """A compensation that keeps stalling needs an operator (C2)."""
    _require_expired(record, "fail stalled compensation", now)
    if record.process_state is not ProcessState.COMPENSATING:
        raise IllegalTransition(record, "fail stalled compensation", "it is not compensating")
    return replace(
        record,
        process_state=ProcessState.COMPENSATION_FAILED,
        complete_by=None,
        compensation_failures=record.compensation_failures + 1,
        last_error=reason,
        updated_at=now,
    )


def resubmit(record: StateRecord, *, now: datetime) -> StateRecord:
    """An operator resubmits an order in Error after investigating it (E8), unless it is in
    Error because its compensation undid its steps (U4).

    The order gets a fresh run (FailureCount 0, so the supervisor's MAX_FAILURES attempts
    again) under what is left of its retry budget, which a resubmit never refills (C4): with
    nothing left for its steps it is refused, however often operators press the button.
    """
    _refuse_retired(record, "resubmit")
    if record.process_state is not ProcessState.ERROR:
        raise IllegalTransition(record, "resubmit", "only an order in Error is resubmitted")
    if record.compensation_ends_in is ProcessState.ERROR:
        # The idempotency key of a step is the same in every run (C8), and the services
        # refuse for good a key that was undone (E7): a new run could not do its steps.
        raise IllegalTransition(
            record,
            "resubmit",
            "the supervisor gave it up and undid its steps by their idempotency keys, which "
            "the services now refuse for good: cancel it, or submit the order again under a "
            "new OrderID",
        )
    if record.tries_left < 1:
        raise IllegalTransition(record, "resubmit", _budget_spent(record, "its steps"))
    return replace(
        record,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        current_step=None,
        resubmits=record.resubmits + 1,
        updated_at=now,
    )


def _budget_spent(record: StateRecord, spender: str) -> str:
    """Why an order may not spend more (C4): the count, and what it was spent on."""
    return (
        f"its retry budget is spent: {spender} may draw no more of its RETRY_BUDGET of "
        f"{record.retry_budget} tries ({record.tries_spent} drawn by its steps, "
        f"{record.undo_tries_spent} by its undos, {record.undo_reserve} kept to undo) (C4)"
    )


def _compensating(
    record: StateRecord, *, now: datetime, compensation_deadline: datetime, reason: str
) -> StateRecord:
    """The record compensating under a new attempt's instance id, which fences every older
    attempt out (D4); a step that was running is in doubt and is undone by its action's
    idempotency key (C1)."""
    attempt = record.attempt + 1
    return replace(
        record,
        process_state=ProcessState.COMPENSATING,
        locked_by=str(InstanceId(record.order_id, attempt)),
        complete_by=compensation_deadline,
        attempt=attempt,
        current_step=None,
        last_error=reason,
        compensation_started_at=record.compensation_started_at or now,
        steps=tuple(
            replace(step, state=StepState.FAILED, complete_by=None)
            if step.state is StepState.RUNNING
            else step
            for step in record.steps
        ),
        updated_at=now,
    )


def retry_compensation(
    record: StateRecord, *, now: datetime, compensation_deadline: datetime
) -> StateRecord:
    """An operator retries a compensation that failed (C2): Compensating again under a new
    attempt, which resumes at the step that failed; the stall count starts over, the retry
    budget does not: with nothing left for the undos the retry is refused (C4)."""
    _refuse_retired(record, "retry compensation")
    if record.process_state is not ProcessState.COMPENSATION_FAILED:
        raise IllegalTransition(
            record, "retry compensation", "only an order in CompensationFailed is retried"
        )
    if record.undo_tries_left < 1:
        raise IllegalTransition(record, "retry compensation", _budget_spent(record, "its undos"))
    return replace(
        _compensating(
            record,
            now=now,
            compensation_deadline=compensation_deadline,
            reason=record.last_error or "compensation retried by an operator",
        ),
        compensation_failures=0,
    )


def retire(record: StateRecord, *, now: datetime) -> StateRecord:
    """Mark a finished order retired once its order document and histories are gone (C3):
    the record stays, as a tombstone that keeps the OrderID known for good (S2)."""
    if record.process_state not in RETIRABLE_STATES:
        raise IllegalTransition(record, "retire", "only a finished order is retired")
    return replace(record, retired_at=now)


def _refuse_retired(record: StateRecord, action: str) -> None:
    if record.retired_at is not None:
        raise IllegalTransition(
            record,
            action,
            f"it was retired at {format_utc(record.retired_at)}: its order document and "
            "histories were removed after the retention (FINISHED_RETENTION_SECONDS), so "
            "nothing is left to run or undo; submit the order again under a new OrderID",
        )


CANCELLABLE_STATES = frozenset({ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR})
"""States an operator may cancel an order in: it has not finished and is not compensating,
or it failed (E8) and the operator gives it up for good."""


def cancel(
    record: StateRecord, *, now: datetime, reason: str, compensation_deadline: datetime
) -> StateRecord:
    """An operator cancels an unfinished or failed order: it compensates whatever may be left,
    the steps in doubt by their idempotency keys, and ends Compensated (C1, C2, E8).

    The running attempt loses its fence at once (its writes are refused, D4, E5) and the
    remote services refuse its calls by the newer attempt's fencing token (E7). Its undos
    draw on the reserve the retry budget keeps for them (C4), whole whenever a cancel has
    something to undo: only a give-up's compensation drew on it before, and that ended in
    Error with everything undone.
    """
    _refuse_retired(record, "cancel")
    if record.process_state not in CANCELLABLE_STATES:
        raise IllegalTransition(
            record, "cancel", "only a Pending, Processing or Error order is cancelled"
        )
    return replace(
        _compensating(record, now=now, compensation_deadline=compensation_deadline, reason=reason),
        compensation_ends_in=ProcessState.COMPENSATED,
    )


class Keep(Enum):
    """The marker of a field a `FencedChange` leaves as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP

DocumentPath = tuple[str | int, ...]
"""A path into the stored document, e.g. ``("Steps", 1)``; each adapter spells it its way."""


@dataclass(frozen=True)
class FencedChange:
    """A blind conditional change of one state record, guarded by the attempt's fence (D4).

    It names record fields, typed; a field left at `KEEP` is not written. `steps` replaces
    whole entries of `Steps` by index; `logged` appends one compensation-log entry in the same
    write (C1); `owed` replaces the record's outbox with what this write owes (C6);
    `draw_tries` and `draw_undo_tries` add to `TriesSpent` and `UndoTriesSpent`, an increment
    each store makes without reading (C4). A store applies it only when
    `LockedBy == locked_by`, `ProcessState` is in `allowed_states` and each `Steps` entry
    `step_guard` names is in its `StepState`, which makes a logging write idempotent (C8);
    `apply` is the same semantics in plain Python.
    """

    action: str
    order_id: str
    locked_by: str
    allowed_states: frozenset[ProcessState]
    updated_at: datetime
    process_state: ProcessState | Keep = KEEP
    complete_by: datetime | Keep | None = KEEP
    current_step: str | Keep | None = KEEP
    last_error: str | Keep | None = KEEP
    compensation_started_at: datetime | Keep | None = KEEP
    steps: tuple[tuple[int, StepStatus], ...] = ()
    logged: CompletedStep | None = None
    step_guard: tuple[int, StepState] | None = None
    owed: Owed | Keep | None = KEEP
    draw_tries: int = 0
    draw_undo_tries: int = 0

    def holds_for(self, record: StateRecord) -> bool:
        if self.step_guard is not None:
            index, state = self.step_guard
            if index >= len(record.steps) or record.steps[index].state is not state:
                return False
        return (
            record.order_id == self.order_id
            and record.locked_by == self.locked_by
            and record.process_state in self.allowed_states
        )

    def apply(self, record: StateRecord) -> StateRecord:
        """The record after this change, or `FenceLost` when the guard fails."""
        if not self.holds_for(record):
            raise FenceLost(self, record)
        steps = list(record.steps)
        for index, step in self.steps:
            steps[index] = step
        changed: dict[str, Any] = {
            name: value
            for name, value in (
                ("process_state", self.process_state),
                ("complete_by", self.complete_by),
                ("current_step", self.current_step),
                ("last_error", self.last_error),
                ("compensation_started_at", self.compensation_started_at),
                ("owed", self.owed),
            )
            if value is not KEEP
        }
        log = (
            record.compensation_log
            if self.logged is None
            else (
                *record.compensation_log,
                self.logged,
            )
        )
        return replace(
            record,
            **changed,
            steps=tuple(steps),
            compensation_log=log,
            tries_spent=record.tries_spent + self.draw_tries,
            undo_tries_spent=record.undo_tries_spent + self.draw_undo_tries,
            updated_at=self.updated_at,
        )

    def document_sets(self) -> tuple[tuple[DocumentPath, JsonValue], ...]:
        """What the change writes, as contract document paths and JSON values."""
        sets: list[tuple[DocumentPath, JsonValue]] = []
        if self.process_state is not KEEP:
            sets.append((("ProcessState",), self.process_state.value))
        if self.complete_by is not KEEP:
            sets.append((("CompleteBy",), _utc_or_none(self.complete_by)))
        if self.current_step is not KEEP:
            sets.append((("CurrentStep",), self.current_step))
        if self.last_error is not KEEP:
            sets.append((("LastError",), self.last_error))
        if self.compensation_started_at is not KEEP:
            sets.append((("CompensationStartedAt",), _utc_or_none(self.compensation_started_at)))
        if self.owed is not KEEP:
            sets.append((("Owed",), None if self.owed is None else self.owed.to_document()))
        sets += [(("Steps", index), step.to_document()) for index, step in self.steps]
        sets.append((("UpdatedAt",), format_utc(self.updated_at)))
        return tuple(sets)

    def document_increments(self) -> tuple[tuple[DocumentPath, int], ...]:
        """The numbers the change adds to, and by how much; a missing one counts from 0."""
        return tuple(
            ((name,), amount)
            for name, amount in (
                ("TriesSpent", self.draw_tries),
                ("UndoTriesSpent", self.draw_undo_tries),
            )
            if amount
        )

    def document_append(self) -> tuple[DocumentPath, JsonValue] | None:
        """The entry the change appends to a list of the document, if any."""
        if self.logged is None:
            return None
        return ("CompensationLog",), self.logged.to_document()


def _utc_or_none(moment: datetime | None) -> str | None:
    return None if moment is None else format_utc(moment)


def _fenced(
    action: str, instance: InstanceId, allowed: Iterable[ProcessState], now: datetime
) -> FencedChange:
    """A change that only touches UpdatedAt, guarded by the attempt's fence; the transitions
    below add their fields with `dataclasses.replace`."""
    return FencedChange(
        action=action,
        order_id=instance.order_id,
        locked_by=str(instance),
        allowed_states=frozenset(allowed),
        updated_at=now,
    )


def begin_step(
    instance: InstanceId,
    step: Step,
    *,
    complete_by: datetime,
    now: datetime,
    done: Step | None = None,
    draw: int = 0,
) -> FencedChange:
    """Start `step` with its CompleteBy (D6, E2); `done`, the step before it, becomes
    Completed with its reference and is logged for compensation in the same write (C1), only
    while it is still Running: the same write again (C8) is refused, never a second log
    entry. Completing one step and starting the next is one write, which also draws the
    step's request's `draw` tries from the retry budget (C4)."""
    steps = [(step.index, StepStatus(step.name, StepState.RUNNING, complete_by))]
    logged = guard = None
    if done is not None:
        logged = CompletedStep(done.name, done.reference, now)
        steps.insert(0, (done.index, _completed(done)))
        guard = (done.index, StepState.RUNNING)
    return replace(
        _fenced("begin step", instance, [ProcessState.PROCESSING], now),
        complete_by=complete_by,
        current_step=step.name,
        steps=tuple(steps),
        logged=logged,
        step_guard=guard,
        draw_tries=draw,
    )


def draw_again(instance: InstanceId, step: Step, *, draw: int, now: datetime) -> FencedChange:
    """A step this attempt began already, begun once more (its activity ran again, C8):
    its request draws `draw` tries again, while the step is still Running under the fence,
    so no run of the activity is given tries the budget did not count (C4)."""
    return replace(
        _fenced("draw again", instance, [ProcessState.PROCESSING], now),
        step_guard=(step.index, StepState.RUNNING),
        draw_tries=draw,
    )


def finish_steps(instance: InstanceId, done: Step, *, now: datetime) -> FencedChange:
    """The last step completed: Processed, only while the fence holds (E5, C1)."""
    return replace(
        _fenced("finish steps", instance, [ProcessState.PROCESSING], now),
        process_state=ProcessState.PROCESSED,
        complete_by=None,
        current_step=None,
        steps=((done.index, _completed(done)),),
        logged=CompletedStep(done.name, done.reference, now),
    )


def fail_step(
    instance: InstanceId,
    step: Step,
    *,
    reason: str,
    now: datetime,
    compensate_by: datetime | None,
) -> FencedChange:
    """`step` failed for good (E8). With nothing to undo (`compensate_by` None) the order
    goes to Error for an operator; otherwise it starts compensating under the same attempt,
    with `compensate_by` as the deadline of the first undo (C1, C2)."""
    change = replace(
        _fenced("fail step", instance, [ProcessState.PROCESSING], now),
        last_error=reason,
        steps=((step.index, StepStatus(step.name, StepState.FAILED)),),
    )
    if compensate_by is None:
        return replace(change, process_state=ProcessState.ERROR, complete_by=None)
    return replace(
        change,
        process_state=ProcessState.COMPENSATING,
        complete_by=compensate_by,
        current_step=None,
        compensation_started_at=now,
    )


def compensation_plan(record: StateRecord) -> tuple[Step, ...]:
    """What is left to undo, in the order to undo it (C1): the step in doubt first, then the
    logged steps newest first; steps already compensated are skipped, so a compensation that
    stalled resumes at the step it reached (C2)."""
    by_name = {step.name: (index, step) for index, step in enumerate(record.steps)}
    in_doubt = [
        Step(index, step.name)
        for index, step in enumerate(record.steps)
        if step.state in (StepState.FAILED, StepState.RUNNING)
        or (
            step.state in (StepState.COMPENSATING, StepState.COMPENSATION_FAILED)
            and step.reference is None
        )
    ]
    logged = [
        Step(by_name[entry.step][0], entry.step, entry.reference)
        for entry in reversed(record.compensation_log)
        if by_name[entry.step][1].state is not StepState.COMPENSATED
    ]
    return (*in_doubt, *logged)


def begin_undo(
    instance: InstanceId,
    undo: Step,
    *,
    complete_by: datetime,
    now: datetime,
    undone: Step | None = None,
    draw: int = 0,
) -> FencedChange:
    """Start undoing `undo` with its CompleteBy; `undone`, the undo before it, becomes
    Compensated in the same write (C1, C2), which also draws the undo's request's `draw`
    tries from the retry budget (C4); the same write again draws again."""
    steps = [
        (undo.index, StepStatus(undo.name, StepState.COMPENSATING, complete_by, undo.reference))
    ]
    if undone is not None:
        steps.insert(0, (undone.index, _compensated(undone)))
    return replace(
        _fenced("begin undo", instance, [ProcessState.COMPENSATING], now),
        complete_by=complete_by,
        current_step=undo.name,
        steps=tuple(steps),
        draw_undo_tries=draw,
    )


COMPENSATION_ENDS = frozenset({ProcessState.COMPENSATED, ProcessState.ERROR})
"""What a compensation that undid everything may end in (`StateRecord.compensation_ends_in`)."""


def finish_undo(
    instance: InstanceId,
    *,
    undone: Step | None,
    now: datetime,
    ends_in: ProcessState = ProcessState.COMPENSATED,
) -> FencedChange:
    """Every step was undone: `ends_in`, the record's CompensationEndsIn when the
    compensation began - Compensated, or Error for an order the supervisor gave up on with
    only a step in doubt, which is now undone (C1, C2, U4)."""
    if ends_in not in COMPENSATION_ENDS:
        raise ValueError(f"a compensation ends in Compensated or Error, not {ends_in}")
    return replace(
        _fenced("finish undo", instance, [ProcessState.COMPENSATING], now),
        process_state=ends_in,
        complete_by=None,
        current_step=None,
        steps=() if undone is None else ((undone.index, _compensated(undone)),),
    )


def undo_failed(instance: InstanceId, undo: Step, *, reason: str, now: datetime) -> FencedChange:
    """Undoing `undo` failed for good: CompensationFailed, for an operator (C2)."""
    failed = StepStatus(undo.name, StepState.COMPENSATION_FAILED, None, undo.reference)
    return replace(
        _fenced("undo failed", instance, [ProcessState.COMPENSATING], now),
        process_state=ProcessState.COMPENSATION_FAILED,
        complete_by=None,
        current_step=undo.name,
        last_error=reason,
        steps=((undo.index, failed),),
    )


def _completed(step: Step) -> StepStatus:
    return StepStatus(step.name, StepState.COMPLETED, None, step.reference)


def _compensated(step: Step) -> StepStatus:
    return StepStatus(step.name, StepState.COMPENSATED, None, step.reference)
