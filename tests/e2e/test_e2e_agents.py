"""The agent's two shapes and its responses through the real pipeline (E1, E3, E4, E6, D4).

Over Service Bus, the response-triggered function raises the orchestration's external event;
a response for an instance that has finished is late and is dropped (E3, E6), and a response
resent with the same MessageId never reaches the app (E4, duplicate detection). The request
goes out from ``begin_attempt`` only while the attempt's fence holds (D4), once however often
that activity runs (E4, C8). As an activity, the agent needs no queue at all (E1).
"""

import asyncio
import dataclasses
import datetime as dt
import json
import logging
from pathlib import Path

import pytest

import bootstrap
from domain.agent_messages import AgentOutcome, AgentResponse
from domain.contracts import Order
from domain.records import ProcessState, format_utc
from domain.transitions import claim, new_record
from orchestrators.payloads import StepCall, StepStarted
from tests.e2e.e2e_helpers import (
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    ALERTS,
    REPLIES,
    order_body,
    running_pipeline,
    scheduled_activities,
)
from tests.support.waiting import eventually

RESPONSE_FUNCTION = "receive_agent_response"
NEVER_ON_ITS_OWN = {"STARTER_SCHEDULE": "0 0 0 1 1 *", "SUPERVISOR_SCHEDULE": "0 0 0 1 1 *"}


def _invocations(caplog: pytest.LogCaptureFixture, function: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == "devhost.invocation" and f"function={function} " in r.getMessage()
    )


async def test_e3_e4_late_and_duplicate_responses_change_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """E3, E6: a response sent again by hand for a completed instance (a new MessageId) is
    dropped with no error and no state change, and so is one for an instance that never
    existed. E4: the same response resent with the agent's stable MessageId is removed by
    duplicate detection and never triggers the app."""
    # The capture handler takes the level of the last set_level call: the lower one goes last.
    caplog.set_level(logging.INFO, logger="app.agent_bridge")
    caplog.set_level(logging.DEBUG, logger="devhost.invocation")
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-late"), message_id="o-late")
        await e2e.statuses("o-late", "completed")
        await e2e.drained(AGENT_RESPONSES, "the agent's answer was consumed")
        completed = await e2e.record("o-late")
        assert completed is not None
        assert _invocations(caplog, RESPONSE_FUNCTION) == 1
        failure = AgentResponse(
            request_id="o-late:1:fulfil",
            instance_id="o-late:1",
            outcome=AgentOutcome.FAILED,
            detail="a failure that arrives after the order completed",
        )
        stray = AgentResponse(
            request_id="o-ghost:1:fulfil", instance_id="o-ghost:1", outcome=AgentOutcome.SUCCEEDED
        )

        await e2e.send(AGENT_RESPONSES, failure.to_json(), message_id=failure.message_id)
        await e2e.send(AGENT_RESPONSES, failure.to_json(), message_id="o-late:resent-by-hand")
        await e2e.send(AGENT_RESPONSES, stray.to_json(), message_id=stray.message_id)
        await eventually(
            lambda: (
                "late agent response dropped instance=o-late:1" in caplog.text
                and "late agent response dropped instance=o-ghost:1" in caplog.text
            ),
            "the response resent by hand and the stray one dropped",
        )
        await e2e.drained(AGENT_RESPONSES, "every resend settled or removed")

        assert _invocations(caplog, RESPONSE_FUNCTION) == 3, "the duplicate never arrived"
        assert caplog.text.count("late agent response dropped") == 2
        assert await e2e.record("o-ghost") is None
        after = await e2e.record("o-late")
        assert after == completed
        assert after is not None
        assert after.etag == completed.etag, "the record was not written at all"
        assert await e2e.pending(AGENT_RESPONSES, dead_letters=True) == []
        assert await e2e.pending(REPLIES) == [], "no `failed` status followed the completion"
        assert await e2e.pending(ALERTS) == []


async def test_e1_the_activity_shaped_agent_needs_no_agent_queue(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """E1: with AGENT_TRANSPORT=activity the same order completes, the agent running as an
    activity of the orchestration, and nothing is sent on agent-requests."""
    caplog.set_level(logging.DEBUG, logger="devhost.invocation")
    async with running_pipeline(tmp_path, settings={"AGENT_TRANSPORT": "activity"}) as e2e:
        await e2e.submit(order_body("o-activity"), message_id="o-activity")

        replies = await e2e.statuses("o-activity", "completed")

        assert [(m.body["status"], m.body["attempt"]) for m in replies] == [
            ("received", None),
            ("completed", 1),
        ]
        instance = await e2e.finished_instance("o-activity:1")
        assert "fulfil_in_activity" in scheduled_activities(instance)
        sent = e2e.app_sent()
        assert (sent[AGENT_REQUESTS], sent[AGENT_RESPONSES]) == (0, 0)
        assert _invocations(caplog, "fulfil_order_request") == 0
        assert len(e2e.pipeline.fulfilment.ledger_entries("o-activity")) == 1
        record = await e2e.record("o-activity")
        assert record is not None
        assert record.process_state is ProcessState.PROCESSED


def _claimed(order_id: str, *, locked_attempt: int) -> None:
    """A Processing record of `order_id` whose lock belongs to attempt `locked_attempt`."""
    app = bootstrap.services()
    now = bootstrap.now()
    created = app.states.create(new_record(order_id, None, now)).record
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


async def test_e4_c8_begin_attempt_run_twice_sends_the_agent_one_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A retried begin_attempt (C8) sends the same request again with the same MessageId:
    duplicate detection keeps one, so the agent works once (E4)."""
    caplog.set_level(logging.DEBUG, logger="devhost.invocation")
    async with running_pipeline(tmp_path, settings=NEVER_ON_ITS_OWN) as e2e:
        await asyncio.to_thread(_claimed, "o-begin", locked_attempt=1)
        call = StepCall("o-begin", 1, _at_now(), agent_transport="servicebus").to_dict()

        first = StepStarted.from_dict(await e2e.pipeline.host.invoke("begin_attempt", call))
        again = StepStarted.from_dict(await e2e.pipeline.host.invoke("begin_attempt", call))

        assert first.applied
        assert again.applied
        assert first.request is not None
        assert first.request == again.request
        assert first.request["requestId"] == "o-begin:1:fulfil"
        assert e2e.app_sent()[AGENT_REQUESTS] == 2, "both runs sent"
        await e2e.drained(AGENT_REQUESTS, "the agent took its request")
        await e2e.drained(AGENT_RESPONSES, "the agent's answer was consumed")
        assert _invocations(caplog, "fulfil_order_request") == 1
        assert len(e2e.pipeline.fulfilment.ledger_entries("o-begin")) == 1


async def test_d4_begin_attempt_of_a_stale_attempt_sends_no_request(tmp_path: Path) -> None:
    """When the record's lock belongs to a later attempt, begin_attempt writes nothing and
    the agent is not asked (D4): a stale attempt starts no work."""
    async with running_pipeline(tmp_path, settings=NEVER_ON_ITS_OWN) as e2e:
        await asyncio.to_thread(_claimed, "o-behind", locked_attempt=2)
        before = await e2e.record("o-behind")
        call = StepCall("o-behind", 1, _at_now(), agent_transport="servicebus").to_dict()

        started = StepStarted.from_dict(await e2e.pipeline.host.invoke("begin_attempt", call))

        assert (started.applied, started.request) == (False, None)
        assert e2e.app_sent()[AGENT_REQUESTS] == 0
        assert await e2e.record("o-behind") == before
        assert await e2e.pending(AGENT_REQUESTS) == []


def _at_now() -> str:
    return format_utc(bootstrap.now())
