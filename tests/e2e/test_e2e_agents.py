"""The agent's two shapes and its responses through the real pipeline (E1, E3, E4, E6).

Over Service Bus, the response-triggered function raises the orchestration's external event;
a response for an instance that has finished is late and is dropped (E3, E6), and a response
resent with the same MessageId never reaches the app (E4, duplicate detection). As an activity,
the agent needs no queue at all (E1).
"""

import logging
from pathlib import Path

import pytest

from domain.agent_messages import AgentOutcome, AgentResponse
from domain.records import ProcessState
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
        assert "send_agent_request" not in scheduled_activities(instance)
        sent = e2e.app_sent()
        assert (sent[AGENT_REQUESTS], sent[AGENT_RESPONSES]) == (0, 0)
        assert _invocations(caplog, "fulfil_order_request") == 0
        assert len(e2e.pipeline.fulfilment.ledger_entries("o-activity")) == 1
        record = await e2e.record("o-activity")
        assert record is not None
        assert record.process_state is ProcessState.PROCESSED
