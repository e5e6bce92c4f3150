"""The operator console's service layer on every store backend (E8, C1, C2, C4, D4, U6)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import transitions
from domain.policies import Timeouts
from domain.ports import OrderStore, PreconditionFailed, RecordNotFound, StateStore
from domain.records import InstanceId, ProcessState, StateRecord, StepState, StepStatus
from domain.transitions import IllegalTransition
from domain.workflow import Step
from services.operator import (
    cancel_order,
    list_orders,
    order_timeline,
    resubmit_order,
    retry_compensation,
)

T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
TIMEOUTS = Timeouts(claim_seconds=60, step_seconds=30, compensation_seconds=120)
STEPS = ("reserve-stock", "charge-payment", "ship-order")


def stored(states: StateStore, record: StateRecord) -> StateRecord:
    return states.create(record).record


def in_error(states: StateStore, order_id: str, **changes: object) -> StateRecord:
    record = replace(
        transitions.new_record(order_id, "replies-a", T0, STEPS),
        process_state=ProcessState.ERROR,
        attempt=1,
        locked_by=f"{order_id}:1",
        last_error="card declined",
    )
    return stored(states, replace(record, **changes))  # type: ignore[arg-type]


def running_step_two(states: StateStore, order_id: str) -> StateRecord:
    record = transitions.new_record(order_id, "replies-a", T0, STEPS)
    claimed = states.replace(
        transitions.claim(stored(states, record), now=T0, claim_deadline=T0 + timedelta(1))
    )
    instance = claimed.instance_id
    assert instance is not None
    deadline = T0 + timedelta(seconds=30)
    for change in (
        transitions.begin_step(instance, Step(0, STEPS[0]), complete_by=deadline, now=T0),
        transitions.begin_step(
            instance,
            Step(1, STEPS[1]),
            complete_by=deadline,
            now=T0,
            done=Step(0, STEPS[0], "r-1"),
        ),
    ):
        assert states.fenced_update(change) is not None
    after = states.get(order_id)
    assert after is not None
    return after


def test_orders_are_listed_by_state_a_page_at_a_time_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for n in range(3):
        in_error(states, f"e-{n}")
    stored(states, transitions.new_record("p-1", "replies-a", T0, STEPS))
    first = list_orders(states, ProcessState.ERROR, page_size=2)
    assert len(first.items) == 2
    assert first.continuation is not None
    rest = list_orders(states, ProcessState.ERROR, page_size=2, continuation=first.continuation)
    assert sorted(r.order_id for r in first.items + rest.items) == ["e-0", "e-1", "e-2"]


def test_of_two_operators_resubmitting_the_same_view_only_one_wins_e8_u6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    seen = in_error(states, "o-1")
    won = resubmit_order(states, "o-1", T0, expected_etag=seen.etag)
    assert won.process_state is ProcessState.PENDING
    assert won.resubmits == 1
    with pytest.raises(PreconditionFailed, match="another writer changed it"):
        resubmit_order(states, "o-1", T0, expected_etag=seen.etag)
    with pytest.raises(IllegalTransition, match="only an order in Error"):
        resubmit_order(states, "o-1", T0)
    with pytest.raises(RecordNotFound):
        resubmit_order(states, "nobody", T0)


def test_an_order_is_resubmitted_no_more_often_than_its_budget_allows_c4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Resubmits spend from the order's one retry budget and never refill it: once its
    steps drew all they may, the console's resubmit is refused (409) and changes nothing."""
    states, _ = stores
    record = in_error(states, "o-1", resubmits=1)
    in_error(states, "o-2", tries_spent=record.budget.forward_limit)
    again = resubmit_order(states, "o-1", T0)
    assert (again.resubmits, again.tries_spent) == (2, 0)
    with pytest.raises(IllegalTransition, match="retry budget is spent"):
        resubmit_order(states, "o-2", T0)
    refused = states.get("o-2")
    assert refused is not None
    assert refused.process_state is ProcessState.ERROR
    assert refused.resubmits == 0


def test_cancel_fences_out_the_running_attempt_and_requests_its_compensation_c1_d4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    running = running_step_two(states, "o-1")
    request = cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="customer asked")
    assert request.superseded == "o-1:1"
    assert request.instance == InstanceId("o-1", 2)
    assert request.record.process_state is ProcessState.COMPENSATING
    assert request.record.complete_by == T0 + timedelta(seconds=120)
    assert [(u.name, u.reference) for u in request.undo] == [
        ("charge-payment", None),
        ("reserve-stock", "r-1"),
    ]
    late = transitions.finish_steps(InstanceId("o-1", 1), Step(1, STEPS[1], "p-1"), now=T0)
    assert states.fenced_update(late) is None
    with pytest.raises(IllegalTransition, match="only a Pending, Processing or Error order"):
        cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="again")
    assert running.etag != request.record.etag


def test_cancel_of_an_order_in_error_undoes_its_failed_step_by_key_and_ends_compensated_e8_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The first step failed for good, so the order is in Error; the operator gives it up for
    good: the failed step is undone by its idempotency key, whatever the service did, and
    the compensation ends Compensated, not Error again."""
    states, _ = stores
    in_error(
        states,
        "o-1",
        steps=(StepStatus(STEPS[0], StepState.FAILED), StepStatus(STEPS[1]), StepStatus(STEPS[2])),
    )
    request = cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="customer withdrew")
    assert (request.instance, request.superseded) == (InstanceId("o-1", 2), None)
    assert request.record.process_state is ProcessState.COMPENSATING
    assert request.record.compensation_ends_in is ProcessState.COMPENSATED
    assert request.undo == (Step(0, STEPS[0]),)
    stored_now = states.get("o-1")
    assert stored_now is not None
    assert stored_now.last_error == "cancelled by an operator: customer withdrew"
    for change in (
        transitions.begin_undo(request.instance, request.undo[0], complete_by=T0, now=T0),
        transitions.finish_undo(request.instance, undone=request.undo[0], now=T0),
    ):
        assert states.fenced_update(change) is not None
    done = states.get("o-1")
    assert done is not None
    assert done.process_state is ProcessState.COMPENSATED
    assert done.steps[0].state is StepState.COMPENSATED


def test_a_failed_compensation_is_retried_once_from_where_it_failed_c2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    running_step_two(states, "o-1")
    request = cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="r")
    undo = request.undo[0]
    failed = states.fenced_update(
        transitions.undo_failed(request.instance, undo, reason="refund refused", now=T0)
    )
    assert failed is not None
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    retried = retry_compensation(states, "o-1", T0, timeouts=TIMEOUTS, expected_etag=failed.etag)
    assert retried.instance == InstanceId("o-1", 3)
    assert retried.superseded == "o-1:2"
    assert retried.record.steps[1].state is StepState.COMPENSATION_FAILED
    assert [u.name for u in retried.undo] == ["charge-payment", "reserve-stock"]
    with pytest.raises(PreconditionFailed):
        retry_compensation(states, "o-1", T0, timeouts=TIMEOUTS, expected_etag=failed.etag)


def test_a_failed_compensation_is_retried_only_while_its_undos_have_tries_left_c2_c4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Each undo draws its tries in its begin write; once the undos drew all the budget
    leaves them, an operator's retry is refused (409) and the order stays with them."""
    states, _ = stores
    running_step_two(states, "o-1")
    request = cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="r")
    left = request.record.undo_tries_left
    begun = states.fenced_update(
        transitions.begin_undo(request.instance, request.undo[0], complete_by=T0, now=T0, draw=left)
    )
    assert begun is not None
    assert begun.budget.undo_tries(left, begun.tries_spent, begun.undo_tries_spent) == left
    failed = states.fenced_update(
        transitions.undo_failed(request.instance, request.undo[0], reason="refused", now=T0)
    )
    assert failed is not None
    assert failed.undo_tries_left == 0
    with pytest.raises(IllegalTransition, match="retry budget is spent: its undos"):
        retry_compensation(states, "o-1", T0, timeouts=TIMEOUTS)
    still = states.get("o-1")
    assert still is not None
    assert still.process_state is ProcessState.COMPENSATION_FAILED


def test_a_timeline_names_every_attempt_and_what_is_left_to_undo_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    running_step_two(states, "o-1")
    cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="r")
    timeline = order_timeline(states, "o-1")
    assert [str(a) for a in timeline.attempts] == ["o-1:1", "o-1:2"]
    assert [u.name for u in timeline.left_to_undo] == ["charge-payment", "reserve-stock"]
    assert timeline.record.compensation_log[0].reference == "r-1"
    with pytest.raises(RecordNotFound):
        order_timeline(states, "o-9")
