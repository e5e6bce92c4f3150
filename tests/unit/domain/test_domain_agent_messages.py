"""Scheduler <-> agent messages: stable ids, idempotency keys, undo requests, the bounds of a
response, the tries a request carries, through the app's codec as they cross a queue (E3, E4,
E7, C1, C4, C7, S3)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.codec import PayloadError, from_json, to_data, to_json
from domain.agent_messages import (
    MAX_DETAIL_LENGTH,
    AgentMessageError,
    AgentOperation,
    AgentOutcome,
    AgentRequest,
    AgentResponse,
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
    assert from_json(to_json(sent), AgentRequest) == sent


def test_a_request_carries_the_tries_it_may_spend_and_one_sent_without_them_still_reads_c4_c7() -> (
    None
):
    """The body names what the agent may spend of the order's retry budget; a request put on
    a queue before requests carried it reads as one that names none (C7)."""
    body = json.loads(to_json(request(tries=3)))
    assert body["tries"] == 3
    assert from_json(json.dumps(body), AgentRequest).tries == 3
    del body["tries"]
    assert from_json(json.dumps(body), AgentRequest).tries is None
    with pytest.raises(PayloadError, match="tries must be >= 0"):
        from_json(json.dumps({**body, "tries": -1}), AgentRequest)


def test_the_idempotency_key_is_the_same_for_every_attempt_of_a_step_c8() -> None:
    assert request().idempotency_key == request(instance_id="order-5:7").idempotency_key
    assert request().idempotency_key == "order-5:charge-payment"


def test_an_undo_has_its_own_message_id_and_names_the_side_effect_c1() -> None:
    undo = request(operation=AgentOperation.UNDO, reference="pay-9")
    assert undo.message_id == "order-5:2:charge-payment:undo"
    assert undo.message_id != request().message_id
    restored = from_json(to_json(undo), AgentRequest)
    assert (restored.operation, restored.reference) == (AgentOperation.UNDO, "pay-9")


def test_an_unknown_operation_or_schema_version_is_refused_naming_the_field_c7() -> None:
    document = to_data(request())
    with pytest.raises(PayloadError, match=re.escape("$.operation")):
        from_json(to_json({**document, "operation": "explode"}), AgentRequest)
    with pytest.raises(PayloadError, match="schema_version must be 1"):
        from_json(to_json({**document, "schema_version": 2}), AgentRequest)


def test_a_response_answers_its_request_by_id() -> None:
    response = AgentResponse("order-5:2:charge-payment", "order-5:2", AgentOutcome.SUCCEEDED)
    assert response.message_id == "order-5:2:charge-payment:response"
    assert from_json(to_json(response), AgentResponse) == response


def test_an_answer_is_taken_only_for_the_request_it_answers_e3() -> None:
    answer = AgentResponse("o-1:1:charge-payment", "o-1:1", AgentOutcome.SUCCEEDED, reference="p-1")
    assert answer.answering("o-1:1:charge-payment") == answer
    with pytest.raises(AgentMessageError, match="came for request o-1:1:ship-order"):
        answer.answering("o-1:1:ship-order")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"reference": "r" * 257}, "reference must be 0-256 characters, got 257"),
        ({"reference": "r\x00"}, "reference must hold no control characters"),
        ({"detail": "d" * 2_001}, "detail must be 0-2000 characters, got 2001"),
        ({"detail": 7}, "Expected `str | null`, got `int` - at `$.detail`"),
        ({"request_id": 7}, "Expected `str`, got `int` - at `$.request_id`"),
        ({"instance_id": "o-1"}, "instance_id is not of the form"),
        ({"instance_id": "o-1:" + "9" * 17}, "attempt must be at most 9007199254740991"),
        ({"request_id": "r" * 257}, "request_id must be 1-256 characters"),
    ],
)
def test_a_response_past_a_bound_is_refused_naming_the_bound(
    changes: dict[str, object], reason: str
) -> None:
    """A response field that would reach the record (C1) or an alert is bounded, and the
    refusal says which bound (S3)."""
    document: dict[str, Any] = {
        **to_data(AgentResponse("o-1:1:charge-payment", "o-1:1", AgentOutcome.FAILED)),
        **changes,
    }
    with pytest.raises(PayloadError, match=re.escape(reason)):
        from_json(to_json(document), AgentResponse)


def test_a_lone_surrogate_in_a_detail_is_refused() -> None:
    with pytest.raises(AgentMessageError, match="no control characters or lone surrogates"):
        AgentResponse("o-1:1:s", "o-1:1", AgentOutcome.FAILED, detail="lone \ud800")


def test_an_agent_clips_its_detail_to_the_bound() -> None:
    """E8: an agent's own failure detail always fits the bound its response is held to."""
    assert clip_detail(None) is None
    assert clip_detail("short") == "short"
    clipped = clip_detail("x" * 5_000)
    assert clipped is not None
    assert len(clipped) == MAX_DETAIL_LENGTH
    assert clip_detail("a\ud800b") == "a?b"


def test_json_the_parser_cannot_take_is_a_payload_error() -> None:
    """S3: nesting too deep or a body that is not JSON is refused, never raised."""
    for text in ('{"unknown": ' + "[" * 50_000, "{not json"):
        with pytest.raises(PayloadError, match="AgentResponse: the body is not JSON"):
            from_json(text, AgentResponse)
