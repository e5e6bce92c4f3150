"""The agents' two shapes and their responses through the real pipeline (E1, E3, E4, E6, D4).

Over Service Bus, the response-triggered function raises the orchestration's external event;
the orchestration takes only the answer to the request it is waiting for (E3), a response
for an instance that has finished is late and is dropped (E3, E6), and a response resent
with the same MessageId never reaches the app (E4, duplicate detection). The request goes
out from the write that begins a step only while the attempt's fence holds (D4), once
however often that activity runs (E4, C8). As an activity, an agent needs no queue at all
(E1).
"""

import asyncio
import dataclasses
import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from devhost.testing import eventually

import bootstrap
from adapters.codec import from_data, to_data, to_json
from domain.agent_messages import AgentOutcome, AgentResponse
from domain.contracts import Order
from domain.records import ProcessState
from domain.transitions import claim, new_record
from domain.workflow import DEFAULT_ORDER_STEPS, Step
from orchestrators.order_workflow import BEGIN_STEP, RUN_STEP
from orchestrators.payloads import StepWrite, StepWritten
from tests.e2e.e2e_helpers import (
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    ALERTS,
    REPLIES,
    STEP_SERVICES,
    STOCK_REQUESTS,
    order_body,
    raised_events,
    running_pipeline,
    scheduled_activities,
)
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, Role

RESPONSE_FUNCTION = "receive_agent_response"
STEP_AGENT_FUNCTIONS = ("stock_agent", "payment_agent", "shipping_agent")
NEVER_ON_ITS_OWN = {"STARTER_SCHEDULE": "0 0 0 1 1 *", "SUPERVISOR_SCHEDULE": "0 0 0 1 1 *"}


def _invocations(caplog: pytest.LogCaptureFixture, function: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == "devhost.invocation" and f"function={function} " in r.getMessage()
    )


def _trail(replies: list[Any]) -> list[tuple[str, str | None, int | None]]:
    return [(m.body["status"], m.body["step"], m.body["attempt"]) for m in replies]


COMPLETED_IN_ATTEMPT_1 = [
    ("received", None, None),
    ("in-progress", "reserve-stock", 1),
    ("in-progress", "charge-payment", 1),
    ("in-progress", "ship-order", 1),
    ("completed", None, 1),
]


async def test_e3_e4_late_and_duplicate_responses_change_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """E3: while the orchestration waits for the payment agent, a `failed` answer to the
    stock request it already has is raised to it under that request's own event name, which
    no wait takes any more, and ignored: only the answer to the request it waits for counts,
    and the order completes. E3, E6: a response sent again by hand for a
    completed instance (a new MessageId) is dropped with no error and no state change, and so
    is one for an instance that never existed. E4: a response resent with the agent's stable
    MessageId is removed by duplicate detection and never triggers the app."""
    # The capture handler takes the level of the last set_level call: the lower one goes last.
    caplog.set_level(logging.INFO, logger="app.agent_bridge")
    caplog.set_level(logging.DEBUG, logger="devhost.invocation")
    # The charge takes 3 s, so the instance is still waiting for it when the stray arrives.
    slow_charge = FaultPlan(
        rules=(
            FaultRule(FaultKind.LATENCY, order_id="o-late", operation="charge", delay_seconds=3),
        )
    )
    async with running_pipeline(tmp_path, service_faults={"payment": slow_charge}) as e2e:
        await e2e.submit(order_body("o-late"), message_id="o-late")
        await e2e.statuses("o-late", "in-progress")
        earlier = AgentResponse(
            request_id="o-late:1:reserve-stock",
            instance_id="o-late:1",
            outcome=AgentOutcome.FAILED,
            detail="an answer to a request the orchestration is not waiting for",
        )
        await e2e.send(AGENT_RESPONSES, to_json(earlier), message_id="o-late:stray-in-flight")

        replies = await e2e.statuses("o-late", "completed")

        assert _trail(replies) == COMPLETED_IN_ATTEMPT_1[2:], "no step failed"
        instance = await e2e.finished_instance("o-late:1")
        assert to_data(earlier) in raised_events(instance), "the stray reached the instance"
        assert instance.output == {"outcome": "completed"}
        await e2e.drained(AGENT_RESPONSES, "the agents' answers were consumed")
        completed = await e2e.record("o-late")
        assert completed is not None
        assert completed.process_state is ProcessState.PROCESSED
        assert _invocations(caplog, RESPONSE_FUNCTION) == 4, "three answers and the stray"

        failure = AgentResponse(
            request_id="o-late:1:ship-order",
            instance_id="o-late:1",
            outcome=AgentOutcome.FAILED,
            detail="a failure that arrives after the order completed",
        )
        stray = AgentResponse(
            request_id="o-ghost:1:reserve-stock",
            instance_id="o-ghost:1",
            outcome=AgentOutcome.SUCCEEDED,
        )
        await e2e.send(AGENT_RESPONSES, to_json(failure), message_id=failure.message_id)
        await e2e.send(AGENT_RESPONSES, to_json(failure), message_id="o-late:resent-by-hand")
        await e2e.send(AGENT_RESPONSES, to_json(stray), message_id=stray.message_id)
        await eventually(
            lambda: (
                "late agent response dropped instance.id=o-late:1" in caplog.text
                and "late agent response dropped instance.id=o-ghost:1" in caplog.text
            ),
            "the response resent by hand and the stray one dropped",
        )
        await e2e.drained(AGENT_RESPONSES, "every resend settled or removed")

        assert _invocations(caplog, RESPONSE_FUNCTION) == 6, "the duplicate never arrived"
        assert caplog.text.count("late agent response dropped") == 2
        assert await e2e.record("o-ghost") is None
        after = await e2e.record("o-late")
        assert after == completed
        assert after is not None
        assert after.etag == completed.etag, "the record was not written at all"
        assert await e2e.pending(AGENT_RESPONSES, dead_letters=True) == []
        assert await e2e.pending(REPLIES) == [], "no `failed` status followed the completion"
        assert await e2e.pending(ALERTS) == []
        for service in STEP_SERVICES:
            [done] = e2e.pipeline.services.ledger_entries(service, "o-late")
            assert done.role is Role.ACTION, "nothing was undone"


async def test_e1_the_activity_shaped_agent_needs_no_agent_queue(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """E1: with AGENT_TRANSPORT=activity the same order completes, each step's agent running
    inside the activity that begins the step, and nothing is sent on any agent queue."""
    caplog.set_level(logging.DEBUG, logger="devhost.invocation")
    async with running_pipeline(tmp_path, settings={"AGENT_TRANSPORT": "activity"}) as e2e:
        await e2e.submit(order_body("o-activity"), message_id="o-activity")

        replies = await e2e.statuses("o-activity", "completed")

        assert _trail(replies) == COMPLETED_IN_ATTEMPT_1
        instance = await e2e.finished_instance("o-activity:1")
        assert scheduled_activities(instance).count(RUN_STEP) == 3
        sent = e2e.app_sent()
        for queue in (*AGENT_REQUESTS, AGENT_RESPONSES):
            assert sent[queue] == 0, f"a message went to {queue}"
        for function in (*STEP_AGENT_FUNCTIONS, RESPONSE_FUNCTION):
            assert _invocations(caplog, function) == 0, f"{function} ran"
        for service in STEP_SERVICES:
            assert len(e2e.pipeline.services.ledger_entries(service, "o-activity")) == 1
        record = await e2e.record("o-activity")
        assert record is not None
        assert record.process_state is ProcessState.PROCESSED


def _begin_first_step(order_id: str, attempt: int) -> Any:
    """The first write of an attempt as the orchestration calls it (D6: its own deadline)."""
    now = bootstrap.now()
    return to_data(
        StepWrite(
            order_id,
            attempt,
            now,
            step=Step(0, DEFAULT_ORDER_STEPS[0]),
            complete_by=now + dt.timedelta(minutes=5),
        )
    )


def _claimed(order_id: str, *, locked_attempt: int) -> None:
    """A Processing record of `order_id` whose lock belongs to attempt `locked_attempt`."""
    app = bootstrap.services()
    now = bootstrap.now()
    created = app.states.create(new_record(order_id, None, now, DEFAULT_ORDER_STEPS)).record
    claimed = app.states.replace(
        claim(created, now=now, claim_deadline=now + dt.timedelta(minutes=5))
    )
    if locked_attempt != claimed.attempt:
        app.states.replace(
            dataclasses.replace(
                claimed, attempt=locked_attempt, locked_by=f"{order_id}:{locked_attempt}"
            )
        )
    bootstrap.services().orders.create(_order(order_id))


def _order(order_id: str) -> Order:
    return Order.from_document(json.loads(order_body(order_id)))


async def test_e4_c8_the_write_that_begins_a_step_run_twice_sends_the_agent_one_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A retried first write of an attempt (C8) sends the same request again with the same
    MessageId: duplicate detection keeps one, so the agent works once (E4)."""
    caplog.set_level(logging.DEBUG, logger="devhost.invocation")
    async with running_pipeline(tmp_path, settings=NEVER_ON_ITS_OWN) as e2e:
        await asyncio.to_thread(_claimed, "o-begin", locked_attempt=1)
        call = _begin_first_step("o-begin", 1)

        first = from_data(await e2e.pipeline.host.invoke(BEGIN_STEP, call), StepWritten)
        again = from_data(await e2e.pipeline.host.invoke(BEGIN_STEP, call), StepWritten)

        assert first.applied
        assert again.applied
        assert first.request is not None
        assert first.request == again.request
        assert first.request.request_id == "o-begin:1:reserve-stock"
        assert e2e.app_sent()[STOCK_REQUESTS] == 2, "both runs sent"
        await e2e.drained(STOCK_REQUESTS, "the agent took its request")
        await e2e.drained(AGENT_RESPONSES, "the agent's answer was consumed")
        assert _invocations(caplog, "stock_agent") == 1
        assert len(e2e.pipeline.services.ledger_entries("stock", "o-begin")) == 1


async def test_d4_the_write_that_begins_a_step_of_a_stale_attempt_sends_no_request(
    tmp_path: Path,
) -> None:
    """When the record's lock belongs to a later attempt, the write that would begin its
    first step writes nothing and the agent is not asked (D4): a stale attempt starts no
    work."""
    async with running_pipeline(tmp_path, settings=NEVER_ON_ITS_OWN) as e2e:
        await asyncio.to_thread(_claimed, "o-behind", locked_attempt=2)
        before = await e2e.record("o-behind")
        call = _begin_first_step("o-behind", 1)

        written = from_data(await e2e.pipeline.host.invoke(BEGIN_STEP, call), StepWritten)

        assert (written.applied, written.request) == (False, None)
        assert e2e.app_sent()[STOCK_REQUESTS] == 0
        assert await e2e.record("o-behind") == before
        assert await e2e.pending(STOCK_REQUESTS) == []
