"""The timeline's status messages: what the record says the app owes the reply queue, with
the ids the app sends, and whether the orchestration history shows them sent (R1, R2, S2,
C10, E8). Runs on SQLite and on the Cosmos DB API server.

The order is driven through the service functions the app's functions call (submission,
the step workflow's fenced writes); what they return to send is what the reply queue gets.
The durable client's view of each attempt is written here in the devhost's history shape,
one completed activity per service call, as the durable runtime records it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config import Settings
from domain import transitions
from domain.contracts import StatusMessage
from domain.policies import compensation_deadline, step_deadline
from domain.ports import OrderStore, StateStore
from domain.records import InstanceId, ProcessState, format_utc
from domain.workflow import Step
from orchestrators.order_workflow import (
    BEGIN_STEP,
    BEGIN_UNDO,
    FAIL_STEP,
    FINISH_STEPS,
    FINISH_UNDO,
    RUN_STEP,
    STATUS_SENDERS,
)
from services import steps
from services.admission import BacklogGate
from services.operator import cancel_order, order_timeline, resubmit_order, timeline_view
from services.owed_statuses import (
    OWED,
    SENT,
    SENT_BY_SUPERVISOR,
    SENT_WITH_RECORD,
    owed_statuses,
)
from services.steps import Written
from services.submission import Accepted, submit_order

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
SETTINGS = Settings(reply_queues=frozenset({"replies-a"}))
STEPS = ("reserve-stock", "charge-payment", "ship-order")


@dataclass
class Attempt:
    """The durable client's view of one attempt's instance."""

    history: list[dict[str, Any]] = field(default_factory=list)
    runtime_status: str = "Running"
    output: dict[str, str] | None = None

    def view(self, instance: InstanceId) -> dict[str, Any]:
        return {
            "instanceId": str(instance),
            "runtimeStatus": self.runtime_status,
            "output": self.output,
            "history": self.history,
        }


@dataclass
class Order:
    """One order driven through the app's services: what they sent, and each attempt's
    history."""

    states: StateStore
    order_id: str
    sent: list[StatusMessage] = field(default_factory=list)
    attempts: dict[int, Attempt] = field(default_factory=lambda: {1: Attempt()})
    minute: int = 0

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, max(self.attempts))

    @property
    def current(self) -> Attempt:
        return self.attempts[max(self.attempts)]

    def now(self) -> datetime:
        self.minute += 1
        return T0 + timedelta(minutes=self.minute)

    def completed(self, activity: str, outcome: Written | None = None) -> None:
        """The activity ran, sent what its write produced, and the history shows it done."""
        if outcome is not None:
            assert outcome.applied
            self.sent += outcome.statuses
        history = self.current.history
        event_id = len(history)
        history += [
            {"EventType": "TASK_SCHEDULED", "EventId": event_id, "Name": activity},
            {
                "EventType": "TASK_COMPLETED",
                "EventId": -1,
                "TaskScheduledId": event_id,
                "Timestamp": format_utc(T0 + timedelta(minutes=self.minute, seconds=1)),
            },
        ]

    def ended(self, outcome: str) -> None:
        self.current.runtime_status = "Completed"
        self.current.output = {"outcome": outcome}

    def timeline(self) -> dict[str, Any]:
        views = {
            str(InstanceId(self.order_id, n)): attempt.view(InstanceId(self.order_id, n))
            for n, attempt in self.attempts.items()
        }
        timeline = order_timeline(self.states, self.order_id)
        owed = owed_statuses(
            timeline.record,
            timeline.attempts,
            views,
            senders=STATUS_SENDERS,
            reply_queues=SETTINGS.reply_queues,
        )
        return timeline_view(timeline, views, owed)


def submitted(
    stores: tuple[StateStore, OrderStore], order_id: str, reply_to: str | None = "replies-a"
) -> Order:
    states, orders = stores
    result = submit_order(
        json.dumps(
            {
                "schemaVersion": 1,
                "orderId": order_id,
                "customerId": "customer-1",
                "items": [{"sku": "sku-1", "quantity": 1}],
                "currency": "EUR",
            }
        ),
        reply_to=reply_to,
        message_id=order_id,
        orders=orders,
        states=states,
        admission=BacklogGate(lambda at_most: 0, bound=100, recount_seconds=60),
        reply_queues=SETTINGS.reply_queues,
        now=T0,
        steps=STEPS,
    )
    assert isinstance(result, Accepted), result
    order = Order(states, order_id)
    order.sent += [] if result.status is None else [result.status]
    states.replace(transitions.claim(result.record, now=T0, claim_deadline=T0 + timedelta(1)))
    return order


def begin(order: Order, index: int, done: Step | None, *, begins: str = BEGIN_STEP) -> None:
    now = order.now()
    outcome = steps.begin_step(
        order.states,
        order.instance,
        Step(index, STEPS[index]),
        done=done,
        now=now,
        complete_by=step_deadline(now, SETTINGS.timeouts),
    )
    order.completed(begins, outcome)


def two_steps_done(order: Order, *, begins: str = BEGIN_STEP) -> Step:
    begin(order, 0, None, begins=begins)
    begin(order, 1, Step(0, STEPS[0], "res-1"), begins=begins)
    begin(order, 2, Step(1, STEPS[1], "pay-1"), begins=begins)
    return Step(2, STEPS[2], "ship-1")


def fail(order: Order, index: int, reason: str) -> Written:
    now = order.now()
    return steps.fail_step(
        order.states,
        order.instance,
        Step(index, STEPS[index]),
        reason=reason,
        now=now,
        compensate_by=compensation_deadline(now, SETTINGS.timeouts),
    )


def rows(timeline: dict[str, Any]) -> list[tuple[str, str | None, int | None, str]]:
    return [
        (m["status"], m["step"], m["attempt"], m["delivery"])
        for m in timeline["statusMessages"]["messages"]
    ]


def message_ids(timeline: dict[str, Any]) -> list[str]:
    return [m["messageId"] for m in timeline["statusMessages"]["messages"]]


# Over the queue pair BEGIN_STEP begins each step; with the agent as an activity, RUN_STEP
# begins it and runs the agent (E1).
@pytest.mark.parametrize("begins", [BEGIN_STEP, RUN_STEP])
def test_a_processed_order_owes_received_each_step_and_completed_all_sent_r2(
    stores: tuple[StateStore, OrderStore], begins: str
) -> None:
    order = submitted(stores, "o-done")
    last = two_steps_done(order, begins=begins)
    finished = steps.finish_steps(order.states, order.instance, last, now=order.now())
    order.completed(FINISH_STEPS, finished)
    order.ended("completed")

    timeline = order.timeline()

    assert (
        message_ids(timeline)
        == [s.message_id for s in order.sent]
        == [
            "o-done:received:-",
            "o-done:in-progress:reserve-stock",
            "o-done:in-progress:charge-payment",
            "o-done:in-progress:ship-order",
            "o-done:completed:1",
        ]
    )
    assert rows(timeline) == [
        ("received", None, None, SENT_WITH_RECORD),
        ("in-progress", "reserve-stock", 1, SENT),
        ("in-progress", "charge-payment", 1, SENT),
        ("in-progress", "ship-order", 1, SENT),
        ("completed", None, 1, SENT),
    ]
    senders = [m["sentBy"] for m in timeline["statusMessages"]["messages"]]
    assert senders[1:4] == [begins, begins, FINISH_STEPS]
    record = timeline["record"]
    log = [entry["CompletedAt"] for entry in timeline["compensationLog"]]
    follows = [m["follows"] for m in timeline["statusMessages"]["messages"]]
    assert follows == [record["CreatedAt"], *log, record["UpdatedAt"]]
    assert timeline["statusMessages"]["replyTo"] == "replies-a"


def test_a_write_whose_activity_has_not_completed_owes_its_statuses_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The last write applied, its activity has not completed yet: the history does not show
    the send, so its `in-progress` and `completed` are owed (the retried activity sends)."""
    order = submitted(stores, "o-owed")
    last = two_steps_done(order)
    steps.finish_steps(order.states, order.instance, last, now=order.now())

    assert rows(order.timeline())[-2:] == [
        ("in-progress", "ship-order", None, OWED),
        ("completed", None, 1, OWED),
    ]


def test_an_order_in_error_owes_received_and_failed_under_its_attempt_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    order = submitted(stores, "o-error")
    begin(order, 0, None)
    failed = fail(order, 0, "out of stock for good")
    order.completed(FAIL_STEP, failed)
    order.ended("failed")

    timeline = order.timeline()

    assert (
        message_ids(timeline)
        == [s.message_id for s in order.sent]
        == [
            "o-error:received:-",
            "o-error:failed:1",
        ]
    )
    assert rows(timeline)[-1] == ("failed", None, 1, SENT)


def test_an_order_the_supervisor_gave_up_on_was_told_by_the_supervisor_u4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The attempt's instance failed before its first write (no step began, so none is in
    doubt); the supervisor's give-up wrote Error and sent `failed` with it, outside any
    history."""
    order = submitted(stores, "o-gave-up")
    order.current.runtime_status = "Failed"
    record = order.states.get("o-gave-up")
    assert record is not None
    late = T0 + timedelta(days=2)
    order.states.replace(
        transitions.give_up(record, now=late, reason="no answer", compensation_deadline=late)
    )

    timeline = order.timeline()

    assert timeline["record"]["ProcessState"] == ProcessState.ERROR.value
    [failed] = [m for m in timeline["statusMessages"]["messages"] if m["status"] == "failed"]
    assert (failed["messageId"], failed["delivery"]) == ("o-gave-up:failed:1", SENT_BY_SUPERVISOR)


def undo_all(order: Order, plan: tuple[Step, ...], ends_in: ProcessState) -> Written:
    """The compensation instance's writes: each undo begun, then the finish (C1)."""
    undone = None
    for undo in plan:
        now = order.now()
        started = steps.begin_undo(
            order.states,
            order.instance,
            undo,
            undone=undone,
            now=now,
            complete_by=compensation_deadline(now, SETTINGS.timeouts),
        )
        order.completed(BEGIN_UNDO, started)
        undone = undo
    finished = steps.finish_undo(
        order.states, order.instance, undone=undone, now=order.now(), ends_in=ends_in
    )
    order.completed(FINISH_UNDO, finished)
    return finished


def test_an_order_given_up_with_a_step_in_doubt_owes_failed_from_its_compensation_u4_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The supervisor gave up with the first step in doubt: the compensation it started
    undid the step and wrote Error, so `finish_undo` sent `failed`, under that attempt.
    Cancelled by an operator then, the order owes `compensated` under the cancel's
    attempt, and the `failed` before it is still listed, as its attempt's history shows."""
    order = submitted(stores, "o-in-doubt")
    begin(order, 0, None)
    order.ended("timed-out")
    record = order.states.get("o-in-doubt")
    assert record is not None
    late = T0 + timedelta(hours=1)
    given_up = order.states.replace(
        transitions.give_up(record, now=late, reason="no answer", compensation_deadline=late)
    )
    order.attempts[2] = Attempt()
    undo_all(order, transitions.compensation_plan(given_up), given_up.compensation_ends_in)
    order.ended("failed")

    in_error = order.timeline()

    assert in_error["record"]["ProcessState"] == ProcessState.ERROR.value
    assert message_ids(in_error) == [s.message_id for s in order.sent]
    assert rows(in_error) == [
        ("received", None, None, SENT_WITH_RECORD),
        ("failed", None, 2, SENT),
    ]
    assert in_error["statusMessages"]["messages"][-1]["sentBy"] == FINISH_UNDO

    cancelled = cancel_order(
        order.states, "o-in-doubt", order.now(), timeouts=SETTINGS.timeouts, reason="withdrawn"
    )
    order.attempts[3] = Attempt()
    undo_all(order, cancelled.undo, cancelled.record.compensation_ends_in)
    order.ended("compensated")

    timeline = order.timeline()

    assert (
        message_ids(timeline)
        == [s.message_id for s in order.sent]
        == ["o-in-doubt:received:-", "o-in-doubt:failed:2", "o-in-doubt:compensated:3"]
    )
    assert rows(timeline)[1:] == [("failed", None, 2, SENT), ("compensated", None, 3, SENT)]


def test_a_compensated_order_owes_each_completed_step_and_compensated_c1_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    order = submitted(stores, "o-undone")
    two_steps_done(order)
    failed = fail(order, 2, "cannot ship")
    order.completed(FAIL_STEP, failed)
    undo_all(order, failed.undo, ProcessState.COMPENSATED)
    order.ended("compensated")

    timeline = order.timeline()

    assert timeline["record"]["ProcessState"] == ProcessState.COMPENSATED.value
    assert (
        message_ids(timeline)
        == [s.message_id for s in order.sent]
        == [
            "o-undone:received:-",
            "o-undone:in-progress:reserve-stock",
            "o-undone:in-progress:charge-payment",
            "o-undone:compensated:1",
        ]
    )
    assert {m["delivery"] for m in timeline["statusMessages"]["messages"][1:]} == {SENT}


def test_an_order_without_a_reply_queue_is_owed_no_status_messages_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    order = submitted(stores, "o-silent", reply_to=None)
    begin(order, 0, None)

    timeline = order.timeline()

    assert order.sent == []
    assert timeline["statusMessages"]["replyTo"] is None
    assert timeline["statusMessages"]["messages"] == []
    assert "no reply queue (ReplyTo null)" in timeline["statusMessages"]["note"]


def test_a_resubmitted_order_lists_the_failed_of_the_attempt_it_left_e8_c4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The record moved on from Error; the first attempt's history still shows the `failed`
    it sent, under its attempt."""
    order = submitted(stores, "o-again")
    begin(order, 0, None)
    failed = fail(order, 0, "out of stock for now")
    order.completed(FAIL_STEP, failed)
    order.ended("failed")
    pending = resubmit_order(order.states, "o-again", order.now())
    order.states.replace(
        transitions.claim(pending, now=order.now(), claim_deadline=T0 + timedelta(1))
    )
    order.attempts[2] = Attempt()
    last = two_steps_done(order)
    finished = steps.finish_steps(order.states, order.instance, last, now=order.now())
    order.completed(FINISH_STEPS, finished)
    order.ended("completed")

    timeline = order.timeline()

    assert (
        message_ids(timeline)
        == [s.message_id for s in order.sent]
        == [
            "o-again:received:-",
            "o-again:failed:1",
            "o-again:in-progress:reserve-stock",
            "o-again:in-progress:charge-payment",
            "o-again:in-progress:ship-order",
            "o-again:completed:2",
        ]
    )
    assert [m["attempt"] for m in timeline["statusMessages"]["messages"]] == [None, 1, 2, 2, 2, 2]
    assert {m["delivery"] for m in timeline["statusMessages"]["messages"][1:]} == {SENT}
    assert "resubmitted 1 time(s)" in timeline["statusMessages"]["note"]
    assert "history" not in timeline["attempts"][0]["orchestration"]
    assert timeline["attempts"][1]["orchestration"]["history"]
