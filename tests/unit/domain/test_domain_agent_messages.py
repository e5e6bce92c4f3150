"""Scheduler <-> agent messages: stable ids, idempotency keys, undo requests, the bounds of a
response (E3, E4, E7, C1, C7, S3)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from domain.agent_messages import (
    MAX_DETAIL_LENGTH,
    AgentMessageError,
    AgentOperation,
    AgentOutcome,
    AgentRequest,
    AgentResponse,
    answered_operation,
    clip_detail,
)
from domain.contracts import Order, OrderItem

DEADLINE = datetime(2026, 9, 1, 10, 0, 30, tzinfo=UTC)
ORDER = Order("order-5", "customer-1", (OrderItem("sku-1", 2),), "EUR")


def request(**changes: object) -> AgentRequest:
    fields: dict[str, object] = {
        "instance_id": "order-5:2",
        "step": "charge-payment",
        "order": ORDER,
        "deadline": DEADLINE,
    }
    fields.update(changes)
    return AgentRequest(**fields)  # type: ignore[arg-type]


def test_a_request_round_trips_with_stable_ids_e4() -> None:
    sent = request()
    assert (sent.request_id, sent.message_id) == ("order-5:2:charge-payment",) * 2
    assert sent.attempt == 2
    assert AgentRequest.from_json(sent.to_json()) == sent


def test_the_idempotency_key_is_the_same_for_every_attempt_of_a_step_c8() -> None:
    assert request().idempotency_key == request(instance_id="order-5:7").idempotency_key
    assert request().idempotency_key == "order-5:charge-payment"


def test_an_undo_has_its_own_message_id_and_names_the_side_effect_c1() -> None:
    undo = request(operation=AgentOperation.UNDO, reference="pay-9")
    assert undo.message_id == "order-5:2:charge-payment:undo"
    assert undo.message_id != request().message_id
    restored = AgentRequest.from_json(undo.to_json())
    assert (restored.operation, restored.reference) == (AgentOperation.UNDO, "pay-9")


def test_a_responses_message_id_tells_a_do_from_an_undo_c1() -> None:
    """Whoever carries a response (a relay, a dead-letter reader) knows from its id alone
    whether it answers a step's action or its compensation."""
    for operation in AgentOperation:
        sent = request(operation=operation)
        answer = AgentResponse(sent.request_id, sent.instance_id, AgentOutcome.SUCCEEDED)
        assert answered_operation(answer.message_id) is operation
    assert answered_operation(request().message_id) is None
    assert answered_operation(None) is None


def test_a_request_without_an_operation_is_a_do_c7() -> None:
    document = request().to_document()
    del document["operation"], document["reference"]
    restored = AgentRequest.from_document(document)
    assert (restored.operation, restored.reference) == (AgentOperation.DO, None)


def test_an_unknown_operation_is_refused() -> None:
    document = {**request().to_document(), "operation": "explode"}
    with pytest.raises(AgentMessageError, match="malformed"):
        AgentRequest.from_document(document)


def test_a_response_answers_its_request_by_id() -> None:
    response = AgentResponse("order-5:2:charge-payment", "order-5:2", AgentOutcome.SUCCEEDED)
    assert response.message_id == "order-5:2:charge-payment:response"
    assert AgentResponse.from_json(response.to_json()) == response


def test_a_one_step_response_names_its_reference_fulfilment_id_c7() -> None:
    document = {
        "schemaVersion": 1,
        "requestId": "order-5:1:fulfil",
        "instanceId": "order-5:1",
        "outcome": "succeeded",
        "fulfilmentId": "ful-3",
    }
    assert AgentResponse.from_document(document).reference == "ful-3"


def test_an_answer_is_taken_only_for_the_request_it_answers_e3() -> None:
    answer = AgentResponse("o-1:1:charge-payment", "o-1:1", AgentOutcome.SUCCEEDED, reference="p-1")
    assert AgentResponse.answering("o-1:1:charge-payment", answer.to_document()) == answer
    with pytest.raises(AgentMessageError, match="came for request o-1:1:ship-order"):
        AgentResponse.answering("o-1:1:ship-order", answer.to_document())


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"reference": "r" * 257}, "reference must be 0-256 characters, got 257"),
        ({"reference": "r\x00"}, "reference must hold no control characters"),
        ({"detail": "d" * 2_001}, "detail must be 0-2000 characters, got 2001"),
        ({"detail": "lone \ud800"}, "detail must hold no control characters or lone"),
        ({"detail": 7}, "detail must be a string"),
        ({"requestId": 7}, "requestId must be a string"),
        ({"instanceId": "o-1"}, "instanceId: instance id 'o-1' is not of the form"),
        ({"instanceId": "o-1:" + "9" * 17}, "attempt must be at most 9007199254740991"),
        ({"requestId": "r" * 257}, "requestId must be 1-256 characters"),
    ],
)
def test_a_response_past_a_bound_is_refused_naming_the_bound(
    changes: dict[str, object], reason: str
) -> None:
    """contracts.md bounds of agent responses: a field that would reach the record (C1) or an
    alert is bounded, and the refusal says which bound (S3)."""
    document = {
        **AgentResponse("o-1:1:charge-payment", "o-1:1", AgentOutcome.FAILED).to_document(),
        **changes,
    }
    with pytest.raises(AgentMessageError, match=re.escape(reason)):
        AgentResponse.from_document(document)


def test_an_agent_clips_its_detail_to_the_bound() -> None:
    """E8: an agent's own failure detail always fits the bound its response is held to."""
    assert clip_detail(None) is None
    assert clip_detail("short") == "short"
    clipped = clip_detail("x" * 5_000)
    assert clipped is not None
    assert len(clipped) == MAX_DETAIL_LENGTH
    assert clip_detail("a\ud800b") == "a?b"


def test_json_the_parser_cannot_take_is_an_agent_message_error() -> None:
    """S3: nesting too deep or an integer past the digit limit is refused, never raised."""
    for text in ("[" * 50_000, '{"schemaVersion": ' + "9" * 5_000 + "}"):
        with pytest.raises(AgentMessageError, match="not JSON"):
            AgentResponse.from_json(text)
