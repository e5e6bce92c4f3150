"""An attempt's fenced writes (services/steps.py) over real stores, and what each tells the
app and the operators (D4, E5, E8, C1, C2, C8, R2), and what it logs (C9). Runs on SQLite
and on the Cosmos DB API server."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from config import Settings
from domain import transitions
from domain.contracts import AlertKind
from domain.policies import compensation_deadline, step_deadline
from domain.ports import OrderStore, StateStore
from domain.records import InstanceId, ProcessState, StateRecord, StepState
from domain.workflow import Step
from observability import logs
from services import steps
from services.steps import Written

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
SETTINGS = Settings(reply_queues=frozenset({"replies-a"}))
STEPS = ("reserve-stock", "charge-payment", "ship-order")
ATTEMPT = InstanceId("o-1", 1)


def claimed(states: StateStore) -> StateRecord:
    record = transitions.new_record("o-1", "replies-a", T0 - timedelta(minutes=1), STEPS)
    created = states.create(transitions.claim(record, now=T0, claim_deadline=T0))
    return created.record


def begin(states: StateStore, index: int, done: Step | None) -> Written:
    return steps.begin_step(
        states,
        ATTEMPT,
        Step(index, STEPS[index]),
        done=done,
        now=T0,
        complete_by=step_deadline(T0, SETTINGS.timeouts),
    )


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    """The step writes' records: each event with its fields (the record attributes an
    exporter sends)."""
    found = []
    for record in caplog.records:
        if record.name == "app.steps":
            fields = {key: record.__dict__[key] for key in record.__dict__[logs.FIELDS_ATTRIBUTE]}
            event = record.getMessage().split(" order.id=")[0].split(" instance.id=")[0]
            found.append((event, fields))
    return found


def statuses(outcome: Written) -> list[tuple[str, str | None]]:
    return [(s.body["status"], s.body["step"]) for s in outcome.statuses]


def run_two_steps(states: StateStore) -> Step:
    claimed(states)
    assert begin(states, 0, None).statuses == ()
    second = begin(states, 1, Step(0, STEPS[0], "res-1"))
    assert statuses(second) == [("in-progress", STEPS[0])]
    return Step(1, STEPS[1], "pay-1")


def test_each_completed_step_is_reported_then_the_final_status_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    paid = run_two_steps(states)
    assert statuses(begin(states, 2, paid)) == [("in-progress", STEPS[1])]
    finished = steps.finish_steps(states, ATTEMPT, Step(2, STEPS[2], "ship-1"), now=T0)
    assert statuses(finished) == [("in-progress", STEPS[2]), ("completed", None)]
    record = states.get("o-1")
    assert record is not None
    assert record.process_state is ProcessState.PROCESSED
    assert [e.reference for e in record.compensation_log] == ["res-1", "pay-1", "ship-1"]


def test_a_repeated_final_write_sends_the_same_messages_again_c8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    claimed(states)
    begin(states, 0, None)

    def finish() -> Written:
        return steps.finish_steps(states, ATTEMPT, Step(0, STEPS[0], "r"), now=T0)

    first, again = finish(), finish()
    assert again.applied
    assert [s.message_id for s in again.statuses] == [s.message_id for s in first.statuses]


def test_a_repeated_step_write_logs_the_completed_step_once_c1_c8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The activity that completes a step and starts the next may run twice (C8): the repeat
    is recognised as this attempt's own write, says the same, and the compensation log still
    holds the completed step once (C1)."""
    states, _ = stores
    claimed(states)
    begin(states, 0, None)
    first = begin(states, 1, Step(0, STEPS[0], "res-1"))
    again = begin(states, 1, Step(0, STEPS[0], "res-1"))
    assert again.applied
    assert statuses(again) == statuses(first) == [("in-progress", STEPS[0])]
    record = states.get("o-1")
    assert record is not None
    assert [(e.step, e.reference) for e in record.compensation_log] == [(STEPS[0], "res-1")]
    assert [step.state for step in record.steps] == [
        StepState.COMPLETED,
        StepState.RUNNING,
        StepState.NOT_STARTED,
    ]


def test_a_stale_attempt_writes_nothing_and_says_nothing_d4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    claimed(states)
    stale = steps.begin_step(
        states,
        InstanceId("o-1", 7),
        Step(0, STEPS[0]),
        done=None,
        now=T0,
        complete_by=step_deadline(T0, SETTINGS.timeouts),
    )
    assert stale == steps.REFUSED
    record = states.get("o-1")
    assert record is not None
    assert record.steps[0].state is StepState.NOT_STARTED


def test_a_write_the_fence_refuses_is_logged_as_superseded_with_the_attempts_ids_d4_c9(
    stores: tuple[StateStore, OrderStore], caplog: pytest.LogCaptureFixture
) -> None:
    states, _ = stores
    claimed(states)
    caplog.set_level(logging.INFO, logger="app.steps")
    stale = InstanceId("o-1", 7)
    for index in (0, 1):
        assert not fail(states, index, attempt=stale).applied

    assert logged(caplog) == [
        (
            "write superseded",
            {
                "order.id": "o-1",
                "instance.id": "o-1:7",
                "attempt": 7,
                "step": STEPS[index],
                "write": "fail_step",
            },
        )
        for index in (0, 1)
    ]


def fail(states: StateStore, index: int, attempt: InstanceId = ATTEMPT) -> Written:
    return steps.fail_step(
        states,
        attempt,
        Step(index, STEPS[index]),
        reason="declined for good",
        now=T0,
        compensate_by=compensation_deadline(T0, SETTINGS.timeouts),
    )


def test_the_first_step_failing_ends_in_error_with_an_alert_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    claimed(states)
    begin(states, 0, None)
    failed = fail(states, 0)
    assert statuses(failed) == [("failed", None)]
    assert failed.alert is not None
    assert failed.alert.body["kind"] == AlertKind.ORDER_ERROR.value
    assert failed.undo == ()


def test_a_later_step_failing_compensates_the_completed_ones_newest_first_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    paid = run_two_steps(states)
    begin(states, 2, paid)
    failed = fail(states, 2)
    assert failed.statuses == ()
    assert [(u.name, u.reference) for u in failed.undo] == [
        (STEPS[2], None),
        (STEPS[1], "pay-1"),
        (STEPS[0], "res-1"),
    ]
    undone = None
    for undo in failed.undo:
        started = steps.begin_undo(
            states,
            ATTEMPT,
            undo,
            undone=undone,
            now=T0,
            complete_by=compensation_deadline(T0, SETTINGS.timeouts),
        )
        assert started.applied
        undone = undo
    finished = steps.finish_undo(states, ATTEMPT, undone=undone, now=T0)
    assert statuses(finished) == [("compensated", None)]
    record = states.get("o-1")
    assert record is not None
    assert record.process_state is ProcessState.COMPENSATED
    assert {step.state for step in record.steps} == {StepState.COMPENSATED}


def test_a_compensation_logs_the_failed_step_each_undo_and_the_final_state_c1_c9(
    stores: tuple[StateStore, OrderStore], caplog: pytest.LogCaptureFixture
) -> None:
    """Ids and step names only: the failure's reason (the service's words) stays in the
    record and the alert, not in the log."""
    states, _ = stores
    paid = run_two_steps(states)
    begin(states, 2, paid)
    caplog.set_level(logging.INFO, logger="app.steps")
    undone = None
    for undo in fail(states, 2).undo:
        steps.begin_undo(
            states,
            ATTEMPT,
            undo,
            undone=undone,
            now=T0,
            complete_by=compensation_deadline(T0, SETTINGS.timeouts),
        )
        undone = undo
    steps.finish_undo(states, ATTEMPT, undone=undone, now=T0)

    ids = {"order.id": "o-1", "instance.id": "o-1:1", "attempt": 1}
    assert logged(caplog) == [
        ("step failed", {**ids, "step": STEPS[2], "compensate": True}),
        ("undo finished", {**ids, "step": STEPS[2]}),
        ("undo finished", {**ids, "step": STEPS[1]}),
        ("undo finished", {**ids, "step": STEPS[0]}),
        ("order finished", {"order.id": "o-1", **ids, "state": "Compensated"}),
    ]
    assert not any("declined" in message for message in caplog.messages)


def test_an_undo_that_fails_for_good_tells_the_operator_which_step_c2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    paid = run_two_steps(states)
    begin(states, 2, paid)
    undo = fail(states, 2).undo[0]
    steps.begin_undo(
        states,
        ATTEMPT,
        undo,
        undone=None,
        now=T0,
        complete_by=compensation_deadline(T0, SETTINGS.timeouts),
    )
    failed = steps.undo_failed(
        states,
        ATTEMPT,
        undo,
        reason="already dispatched",
        now=T0,
    )
    assert statuses(failed) == [("compensation-failed", None)]
    assert failed.alert is not None
    assert failed.alert.body["kind"] == AlertKind.COMPENSATION_FAILED.value
    assert failed.alert.body["reason"] == (
        "undoing ship-order failed: already dispatched; left to undo: ship-order "
        "(by idempotency key), charge-payment (pay-1), reserve-stock (res-1)"
    )


def test_every_run_of_a_begin_draws_the_requests_tries_and_none_gets_more_than_is_left_c4_c8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The write that begins a step draws its request's tries in the same write; the same
    begin run again (its activity retried, C8) is recognised and draws again, never for
    free, until the steps' part of the budget is spent: then the request gets 0 tries. The
    repeat keeps what the record owes, the progress its first run may not have sent (C6)."""
    states, _ = stores
    budget = claimed(states).budget
    draw = SETTINGS.tries_per_request
    first = steps.begin_step(
        states,
        ATTEMPT,
        Step(0, STEPS[0]),
        done=None,
        now=T0,
        complete_by=step_deadline(T0, SETTINGS.timeouts),
        draw=draw,
    )
    assert (first.tries, first.record and first.record.tries_spent) == (draw, draw)
    runs = []
    for _ in range(budget.forward_limit // draw):
        again = steps.begin_step(
            states,
            ATTEMPT,
            Step(1, STEPS[1]),
            done=Step(0, STEPS[0], "res-1"),
            now=T0,
            complete_by=step_deadline(T0, SETTINGS.timeouts),
            draw=draw,
        )
        assert again.applied
        assert statuses(again) == [("in-progress", STEPS[0])]
        runs.append(again.tries)
    assert runs == [draw] * (budget.forward_limit // draw - 1) + [0]
    record = states.get("o-1")
    assert record is not None
    assert (record.tries_left, record.undo_tries_left) == (0, budget.undo_reserve)
    assert [entry.step for entry in record.compensation_log] == [STEPS[0]]
    assert record.owed is not None
    assert [(m.name, m.step) for m in record.owed.messages] == [("in-progress", STEPS[0])]


def test_the_widest_fenced_writes_commit_whole_with_their_draw_in_one_write_c4_c6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Cosmos DB applies at most ten patch operations in one request. The write that
    completes a step, logs it, owes its progress, moves the deadline and draws the next
    request's tries needs all ten, as do `fail_step` to Compensating and `undo_failed`;
    `begin_undo` after an undo, with its draw, needs nine. Each commits whole in its one
    write, its draw counted (C4, C6, C1)."""
    states, _ = stores
    draw = SETTINGS.tries_per_request
    claimed(states)
    deadline = step_deadline(T0, SETTINGS.timeouts)
    for index in range(3):
        done = None if index == 0 else Step(index - 1, STEPS[index - 1], f"ref-{index - 1}")
        begun = steps.begin_step(
            states,
            ATTEMPT,
            Step(index, STEPS[index]),
            done=done,
            now=T0,
            complete_by=deadline,
            draw=draw,
        )
        assert begun.applied, index
        assert begun.tries == draw
        assert statuses(begun) == ([] if done is None else [("in-progress", done.name)])
    undo_first, undo_next, _ = fail(states, 2).undo
    undo_by = compensation_deadline(T0, SETTINGS.timeouts)
    for undo, undone in ((undo_first, None), (undo_next, undo_first)):
        started = steps.begin_undo(
            states, ATTEMPT, undo, undone=undone, now=T0, complete_by=undo_by, draw=draw
        )
        assert (started.applied, started.tries) == (True, draw)
    failed = steps.undo_failed(states, ATTEMPT, undo_next, reason="refused", now=T0)

    assert statuses(failed) == [("compensation-failed", None)]
    record = states.get("o-1")
    assert record is not None
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert [entry.step for entry in record.compensation_log] == list(STEPS[:2])
    assert [step.state for step in record.steps] == [
        StepState.COMPLETED,
        StepState.COMPENSATION_FAILED,
        StepState.COMPENSATED,
    ]
    assert (record.tries_spent, record.undo_tries_spent) == (3 * draw, 2 * draw)


def test_an_undo_draws_from_the_reserve_and_what_the_steps_left_c4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    record = claimed(states)
    compensating = states.replace(
        transitions.cancel(record, now=T0, reason="r", compensation_deadline=T0)
    )
    instance = compensating.instance_id
    assert instance is not None
    undone = [
        steps.begin_undo(
            states,
            instance,
            Step(0, STEPS[0], "res-1"),
            undone=None,
            now=T0,
            complete_by=compensation_deadline(T0, SETTINGS.timeouts),
            draw=20,
        ).tries
        for _ in range(3)
    ]
    assert undone == [20, 20, record.retry_budget - 40]
