"""The workflow's payloads cross the Durable Functions boundary as JSON through one codec
(D6, C1, C7, C10): histories keep them, so what one run wrote reads back the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from adapters.codec import PayloadError, from_data, to_data
from domain.agent_messages import AgentOutcome, AgentRequest, AgentResponse
from domain.contracts import Order, OrderItem
from domain.policies import Timeouts
from domain.workflow import Step
from orchestrators.payloads import Attempt, StepWrite, StepWritten

AT = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
ORDER = Order("o-1", "c-1", (OrderItem("s-1", 2),), "EUR")
TIMEOUTS = Timeouts(claim_seconds=60, step_seconds=30, compensation_seconds=60)


def through_json(value: object) -> object:
    """What a history keeps of `value`: its JSON text, read back."""
    return json.loads(json.dumps(to_data(value)))


def test_a_step_write_reads_back_from_its_json_unchanged() -> None:
    write = StepWrite(
        order_id="o-1",
        attempt=2,
        at=AT,
        step=Step(1, "charge-payment"),
        done=Step(0, "reserve-stock", "res-1"),
        order=ORDER,
        complete_by=AT,
    )
    assert from_data(through_json(write), StepWrite) == write


def test_a_step_answer_carries_the_order_inside_its_request_and_the_agents_response() -> None:
    request = AgentRequest("o-1:1", "charge-payment", ORDER, AT)
    response = AgentResponse(request.request_id, "o-1:1", AgentOutcome.SUCCEEDED, reference="p")
    written = StepWritten(applied=True, request=request, response=response)
    restored = from_data(through_json(written), StepWritten)
    assert restored == written
    assert restored.request is not None
    assert restored.request.order == ORDER


def test_an_attempt_to_undo_reads_back_with_its_steps_in_order_c1() -> None:
    attempt = Attempt(
        order_id="o-1",
        attempt=3,
        steps=("reserve-stock", "charge-payment"),
        agent_transport="activity",
        timeouts=TIMEOUTS,
        resume_at=2,
        undo=(Step(1, "charge-payment", "pay-1"), Step(0, "reserve-stock", "res-1")),
    )
    assert from_data(through_json(attempt), Attempt) == attempt


def test_a_payload_of_the_wrong_shape_names_the_field_not_its_value() -> None:
    data = through_json(StepWrite(order_id="o-1", attempt=2, at=AT))
    assert isinstance(data, dict)
    with pytest.raises(PayloadError, match=r"Expected `int`, got `str` - at `\$.attempt`") as error:
        from_data({**data, "attempt": "secret-value"}, StepWrite)
    assert "secret-value" not in str(error.value)
