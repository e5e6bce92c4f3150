"""The step workflow's own behaviour through the real pipeline (C8, C10, E1, R2).

An order runs its steps in order, each through its own agent; the app hears `in-progress`
with the step's name as each one completes (R2). A step whose answer is lost is asked again
with the same idempotency key, by the agent or by the next attempt, and the service performs
it once (C8); a new attempt resumes at the first step the record does not show completed
and never asks for a completed one again (C10). The agents run behind their request queues
or, with AGENT_TRANSPORT=activity, as an activity with no queue at all (E1). ORDER_STEPS picks
the steps a new order runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from domain.records import ProcessState, StateRecord, StepState, parse_utc
from orchestrators.order_workflow import (
    BEGIN_STEP,
    FAIL_STEP,
    FINISH_STEPS,
    FINISH_UNDO,
    RUN_STEP,
    RUN_UNDO,
)
from tests.e2e.e2e_helpers import (
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    E2E,
    QUICK_RECOVERY,
    STEP_SERVICES,
    compensation_began_at,
    episodes,
    order_body,
    running_pipeline,
    scheduled_activities,
    side_effects_against_compensation,
    timer_deadlines,
)
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, SideEffectKind

STEPS = ("reserve-stock", "charge-payment", "ship-order")
SERVICE_OF = {"reserve-stock": "stock", "charge-payment": "payment", "ship-order": "shipping"}
ACTION_OF = {
    "stock": SideEffectKind.RESERVATION,
    "payment": SideEffectKind.PAYMENT,
    "shipping": SideEffectKind.SHIPMENT,
}
ENDED_WITHOUT_WRITING = {"timed-out", "gave-up"}


def steps_of(record: StateRecord) -> list[tuple[str, StepState, str | None]]:
    return [(step.name, step.state, step.reference) for step in record.steps]


def effects(e2e: E2E, service: str, order_id: str) -> list[tuple[SideEffectKind, int]]:
    """The side effects `service` performed for the order, in order, with their attempt."""
    return [(e.kind, e.attempt) for e in e2e.pipeline.services.ledger_entries(service, order_id)]


def performed_ids(e2e: E2E, order_id: str) -> dict[str, str]:
    """Per step, the id its service gave the one side effect it performed for the order."""
    ids: dict[str, str] = {}
    for step, service in SERVICE_OF.items():
        [entry] = e2e.pipeline.services.ledger_entries(service, order_id)
        assert entry.kind is ACTION_OF[service]
        ids[step] = entry.resource_id
    return ids


async def test_c8_a_lost_answer_is_asked_again_by_the_agent_and_charged_once(
    tmp_path: Path,
) -> None:
    """C8, E9: the payment service charges the order but its answer is lost; the agent asks
    again with the same idempotency key, the service replays the payment, and the order
    completes in its first attempt with one side effect at each service."""
    order = "o-lost-once"
    payment = FaultPlan(
        rules=(FaultRule(FaultKind.LOST_RESPONSE, order_id=order, operation="charge", times=1),)
    )
    async with running_pipeline(
        tmp_path, service_faults={"payment": payment}, settings=QUICK_RECOVERY, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "completed")

        assert [(m.body["status"], m.body["step"], m.body["attempt"]) for m in replies] == [
            ("received", None, None),
            ("in-progress", "reserve-stock", 1),
            ("in-progress", "charge-payment", 1),
            ("in-progress", "ship-order", 1),
            ("completed", None, 1),
        ]
        ids = performed_ids(e2e, order)
        record = await e2e.record(order)
        assert record is not None
        assert (record.process_state, record.failure_count) == (ProcessState.PROCESSED, 0)
        assert steps_of(record) == [(step, StepState.COMPLETED, ids[step]) for step in STEPS]
        payment_stats = e2e.pipeline.services.stats("payment")
        assert payment_stats["faults_injected"]["lost-response"] == 1
        assert (payment_stats["requests"], payment_stats["replays"]) == (2, 1)
        for service in STEP_SERVICES:
            assert e2e.pipeline.services.stats(service)["double_side_effects"] == 0


async def test_c10_c8_the_next_attempt_resumes_at_the_step_not_completed(tmp_path: Path) -> None:
    """C10, C8, U4: attempt 1 reserves the stock, then its charge is performed but the answer
    lost and the agent's retry outlives the step's deadline, so the supervisor retries the
    order. Attempt 2 resumes at charge-payment: the stock service is never asked again, the
    payment service replays attempt 1's payment for the same idempotency key, and the order
    completes - every service performed its side effect exactly once."""
    order = "o-resumed"
    payment = FaultPlan(
        rules=(
            FaultRule(
                FaultKind.LOST_RESPONSE, order_id=order, operation="charge", attempt=1, times=1
            ),
            FaultRule(
                FaultKind.LATENCY,
                order_id=order,
                operation="charge",
                attempt=1,
                skip=1,
                delay_seconds=300,
            ),
        )
    )
    async with running_pipeline(
        tmp_path, service_faults={"payment": payment}, settings=QUICK_RECOVERY, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "completed")

        assert [(m.body["status"], m.body["step"], m.body["attempt"]) for m in replies] == [
            ("received", None, None),
            ("in-progress", "reserve-stock", 1),
            ("in-progress", "charge-payment", 2),
            ("in-progress", "ship-order", 2),
            ("completed", None, 2),
        ]
        first = await e2e.finished_instance(f"{order}:1")
        assert first.output["outcome"] in ENDED_WITHOUT_WRITING
        assert first.output["step"] == "charge-payment"
        second = await e2e.finished_instance(f"{order}:2")
        assert second.input["resume_at"] == 1
        assert scheduled_activities(second) == [BEGIN_STEP, BEGIN_STEP, FINISH_STEPS]
        # One side effect per service; the payment is attempt 1's, replayed to attempt 2.
        assert effects(e2e, "stock", order) == [(SideEffectKind.RESERVATION, 1)]
        assert effects(e2e, "payment", order) == [(SideEffectKind.PAYMENT, 1)]
        assert effects(e2e, "shipping", order) == [(SideEffectKind.SHIPMENT, 2)]
        assert e2e.pipeline.services.stats("stock")["requests"] == 1
        assert e2e.pipeline.services.stats("payment")["replays"] >= 1
        for service in STEP_SERVICES:
            assert e2e.pipeline.services.stats(service)["double_side_effects"] == 0
        ids = performed_ids(e2e, order)
        record = await e2e.record(order)
        assert record is not None
        assert (record.process_state, record.failure_count, record.locked_by) == (
            ProcessState.PROCESSED,
            1,
            f"{order}:2",
        )
        assert steps_of(record) == [(step, StepState.COMPLETED, ids[step]) for step in STEPS]
        assert [(e.step, e.reference) for e in record.compensation_log] == [
            (step, ids[step]) for step in STEPS
        ]


async def test_e1_activity_agents_use_no_queue_to_complete_or_to_compensate(
    tmp_path: Path,
) -> None:
    """E1: with AGENT_TRANSPORT=activity each step's agent runs inside the activity that
    begins the step (`run_step_in_activity`, `run_undo_in_activity`): an order completes all
    three steps, one activity and one episode per step, each racing a timer at the CompleteBy
    the orchestration wrote (D6, E2); another, whose payment is declined, compensates (C1) -
    and not one message goes to an agent request queue or comes back on the response
    queue."""
    declined = "o-act-declined"
    payment = FaultPlan(
        rules=(FaultRule(FaultKind.PERMANENT, order_id=declined, operation="charge"),)
    )
    async with running_pipeline(
        tmp_path, service_faults={"payment": payment}, settings={"AGENT_TRANSPORT": "activity"}
    ) as e2e:
        await e2e.submit(order_body("o-act"), message_id="o-act")
        completed = await e2e.statuses("o-act", "completed")
        await e2e.submit(order_body(declined), message_id=declined)
        compensated = await e2e.statuses(declined, "compensated")

        assert [(m.body["status"], m.body["step"]) for m in completed] == [
            ("received", None),
            ("in-progress", "reserve-stock"),
            ("in-progress", "charge-payment"),
            ("in-progress", "ship-order"),
            ("completed", None),
        ]
        assert [(m.body["status"], m.body["step"]) for m in compensated] == [
            ("received", None),
            ("in-progress", "reserve-stock"),
            ("compensated", None),
        ]
        runs = await e2e.finished_instance("o-act:1")
        assert scheduled_activities(runs) == [RUN_STEP] * 3 + [FINISH_STEPS]
        # the start, one per step, and the one that saw finish_steps done
        assert episodes(runs) == 1 + len(STEPS) + 1
        # each step's timer is due at the CompleteBy its write was given
        written = [
            parse_utc(json.loads(event["Input"])["complete_by"])
            for event in runs.history or []
            if event.get("Name") == RUN_STEP
        ]
        assert len(written) == len(STEPS)
        assert timer_deadlines(runs) == written
        undoes = await e2e.finished_instance(f"{declined}:1")
        # reserve, the declined charge; then the charge's undo by key and the release
        assert scheduled_activities(undoes) == [
            RUN_STEP,
            RUN_STEP,
            FAIL_STEP,
            RUN_UNDO,
            RUN_UNDO,
            FINISH_UNDO,
        ]
        sent = e2e.app_sent()
        for queue in (*AGENT_REQUESTS, AGENT_RESPONSES):
            assert sent[queue] == 0, f"the app sent {sent[queue]} message(s) to {queue}"
            assert await e2e.peek(queue) == []
        assert effects(e2e, "stock", declined) == [
            (SideEffectKind.RESERVATION, 1),
            (SideEffectKind.RELEASE, 1),
        ]
        assert effects(e2e, "payment", declined) == []
        assert [t.idempotency_key for t in e2e.pipeline.services.tombstones("payment")] == [
            f"{declined}:charge-payment"
        ]
        began_at = await compensation_began_at(e2e, declined)
        assert side_effects_against_compensation(e2e.pipeline.services, declined, began_at) == []
        record = await e2e.record(declined)
        assert record is not None
        assert record.process_state is ProcessState.COMPENSATED


async def test_order_steps_of_one_step_run_that_step_alone(tmp_path: Path) -> None:
    """ORDER_STEPS=ship-order: a new order's workflow is that one step; the app hears
    received, in-progress ship-order, completed, and only the shipping service is called."""
    order = "o-ship-only"
    async with running_pipeline(
        tmp_path, settings={"ORDER_STEPS": "ship-order"}, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "completed")

        assert [(m.body["status"], m.body["step"], m.message_id) for m in replies] == [
            ("received", None, replies[0].message_id),
            ("in-progress", "ship-order", f"{order}:in-progress:ship-order"),
            ("completed", None, f"{order}:completed:1"),
        ]
        [shipment] = e2e.pipeline.services.ledger_entries("shipping", order)
        assert shipment.kind is SideEffectKind.SHIPMENT
        record = await e2e.record(order)
        assert record is not None
        assert record.process_state is ProcessState.PROCESSED
        assert steps_of(record) == [("ship-order", StepState.COMPLETED, shipment.resource_id)]
        assert [(e.step, e.reference) for e in record.compensation_log] == [
            ("ship-order", shipment.resource_id)
        ]
        for service in ("stock", "payment"):
            assert e2e.pipeline.services.stats(service)["requests"] == 0
