"""The order state machine, exhaustively (S4, D2-D4, E5, E8, U4, U5, C1, C2, C4)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import transitions
from domain.policies import RetryBudget
from domain.records import (
    CompletedStep,
    InstanceId,
    ProcessState,
    StateRecord,
    StepState,
    StepStatus,
)
from domain.transitions import FencedChange, FenceLost, IllegalTransition
from domain.workflow import Step

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
PAST = NOW - timedelta(seconds=1)
FUTURE = NOW + timedelta(seconds=1)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
STEP = CompletedStep(STEPS[0], "r-1", PAST)
ALL_STATES = list(ProcessState)


def record_in(state: ProcessState, **changes: object) -> StateRecord:
    base = replace(
        transitions.new_record("order-7", "replies-a", PAST, STEPS),
        process_state=state,
        attempt=2,
        locked_by=None if state is ProcessState.PENDING else "order-7:2",
        complete_by=PAST if state is not ProcessState.PENDING else None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_first_write_is_pending_unlocked_without_deadline_s4() -> None:
    record = transitions.new_record("order-7", "replies-a", NOW, STEPS)
    assert record.process_state is ProcessState.PENDING
    assert record.locked_by is None
    assert record.complete_by is None
    assert record.failure_count == 0
    assert record.attempt == 0
    assert record.reply_to == "replies-a"
    assert record.compensation_log == ()


WholeRecordTransition = Callable[[StateRecord], StateRecord]
WHOLE_RECORD: dict[str, tuple[WholeRecordTransition, set[ProcessState]]] = {
    "claim": (
        lambda r: transitions.claim(r, now=NOW, claim_deadline=FUTURE),
        {ProcessState.PENDING},
    ),
    "release_claim": (
        lambda r: transitions.release_claim(r, now=NOW),
        {ProcessState.PROCESSING},
    ),
    "retry_later": (
        lambda r: transitions.retry_later(r, now=NOW, not_before=FUTURE),
        {ProcessState.PROCESSING},
    ),
    "give_up": (
        lambda r: transitions.give_up(r, now=NOW, reason="r", compensation_deadline=FUTURE),
        {ProcessState.PROCESSING},
    ),
    "stall_compensation": (
        lambda r: transitions.stall_compensation(r, now=NOW, reason="r"),
        {ProcessState.COMPENSATING},
    ),
    "resubmit": (
        lambda r: transitions.resubmit(r, now=NOW),
        {ProcessState.ERROR},
    ),
    "retry_compensation": (
        lambda r: transitions.retry_compensation(r, now=NOW, compensation_deadline=FUTURE),
        {ProcessState.COMPENSATION_FAILED},
    ),
    "cancel": (
        lambda r: transitions.cancel(r, now=NOW, reason="r", compensation_deadline=FUTURE),
        {ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR},
    ),
}


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize("name", sorted(WHOLE_RECORD))
def test_whole_record_transitions_are_allowed_only_from_their_states(
    name: str, state: ProcessState
) -> None:
    transition, allowed = WHOLE_RECORD[name]
    record = record_in(state)
    if state in allowed:
        assert transition(record).updated_at == NOW
    else:
        with pytest.raises(IllegalTransition, match="order-7"):
            transition(record)


def test_claim_takes_the_next_attempt_with_a_provisional_deadline_d2_d3() -> None:
    claimed = transitions.claim(record_in(ProcessState.PENDING), now=NOW, claim_deadline=FUTURE)
    assert claimed.process_state is ProcessState.PROCESSING
    assert claimed.attempt == 3
    assert claimed.locked_by == "order-7:3"
    assert claimed.instance_id == InstanceId("order-7", 3)
    assert claimed.complete_by == FUTURE


def test_claim_refuses_a_locked_or_not_yet_due_pending_record_d1_u5() -> None:
    with pytest.raises(IllegalTransition, match="claimable"):
        transitions.claim(
            record_in(ProcessState.PENDING, locked_by="order-7:2"), now=NOW, claim_deadline=FUTURE
        )
    not_due = record_in(ProcessState.PENDING, complete_by=FUTURE)
    assert not transitions.is_claimable(not_due, NOW)
    with pytest.raises(IllegalTransition):
        transitions.claim(not_due, now=NOW, claim_deadline=FUTURE)
    due = record_in(ProcessState.PENDING, complete_by=NOW)
    assert transitions.is_claimable(due, NOW)


@pytest.mark.parametrize("state", ALL_STATES)
def test_only_running_records_past_their_deadline_are_expired_u1(state: ProcessState) -> None:
    running = state in (ProcessState.PROCESSING, ProcessState.COMPENSATING)
    assert transitions.is_expired(record_in(state, complete_by=NOW), NOW) is running
    assert transitions.is_expired(record_in(state, complete_by=PAST), NOW) is running
    assert not transitions.is_expired(record_in(state, complete_by=FUTURE), NOW)
    assert not transitions.is_expired(record_in(state, complete_by=None), NOW)


def test_supervisor_transitions_refuse_a_record_that_has_not_expired_u4() -> None:
    running = record_in(ProcessState.PROCESSING, complete_by=FUTURE)
    with pytest.raises(IllegalTransition, match="CompleteBy"):
        transitions.retry_later(running, now=NOW, not_before=FUTURE)
    with pytest.raises(IllegalTransition, match="CompleteBy"):
        transitions.give_up(running, now=NOW, reason="r", compensation_deadline=FUTURE)
    compensating = record_in(ProcessState.COMPENSATING, complete_by=FUTURE)
    with pytest.raises(IllegalTransition, match="CompleteBy"):
        transitions.stall_compensation(compensating, now=NOW, reason="r")


def test_retry_counts_the_failure_and_frees_the_record_for_the_starter_u4_u5() -> None:
    retried = transitions.retry_later(
        record_in(ProcessState.PROCESSING, failure_count=1), now=NOW, not_before=FUTURE
    )
    assert retried.process_state is ProcessState.PENDING
    assert retried.locked_by is None
    assert retried.failure_count == 2
    assert retried.complete_by == FUTURE
    assert retried.attempt == 2
    assert not transitions.is_claimable(retried, NOW)
    assert transitions.is_claimable(retried, FUTURE)


def test_give_up_with_nothing_to_undo_is_error_u4() -> None:
    """No step began (the claim expired before the attempt's first write): nothing can be
    left behind, so Error at once."""
    given_up = transitions.give_up(
        record_in(ProcessState.PROCESSING, failure_count=2),
        now=NOW,
        reason="3 attempts expired",
        compensation_deadline=FUTURE,
    )
    assert given_up.process_state is ProcessState.ERROR
    assert given_up.failure_count == 3
    assert given_up.last_error == "3 attempts expired"
    assert given_up.complete_by is None
    assert given_up.attempt == 2
    assert given_up.compensation_ends_in is ProcessState.COMPENSATED


def test_give_up_with_a_step_in_doubt_undoes_it_by_key_before_error_u4_c1() -> None:
    """Nothing completed, but the first step was running: its answer may have been lost
    with its side effect done. The order compensates under a new attempt, which fences the
    expired one out (D4), undoes the step by its idempotency key and ends in Error."""
    running = steps_record(
        ProcessState.PROCESSING,
        StepStatus("reserve-stock", StepState.RUNNING, PAST),
        StepStatus("charge-payment"),
        StepStatus("ship-order"),
        failure_count=2,
    )
    given_up = transitions.give_up(
        running, now=NOW, reason="3 attempts expired", compensation_deadline=FUTURE
    )
    assert given_up.process_state is ProcessState.COMPENSATING
    assert given_up.compensation_ends_in is ProcessState.ERROR
    assert (given_up.attempt, given_up.locked_by) == (3, "order-7:3")
    assert (given_up.failure_count, given_up.complete_by) == (3, FUTURE)
    assert given_up.last_error == "3 attempts expired"
    assert given_up.compensation_started_at == NOW
    assert given_up.steps[0] == StepStatus("reserve-stock", StepState.FAILED)
    assert transitions.compensation_plan(given_up) == (Step(0, "reserve-stock"),)

    undo = transitions.compensation_plan(given_up)[0]
    instance = InstanceId("order-7", 3)
    undone = transitions.begin_undo(instance, undo, complete_by=FUTURE, now=NOW).apply(given_up)
    finished = transitions.finish_undo(
        instance, undone=undo, now=NOW, ends_in=given_up.compensation_ends_in
    ).apply(undone)
    assert finished.process_state is ProcessState.ERROR
    assert finished.complete_by is None
    assert finished.steps[0] == StepStatus("reserve-stock", StepState.COMPENSATED)
    assert transitions.compensation_plan(finished) == ()


def test_give_up_with_completed_steps_requests_compensation_under_a_new_attempt_c1() -> None:
    given_up = transitions.give_up(
        record_in(ProcessState.PROCESSING, compensation_log=(STEP,)),
        now=NOW,
        reason="gave up",
        compensation_deadline=FUTURE,
    )
    assert given_up.process_state is ProcessState.COMPENSATING
    assert given_up.attempt == 3
    assert given_up.locked_by == "order-7:3"
    assert given_up.complete_by == FUTURE
    assert given_up.compensation_log == (STEP,)
    assert given_up.compensation_ends_in is ProcessState.COMPENSATED


def test_stalled_compensation_becomes_compensation_failed_c2() -> None:
    stalled = transitions.stall_compensation(
        record_in(ProcessState.COMPENSATING), now=NOW, reason="stalled"
    )
    assert stalled.process_state is ProcessState.COMPENSATION_FAILED
    assert stalled.last_error == "stalled"
    assert stalled.complete_by is None


def test_resubmit_returns_an_error_to_pending_with_a_fresh_failure_count_e8() -> None:
    resubmitted = transitions.resubmit(
        record_in(ProcessState.ERROR, failure_count=3, complete_by=None, tries_spent=12), now=NOW
    )
    assert resubmitted.process_state is ProcessState.PENDING
    assert resubmitted.failure_count == 0
    assert resubmitted.resubmits == 1
    assert resubmitted.locked_by is None
    assert transitions.is_claimable(resubmitted, NOW)
    assert resubmitted.tries_spent == 12, "a resubmit never refills the retry budget (C4)"


def test_resubmit_is_refused_once_the_retry_budget_has_nothing_left_for_the_steps_c4() -> None:
    """However often an operator presses the button, the order spends one budget (C4)."""
    budget = RetryBudget(total=24, undo_reserve=9)
    spent = record_in(
        ProcessState.ERROR,
        complete_by=None,
        retry_budget=budget.total,
        undo_reserve=budget.undo_reserve,
        tries_spent=15,
    )
    with pytest.raises(IllegalTransition, match="retry budget is spent: its steps may draw no"):
        transitions.resubmit(spent, now=NOW)
    assert transitions.resubmit(replace(spent, tries_spent=14), now=NOW).resubmits == 1


def test_retry_compensation_is_refused_once_the_undos_spent_what_they_may_c4() -> None:
    """The undos may spend the reserve and what the steps left (24 - 15 here), and an
    operator's retry never adds to it."""
    failed = record_in(
        ProcessState.COMPENSATION_FAILED,
        complete_by=None,
        retry_budget=24,
        undo_reserve=9,
        tries_spent=20,
        undo_tries_spent=9,
    )
    with pytest.raises(IllegalTransition, match="retry budget is spent: its undos may draw no"):
        transitions.retry_compensation(failed, now=NOW, compensation_deadline=FUTURE)
    retried = transitions.retry_compensation(
        replace(failed, undo_tries_spent=8), now=NOW, compensation_deadline=FUTURE
    )
    assert (retried.undo_tries_spent, retried.undo_tries_left) == (8, 1)


def test_a_new_order_keeps_its_budget_with_nothing_spent_c4() -> None:
    budget = RetryBudget.for_order(30, steps=len(STEPS), supervisor_attempts=3)
    record = transitions.new_record("order-7", None, NOW, STEPS, budget=budget)
    assert record.budget == budget
    assert (record.tries_spent, record.undo_tries_spent) == (0, 0)
    assert (record.tries_left, record.undo_tries_left) == (30 - 9, 30)


def test_the_writes_that_begin_a_request_draw_its_tries_c4() -> None:
    """`begin_step`, `draw_again` and `begin_undo` add what they draw to the counts, the
    rest of the record as their other fields say; a step begun again must still run."""
    instance = InstanceId("order-7", 2)
    running = record_in(ProcessState.PROCESSING, tries_spent=6)
    begun = transitions.begin_step(
        instance, Step(0, STEPS[0]), complete_by=FUTURE, now=NOW, draw=3
    ).apply(running)
    assert (begun.tries_spent, begun.undo_tries_spent) == (9, 0)
    again = transitions.draw_again(instance, Step(0, STEPS[0]), draw=3, now=NOW)
    assert again.apply(begun).tries_spent == 12
    with pytest.raises(FenceLost):
        transitions.draw_again(instance, Step(1, STEPS[1]), draw=3, now=NOW).apply(begun)
    compensating = replace(begun, process_state=ProcessState.COMPENSATING)
    undoing = transitions.begin_undo(
        instance, Step(0, STEPS[0], "r-1"), complete_by=FUTURE, now=NOW, draw=4
    ).apply(compensating)
    assert (undoing.tries_spent, undoing.undo_tries_spent) == (9, 4)


def test_an_order_in_error_whose_steps_were_undone_by_key_is_not_resubmitted_e8_u4() -> None:
    """A new run would send the same idempotency keys, which the services refuse for good
    once undone; the operator may cancel it instead."""
    undone = record_in(
        ProcessState.ERROR, complete_by=None, compensation_ends_in=ProcessState.ERROR
    )
    with pytest.raises(IllegalTransition, match="cancel it, or submit the order again"):
        transitions.resubmit(undone, now=NOW)
    cancelled = transitions.cancel(undone, now=NOW, reason="r", compensation_deadline=FUTURE)
    assert cancelled.process_state is ProcessState.COMPENSATING


def test_a_compensation_ends_in_compensated_or_error_only_c2() -> None:
    with pytest.raises(ValueError, match="Compensated or Error"):
        transitions.finish_undo(
            InstanceId("order-7", 2), undone=None, now=NOW, ends_in=ProcessState.PROCESSED
        )


def steps_record(state: ProcessState, *steps: StepStatus, **changes: object) -> StateRecord:
    return replace(record_in(state, **changes), steps=steps)


def test_cancel_fences_the_running_attempt_out_and_compensates_the_step_in_doubt_c1() -> None:
    running = steps_record(
        ProcessState.PROCESSING,
        StepStatus("reserve-stock", StepState.COMPLETED, None, "r-1"),
        StepStatus("charge-payment", StepState.RUNNING, FUTURE),
        StepStatus("ship-order"),
        compensation_log=(CompletedStep("reserve-stock", "r-1", PAST),),
    )
    cancelled = transitions.cancel(
        running, now=NOW, reason="customer", compensation_deadline=FUTURE
    )
    assert cancelled.process_state is ProcessState.COMPENSATING
    assert cancelled.locked_by == "order-7:3"
    assert cancelled.complete_by == FUTURE
    assert cancelled.last_error == "customer"
    assert cancelled.compensation_started_at == NOW
    assert cancelled.steps[1].state is StepState.FAILED
    assert [u.name for u in transitions.compensation_plan(cancelled)] == [
        "charge-payment",
        "reserve-stock",
    ]


def test_cancel_of_an_order_in_error_undoes_its_failed_step_by_key_e8_c1() -> None:
    """An operator gives up an order in Error for good: whatever may be left - the step
    that failed, by its idempotency key - is undone, and the order ends Compensated."""
    failed = steps_record(
        ProcessState.ERROR,
        StepStatus("reserve-stock", StepState.FAILED),
        StepStatus("charge-payment"),
        StepStatus("ship-order"),
        complete_by=None,
        last_error="declined",
    )
    cancelled = transitions.cancel(failed, now=NOW, reason="customer", compensation_deadline=FUTURE)
    assert cancelled.process_state is ProcessState.COMPENSATING
    assert (cancelled.attempt, cancelled.locked_by) == (3, "order-7:3")
    assert cancelled.compensation_ends_in is ProcessState.COMPENSATED
    assert transitions.compensation_plan(cancelled) == (Step(0, "reserve-stock"),)


def test_cancel_of_an_order_that_ended_in_error_by_compensating_ends_compensated_c2() -> None:
    """The give-up's compensation undid everything already: nothing is left to undo, and the
    cancel's compensation ends Compensated, not Error."""
    given_up = steps_record(
        ProcessState.ERROR,
        StepStatus("reserve-stock", StepState.COMPENSATED),
        StepStatus("charge-payment"),
        StepStatus("ship-order"),
        complete_by=None,
        compensation_ends_in=ProcessState.ERROR,
    )
    cancelled = transitions.cancel(
        given_up, now=NOW, reason="customer", compensation_deadline=FUTURE
    )
    assert transitions.compensation_plan(cancelled) == ()
    assert cancelled.compensation_ends_in is ProcessState.COMPENSATED


def test_retry_compensation_resumes_at_the_failed_undo_with_a_fresh_stall_count_c2() -> None:
    failed = steps_record(
        ProcessState.COMPENSATION_FAILED,
        StepStatus("reserve-stock", StepState.COMPLETED, None, "r-1"),
        StepStatus("charge-payment", StepState.COMPENSATION_FAILED, None, "p-1"),
        StepStatus("ship-order", StepState.COMPENSATED, None, None),
        compensation_log=(
            CompletedStep("reserve-stock", "r-1", PAST),
            CompletedStep("charge-payment", "p-1", PAST),
        ),
        compensation_failures=2,
        complete_by=None,
        last_error="refund refused",
    )
    retried = transitions.retry_compensation(failed, now=NOW, compensation_deadline=FUTURE)
    assert retried.process_state is ProcessState.COMPENSATING
    assert retried.locked_by == "order-7:3"
    assert retried.compensation_failures == 0
    assert [(u.name, u.reference) for u in transitions.compensation_plan(retried)] == [
        ("charge-payment", "p-1"),
        ("reserve-stock", "r-1"),
    ]


def test_a_give_up_compensation_resumed_or_retried_still_ends_in_error_c2_u4() -> None:
    """The record, not the instance that stalled or failed, says what the compensation ends
    in: the supervisor's resume and the operator's retry keep it."""
    stalled = record_in(ProcessState.COMPENSATING, compensation_ends_in=ProcessState.ERROR)
    resumed = transitions.resume_compensation(stalled, now=NOW, compensation_deadline=FUTURE)
    assert resumed.compensation_ends_in is ProcessState.ERROR
    failed = transitions.stall_compensation(stalled, now=NOW, reason="stalled")
    retried = transitions.retry_compensation(failed, now=NOW, compensation_deadline=FUTURE)
    assert retried.compensation_ends_in is ProcessState.ERROR


INSTANCE = InstanceId("order-7", 2)
FencedFactory = Callable[[InstanceId], FencedChange]
FENCED: dict[str, tuple[FencedFactory, ProcessState, ProcessState]] = {
    "begin_step": (
        lambda i: transitions.begin_step(i, Step(0, STEPS[0]), complete_by=FUTURE, now=NOW),
        ProcessState.PROCESSING,
        ProcessState.PROCESSING,
    ),
    "finish_steps": (
        lambda i: transitions.finish_steps(i, Step(2, STEPS[2], "s-1"), now=NOW),
        ProcessState.PROCESSING,
        ProcessState.PROCESSED,
    ),
    "fail_step, nothing to undo": (
        lambda i: transitions.fail_step(
            i, Step(0, STEPS[0]), reason="permanent", now=NOW, compensate_by=None
        ),
        ProcessState.PROCESSING,
        ProcessState.ERROR,
    ),
    "fail_step, steps to undo": (
        lambda i: transitions.fail_step(
            i, Step(1, STEPS[1]), reason="declined", now=NOW, compensate_by=FUTURE
        ),
        ProcessState.PROCESSING,
        ProcessState.COMPENSATING,
    ),
    "begin_undo": (
        lambda i: transitions.begin_undo(i, Step(0, STEPS[0], "r-1"), complete_by=FUTURE, now=NOW),
        ProcessState.COMPENSATING,
        ProcessState.COMPENSATING,
    ),
    "finish_undo": (
        lambda i: transitions.finish_undo(i, undone=Step(0, STEPS[0], "r-1"), now=NOW),
        ProcessState.COMPENSATING,
        ProcessState.COMPENSATED,
    ),
    "undo_failed": (
        lambda i: transitions.undo_failed(i, Step(0, STEPS[0], "r-1"), reason="refused", now=NOW),
        ProcessState.COMPENSATING,
        ProcessState.COMPENSATION_FAILED,
    ),
}


@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize("name", sorted(FENCED))
def test_fenced_changes_apply_only_from_their_state_when_the_fence_holds_d4(
    name: str, state: ProcessState
) -> None:
    factory, allowed, target = FENCED[name]
    change = factory(INSTANCE)
    record = record_in(state, locked_by=str(INSTANCE))
    if state is allowed:
        changed = change.apply(record)
        assert changed.process_state is target
        assert changed.updated_at == NOW
        assert changed.locked_by == str(INSTANCE)
    else:
        with pytest.raises(FenceLost, match="order-7"):
            change.apply(record)


@pytest.mark.parametrize("name", sorted(FENCED))
def test_fenced_changes_of_a_stale_attempt_are_refused_d4_e5(name: str) -> None:
    factory, allowed, _ = FENCED[name]
    newer = record_in(allowed, locked_by="order-7:3", attempt=3)
    change = factory(INSTANCE)
    assert not change.holds_for(newer)
    with pytest.raises(FenceLost, match="'order-7:2' refused"):
        change.apply(newer)


def test_a_fenced_change_never_applies_to_another_order() -> None:
    change = transitions.finish_steps(InstanceId("order-8", 2), Step(2, STEPS[2]), now=NOW)
    with pytest.raises(FenceLost):
        change.apply(record_in(ProcessState.PROCESSING, locked_by="order-8:2"))
