"""The step workflow's state changes: steps, the compensation log, the plan (C1, C2, C10, D4)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import transitions
from domain.records import (
    CompletedStep,
    InstanceId,
    ProcessState,
    StateRecord,
    StepState,
    StepStatus,
)
from domain.transitions import FenceLost
from domain.workflow import WORKFLOW_VERSION, Step

NOW = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
ATTEMPT = InstanceId("order-9", 1)


def claimed(**changes: object) -> StateRecord:
    record = transitions.new_record("order-9", "replies-a", NOW, STEPS)
    record = transitions.claim(record, now=NOW, claim_deadline=LATER)
    return replace(record, **changes)  # type: ignore[arg-type]


def run(record: StateRecord, *changes: transitions.FencedChange) -> StateRecord:
    for change in changes:
        record = change.apply(record)
    return record


def done(name: str, reference: str) -> CompletedStep:
    return CompletedStep(name, reference, NOW)


def happy_path() -> list[transitions.FencedChange]:
    return [
        transitions.begin_step(ATTEMPT, Step(0, STEPS[0]), complete_by=LATER, now=NOW),
        transitions.begin_step(
            ATTEMPT, Step(1, STEPS[1]), complete_by=LATER, now=NOW, done=Step(0, STEPS[0], "res-1")
        ),
        transitions.begin_step(
            ATTEMPT, Step(2, STEPS[2]), complete_by=LATER, now=NOW, done=Step(1, STEPS[1], "pay-1")
        ),
        transitions.finish_steps(ATTEMPT, Step(2, STEPS[2], "ship-1"), now=NOW),
    ]


def test_a_new_step_order_lists_its_steps_not_started() -> None:
    record = transitions.new_record("order-9", None, NOW, STEPS)
    assert record.workflow_version == WORKFLOW_VERSION
    assert [(s.name, s.state) for s in record.steps] == [
        (name, StepState.NOT_STARTED) for name in STEPS
    ]
    with pytest.raises(ValueError, match="at least one step"):
        transitions.new_record("order-9", None, NOW, ())


def test_completing_a_step_logs_it_in_the_same_write_that_starts_the_next_c1() -> None:
    changes = happy_path()
    record = run(claimed(), *changes[:2])
    assert [s.state for s in record.steps] == [
        StepState.COMPLETED,
        StepState.RUNNING,
        StepState.NOT_STARTED,
    ]
    assert record.steps[0].reference == "res-1"
    assert record.compensation_log == (done(STEPS[0], "res-1"),)
    assert (record.current_step, record.complete_by) == (STEPS[1], LATER)


def test_the_last_step_makes_the_order_processed_with_a_full_log_e5_c1() -> None:
    record = run(claimed(), *happy_path())
    assert record.process_state is ProcessState.PROCESSED
    assert record.complete_by is None
    assert [entry.step for entry in record.compensation_log] == list(STEPS)
    assert all(step.state is StepState.COMPLETED for step in record.steps)
    assert record.resume_at is None


def test_a_newer_attempt_resumes_at_the_first_step_not_completed_c10() -> None:
    record = run(claimed(), *happy_path()[:2])
    assert record.resume_at == 1


def test_a_stale_attempt_changes_no_step_d4() -> None:
    newer = claimed(locked_by="order-9:2", attempt=2)
    with pytest.raises(FenceLost):
        happy_path()[0].apply(newer)


def test_a_failure_with_nothing_logged_ends_in_error_e8() -> None:
    record = run(claimed(), happy_path()[0])
    failed = transitions.fail_step(
        ATTEMPT, Step(0, STEPS[0]), reason="out of stock", now=NOW, compensate_by=None
    ).apply(record)
    assert failed.process_state is ProcessState.ERROR
    assert failed.steps[0].state is StepState.FAILED
    assert failed.last_error == "out of stock"


def compensating() -> StateRecord:
    record = run(claimed(), *happy_path()[:3])
    return transitions.fail_step(
        ATTEMPT, Step(2, STEPS[2]), reason="no carrier", now=NOW, compensate_by=LATER
    ).apply(record)


def test_a_failure_after_completed_steps_starts_compensating_c1_c2() -> None:
    record = compensating()
    assert record.process_state is ProcessState.COMPENSATING
    assert record.steps[2].state is StepState.FAILED
    assert record.complete_by == LATER
    assert record.compensation_started_at == NOW


def test_the_plan_undoes_the_step_in_doubt_then_the_log_newest_first_c1() -> None:
    assert transitions.compensation_plan(compensating()) == (
        Step(2, STEPS[2], None),
        Step(1, STEPS[1], "pay-1"),
        Step(0, STEPS[0], "res-1"),
    )


def test_compensation_runs_in_reverse_and_ends_compensated_c2() -> None:
    record = compensating()
    plan = transitions.compensation_plan(record)
    previous: Step | None = None
    for undo in plan:
        change = transitions.begin_undo(ATTEMPT, undo, complete_by=LATER, now=NOW, undone=previous)
        record = change.apply(record)
        assert record.steps[undo.index].state is StepState.COMPENSATING
        previous = undo
    record = transitions.finish_undo(ATTEMPT, undone=previous, now=NOW).apply(record)
    assert record.process_state is ProcessState.COMPENSATED
    assert all(step.state is StepState.COMPENSATED for step in record.steps)
    assert record.steps[1].reference == "pay-1"


def test_a_stalled_compensation_resumes_at_the_step_it_reached_c2() -> None:
    record = compensating()
    first, second, third = transitions.compensation_plan(record)
    record = run(
        record,
        transitions.begin_undo(ATTEMPT, first, complete_by=LATER, now=NOW),
        transitions.begin_undo(ATTEMPT, second, complete_by=LATER, now=NOW, undone=first),
    )
    assert transitions.compensation_plan(record) == (second, third)


def test_an_undo_that_fails_for_good_ends_compensation_failed_c2() -> None:
    record = compensating()
    undo = transitions.compensation_plan(record)[0]
    record = run(
        record,
        transitions.begin_undo(ATTEMPT, undo, complete_by=LATER, now=NOW),
        transitions.undo_failed(ATTEMPT, undo, reason="already dispatched", now=NOW),
    )
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert record.steps[2].state is StepState.COMPENSATION_FAILED
    assert (record.current_step, record.last_error) == (STEPS[2], "already dispatched")
    # What an operator must still undo: the failed undo first, then the rest of the log.
    assert [u.name for u in transitions.compensation_plan(record)] == [STEPS[2], STEPS[1], STEPS[0]]


def test_giving_up_marks_the_running_step_in_doubt_for_compensation_u4_c1() -> None:
    record = run(claimed(), *happy_path()[:2])
    expired = replace(record, complete_by=NOW)
    given_up = transitions.give_up(
        expired, now=LATER, reason="timed out 3 times", compensation_deadline=LATER
    )
    assert given_up.process_state is ProcessState.COMPENSATING
    assert given_up.compensation_started_at == LATER
    assert given_up.steps[1] == StepStatus(STEPS[1], StepState.FAILED)
    assert transitions.compensation_plan(given_up)[0] == Step(1, STEPS[1], None)


def test_changes_name_contract_document_paths() -> None:
    change = happy_path()[1]
    sets = dict(change.document_sets())
    assert sets[("Steps", 0)] == {
        "Name": STEPS[0],
        "State": "Completed",
        "CompleteBy": None,
        "Reference": "res-1",
    }
    assert sets[("Steps", 1)]["State"] == "Running"
    assert sets[("CurrentStep",)] == STEPS[1]
    assert ("ProcessState",) not in sets
    assert change.document_append() == (
        ("CompensationLog",),
        {"Step": STEPS[0], "Reference": "res-1", "CompletedAt": "2026-09-01T10:00:00.000000Z"},
    )
