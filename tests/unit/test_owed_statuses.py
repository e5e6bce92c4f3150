"""How the timeline reads the durable client's histories for status messages (R1, R2, D4).

The Functions host reports a completed activity as one `TaskCompleted` event naming its
`FunctionName` (the devhost as a `TASK_SCHEDULED`/`TASK_COMPLETED` pair, which the store
tests use); an attempt whose output says it was superseded did not apply its last write,
which sent nothing; a reply queue off the allow-list gets nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from domain import transitions
from domain.contracts import OrderStatus
from domain.records import CompletedStep, InstanceId, ProcessState, StateRecord, StepState
from orchestrators.order_workflow import BEGIN_STEP, BEGIN_UNDO, FINISH_UNDO, STATUS_SENDERS
from services import outbox
from services.owed_statuses import OWED, SENT, SENT_BY_SUPERVISOR, UNKNOWN, owed_statuses

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
REPLY_QUEUES = frozenset({"replies-a"})
FIRST = InstanceId("o-1", 1)


def two_steps_logged(reply_to: str | None = "replies-a") -> StateRecord:
    """Processing under attempt 1, with two steps completed and logged (C1)."""
    record = transitions.claim(
        transitions.new_record("o-1", reply_to, T0, STEPS), now=T0, claim_deadline=T0
    )
    log = tuple(
        CompletedStep(name, f"ref-{n}", T0 + timedelta(minutes=n))
        for n, name in enumerate(STEPS[:2])
    )
    steps = tuple(
        replace(step, state=StepState.COMPLETED) if n < 2 else step
        for n, step in enumerate(record.steps)
    )
    return replace(record, compensation_log=log, steps=steps)


def host_view(*activities: str, output: Any = None, status: str = "Running") -> dict[str, Any]:
    """The durable client's view of an instance as the Functions host reports its history."""
    return {
        "runtimeStatus": status,
        "output": output,
        "history": [
            {"EventType": "ExecutionStarted", "FunctionName": "order_workflow"},
            *(
                {
                    "EventType": "TaskCompleted",
                    "FunctionName": name,
                    "Timestamp": "2026-09-01T10:05:00Z",
                }
                for name in activities
            ),
        ],
    }


def deliveries(record: StateRecord, views: dict[str, Any]) -> list[tuple[str, str]]:
    owed = owed_statuses(record, (FIRST,), views, senders=STATUS_SENDERS, reply_queues=REPLY_QUEUES)
    return [(m.message.message_id, m.delivery) for m in owed.messages[1:]]


def test_the_hosts_history_shape_shows_which_steps_were_reported_r2() -> None:
    record = two_steps_logged()
    views = {str(FIRST): host_view(BEGIN_STEP, BEGIN_STEP)}

    assert deliveries(record, views) == [
        ("o-1:in-progress:reserve-stock", SENT),
        ("o-1:in-progress:charge-payment", OWED),
    ]


def test_the_last_write_of_a_superseded_attempt_sent_nothing_d4() -> None:
    record = two_steps_logged()
    views = {
        str(FIRST): host_view(
            BEGIN_STEP, BEGIN_STEP, output={"outcome": "superseded"}, status="Completed"
        )
    }

    assert deliveries(record, views) == [
        ("o-1:in-progress:reserve-stock", OWED),
        ("o-1:in-progress:charge-payment", OWED),
    ]


def test_without_the_attempts_history_delivery_is_unknown() -> None:
    record = replace(two_steps_logged(), process_state=ProcessState.PROCESSED)

    assert {delivery for _, delivery in deliveries(record, {str(FIRST): None})} == {UNKNOWN}


def test_a_reply_queue_off_the_allow_list_is_owed_nothing_r1() -> None:
    owed = owed_statuses(
        two_steps_logged("replies-gone"),
        (FIRST,),
        {},
        senders=STATUS_SENDERS,
        reply_queues=REPLY_QUEUES,
    )

    assert (owed.reply_to, owed.messages) == ("replies-gone", ())
    assert "not on REPLY_QUEUES" in owed.note


def test_a_final_status_still_in_the_records_outbox_is_owed_not_sent_by_the_supervisor_c6() -> None:
    """The supervisor gave the attempt up: no history shows its `failed` status sent, and
    while the record's outbox holds it, the relay has yet to send it."""
    given_up = replace(two_steps_logged(), process_state=ProcessState.ERROR, complete_by=None)
    ended = {str(FIRST): host_view(BEGIN_STEP, BEGIN_STEP, status="Completed")}
    owing = outbox.owing(
        given_up,
        (outbox.owed_status(OrderStatus.FAILED, attempt=1, at=T0, reason="MAX_FAILURES=3"),),
        now=T0,
    )

    assert deliveries(given_up, ended)[-1] == ("o-1:failed:1", SENT_BY_SUPERVISOR)
    assert deliveries(owing, ended)[-1] == ("o-1:failed:1", OWED)


def test_an_error_a_compensation_ended_in_is_owed_until_its_finish_undo_ran_u4() -> None:
    """The supervisor gave up with a step in doubt, and the compensation under attempt 2
    wrote Error: its `failed` is `finish_undo`'s to send, never the supervisor's, so an
    ended instance whose history lacks it still owes it."""
    given_up = replace(
        transitions.claim(
            transitions.new_record("o-1", "replies-a", T0, STEPS), now=T0, claim_deadline=T0
        ),
        process_state=ProcessState.ERROR,
        locked_by="o-1:2",
        attempt=2,
        complete_by=None,
        compensation_ends_in=ProcessState.ERROR,
    )
    second = InstanceId("o-1", 2)

    def delivery(*activities: str) -> tuple[str, str, str]:
        view = host_view(*activities, output={"outcome": "failed"}, status="Completed")
        owed = owed_statuses(
            given_up,
            (FIRST, second),
            {str(second): view},
            senders=STATUS_SENDERS,
            reply_queues=REPLY_QUEUES,
        )
        [failed] = owed.messages[1:]
        return failed.message.message_id, failed.delivery, failed.sent_by

    assert delivery(BEGIN_UNDO, FINISH_UNDO) == ("o-1:failed:2", SENT, FINISH_UNDO)
    assert delivery(BEGIN_UNDO) == ("o-1:failed:2", OWED, FINISH_UNDO)
