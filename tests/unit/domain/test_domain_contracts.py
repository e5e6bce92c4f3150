"""Submission validation, the S2 comparison data, status messages and alerts (S1-S3, R1, R2)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from domain.contracts import (
    AlertKind,
    InvalidSubmission,
    Order,
    OrderItem,
    OrderStatus,
    Submission,
    encode_json,
    operator_alert,
    parse_submission,
    status_message,
)

NOW = datetime(2026, 6, 1, 8, 30, tzinfo=UTC)
REPLY_QUEUES = frozenset({"replies-a", "replies-b"})


def body(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schemaVersion": 1,
        "orderId": "order-1",
        "customerId": "customer-9",
        "items": [{"sku": "sku-1", "quantity": 2}, {"sku": "sku-2", "quantity": 1}],
        "currency": "EUR",
    }
    document.update(changes)
    return {key: value for key, value in document.items() if value is not ...}


def parse(document: Any, reply_to: str | None = "replies-a") -> Submission | InvalidSubmission:
    return parse_submission(json.dumps(document).encode(), reply_to, REPLY_QUEUES)


def test_a_valid_message_gives_a_typed_order_and_its_reply_queue_s1_r1() -> None:
    parsed = parse(body())
    assert parsed == Submission(
        Order("order-1", "customer-9", (OrderItem("sku-1", 2), OrderItem("sku-2", 1)), "EUR"),
        "replies-a",
    )


def test_reply_to_is_optional() -> None:
    parsed = parse(body(), reply_to=None)
    assert isinstance(parsed, Submission)
    assert parsed.reply_to is None


def test_edges_of_the_schema_are_accepted() -> None:
    edge = body(
        orderId="A" * 64,
        items=[{"sku": f"s{i}", "quantity": 1} for i in range(100)],
    )
    assert isinstance(parse(edge), Submission)
    assert isinstance(parse(body(orderId="a.b_c-D9")), Submission)


INVALID: list[tuple[Any, str]] = [
    (body(schemaVersion=2), "unknown schemaVersion 2"),
    (body(schemaVersion="1"), "unknown schemaVersion a string of 1 characters"),
    (body(schemaVersion=True), "unknown schemaVersion a boolean"),
    (body(schemaVersion=...), "unknown schemaVersion null"),
    (body(extra=1), "unknown fields ['extra']"),
    (body(orderId=...), "orderId must be"),
    (body(orderId=""), "orderId must be"),
    (body(orderId="A" * 65), "orderId must be"),
    (body(orderId="order 1"), "orderId must be"),
    (body(orderId="order:1"), "orderId must be"),
    (body(orderId="."), "not '.' or '..'"),
    (body(orderId=".."), "not '.' or '..'"),
    (body(orderId=7), "orderId must be"),
    (body(customerId=""), "customerId must be"),
    (body(customerId=None), "customerId must be"),
    (body(currency="eur"), "currency must be three upper-case letters"),
    (body(currency="EURO"), "currency must be three upper-case letters"),
    (body(currency=None), "currency must be three upper-case letters"),
    (body(items=[]), "items must be a list of 1-100 entries, got 0"),
    (body(items=[{"sku": "s", "quantity": 1}] * 101), "got 101"),
    (body(items="sku-1"), "items must be a list"),
    (body(items=["sku-1"]), "items[0] must be an object"),
    (body(items=[{"sku": "s", "quantity": 0}]), "items[0].quantity must be an integer >= 1"),
    (body(items=[{"sku": "s", "quantity": 1.5}]), "items[0].quantity"),
    (body(items=[{"sku": "s", "quantity": True}]), "items[0].quantity"),
    (body(items=[{"sku": "s", "quantity": "2"}]), "items[0].quantity"),
    (body(items=[{"sku": "s", "quantity": 1}, {"quantity": 1}]), "items[1].sku"),
    (body(items=[{"sku": "", "quantity": 1}]), "items[0].sku"),
    (body(items=[{"sku": "s", "quantity": 1, "price": 3}]), "items[0] has unknown fields"),
    (body(items=[{"sku": "s", "quantity": 10**30}]), "items[0].quantity must be at most 1000000"),
    (body(items=[{"sku": "s", "quantity": 2**53 + 1}]), "items[0].quantity must be at most"),
    (body(items=[{"sku": "s" * 65, "quantity": 1}]), "items[0].sku must be 1-64 characters"),
    (body(items=[{"sku": "s\n1", "quantity": 1}]), "items[0].sku must hold no control"),
    (body(customerId="c" * 129), "customerId must be 1-128 characters, got 129"),
    (body(customerId="c\ud800"), "customerId must hold no control characters or lone"),
    ([1, 2], "body must be a JSON object, got list"),
    ("order", "body must be a JSON object, got str"),
]


@pytest.mark.parametrize(("document", "reason"), INVALID)
def test_schema_breaks_are_refused_with_a_reason_that_says_what_is_wrong(
    document: Any, reason: str
) -> None:
    parsed = parse(document)
    assert isinstance(parsed, InvalidSubmission)
    assert reason in parsed.reason


def test_invalid_json_and_invalid_utf8_are_refused() -> None:
    not_json = parse_submission(b"{not json", None, REPLY_QUEUES)
    assert isinstance(not_json, InvalidSubmission)
    assert "not valid JSON" in not_json.reason
    not_utf8 = parse_submission(b"\xff\xfe{}", None, REPLY_QUEUES)
    assert isinstance(not_utf8, InvalidSubmission)
    assert "UTF-8" in not_utf8.reason


def test_bodies_past_the_size_bound_or_beyond_the_json_parser_are_refused_s3() -> None:
    """Bounds of contracts.md: nothing escapes parse_submission as an exception (S3)."""
    huge = json.dumps(body(customerId="c" * 70_000))
    too_big = parse_submission(huge, None, REPLY_QUEUES)
    assert isinstance(too_big, InvalidSubmission)
    assert "more than the 65536 a submission may have" in too_big.reason
    for text in ("[" * 50_000, '{"schemaVersion": ' + "9" * 5_000 + "}"):
        refused = parse_submission(text, None, REPLY_QUEUES)
        assert isinstance(refused, InvalidSubmission)
        assert "not valid JSON" in refused.reason


def test_a_reply_queue_outside_the_allow_list_is_refused_r1() -> None:
    parsed = parse(body(), reply_to="someone-elses-queue")
    assert isinstance(parsed, InvalidSubmission)
    assert "someone-elses-queue" not in parsed.reason
    assert parse_submission(json.dumps(body()), "replies-a", frozenset()) == InvalidSubmission(
        "reply_to is not an allow-listed reply queue (REPLY_QUEUES)", "order-1"
    )


@pytest.mark.parametrize(
    "document",
    [
        body(customerId={"name": "Ada Lovelace", "email": "ada@example.com", "card": "4111"}),
        body(schemaVersion="v" * 60_000),
        body(currency="4111 1111 1111 1111"),
        body(orderId="ada@example.com"),
        body(items=[{"sku": "s", "quantity": 1, "ada@example.com": 1}]),
    ],
    ids=["customer-object", "huge-version", "currency", "order-id", "item-field"],
)
def test_a_reason_names_the_field_and_the_problem_never_the_value_c3(
    document: dict[str, object],
) -> None:
    """Whatever a sender puts in a field, the reason (which becomes the dead-letter
    description, a log line, an alert and a console row) says which field and what is wrong
    with it, never what it holds, and stays short."""
    refused = parse(document)
    assert isinstance(refused, InvalidSubmission)
    for secret in ("Ada", "ada@example.com", "4111", "vvvv"):
        assert secret not in refused.reason
    assert len(refused.reason) <= 200


def test_ids_made_of_dots_elsewhere_are_ordinary() -> None:
    for order_id in ("...", ".a", "a.", "a..b"):
        assert not isinstance(parse(body(orderId=order_id)), InvalidSubmission), order_id


def test_the_order_id_is_kept_when_readable_so_the_alert_can_name_it() -> None:
    parsed = parse(body(currency="eur"))
    assert isinstance(parsed, InvalidSubmission)
    assert parsed.order_id == "order-1"
    unreadable = parse(body(orderId="bad id", currency="eur"))
    assert isinstance(unreadable, InvalidSubmission)
    assert unreadable.order_id is None


def test_immutable_data_is_the_body_minus_schema_version_s2() -> None:
    parsed = parse(body())
    assert isinstance(parsed, Submission)
    expected = body()
    del expected["schemaVersion"]
    assert parsed.order.immutable_data() == expected


def test_orders_differing_in_any_immutable_field_compare_unequal_s2() -> None:
    parsed = [parse(body(**change)) for change in ({}, {"currency": "USD"}, {"customerId": "x"})]
    parsed.append(
        parse(body(items=[{"sku": "sku-2", "quantity": 1}, {"sku": "sku-1", "quantity": 2}]))
    )
    orders = [p.order for p in parsed if isinstance(p, Submission)]
    data = [order.immutable_data() for order in orders]
    assert len(orders) == 4
    assert all(data[0] != other for other in data[1:])


def test_the_body_hash_is_that_of_the_immutable_data_and_tells_orders_apart_s3_c3() -> None:
    """The hash a tombstone keeps (C3): the same for a resend whatever its key order,
    different for any change of an immutable field (S3)."""
    parsed = [parse(body(**change)) for change in ({}, {"currency": "USD"}, {"customerId": "x"})]
    orders = [p.order for p in parsed if isinstance(p, Submission)]
    hashes = [order.body_hash() for order in orders]
    assert len(set(hashes)) == 3
    assert all(len(value) == 64 for value in hashes)
    resent = parse(dict(reversed(list(body().items()))))
    assert isinstance(resent, Submission)
    assert resent.order.body_hash() == hashes[0]


def test_order_document_round_trips() -> None:
    parsed = parse(body())
    assert isinstance(parsed, Submission)
    document = parsed.order.to_document()
    assert document["id"] == document["OrderID"] == "order-1"
    assert Order.from_document(json.loads(encode_json(document))) == parsed.order
    with pytest.raises(ValueError, match="stored order 'order-1' is malformed"):
        Order.from_document({**document, "items": []})


@pytest.mark.parametrize(
    ("status", "attempt", "message_id"),
    [
        (OrderStatus.RECEIVED, None, "order-1:received:-"),
        (OrderStatus.COMPLETED, 2, "order-1:completed:2"),
        (OrderStatus.FAILED, 3, "order-1:failed:3"),
        (OrderStatus.COMPENSATED, 4, "order-1:compensated:4"),
        (OrderStatus.COMPENSATION_FAILED, 4, "order-1:compensation-failed:4"),
        (OrderStatus.REJECTED, None, "order-1:rejected:-"),
    ],
)
def test_status_messages_carry_the_contract_body_and_stable_ids_r2(
    status: OrderStatus, attempt: int | None, message_id: str
) -> None:
    message = status_message(
        queue="replies-a", order_id="order-1", status=status, attempt=attempt, reason=None, at=NOW
    )
    assert message.message_id == message_id
    assert message.correlation_id == "order-1"
    assert message.subject == status.value
    assert message.queue == "replies-a"
    assert json.loads(message.body_json()) == {
        "schemaVersion": 1,
        "orderId": "order-1",
        "status": status.value,
        "attempt": attempt,
        "step": None,
        "reason": None,
        "at": "2026-06-01T08:30:00.000000Z",
    }


def test_an_in_progress_status_names_its_step_once_per_step_r2() -> None:
    message = status_message(
        queue="replies-a",
        order_id="order-1",
        status=OrderStatus.IN_PROGRESS,
        attempt=2,
        reason=None,
        at=NOW,
        step="reserve-stock",
    )
    assert message.message_id == "order-1:in-progress:reserve-stock"
    assert (message.subject, message.body["step"]) == ("in-progress", "reserve-stock")
    with pytest.raises(ValueError, match="needs step"):
        status_message(
            queue="q", order_id="o", status=OrderStatus.IN_PROGRESS, attempt=1, reason=None, at=NOW
        )


def test_operator_alerts_carry_kind_order_reason_and_a_stable_id() -> None:
    alert = operator_alert(
        kind=AlertKind.ORDER_ERROR, order_id="order-1", reason="r", at=NOW, attempt=2
    )
    assert alert.message_id == "order-error:order-1:2"
    assert json.loads(alert.body_json()) == {
        "schemaVersion": 1,
        "kind": "order-error",
        "orderId": "order-1",
        "reason": "r",
        "at": "2026-06-01T08:30:00.000000Z",
        "attempt": 2,
    }
    custom = operator_alert(
        kind=AlertKind.INVALID_MESSAGE, order_id=None, reason="bad", at=NOW, message_id="m-1"
    )
    assert custom.message_id == "m-1"
    assert custom.body["orderId"] is None


def test_alert_kinds_are_the_contract_names() -> None:
    assert {kind.value for kind in AlertKind} >= {
        "order-conflict",
        "order-error",
        "compensation-failed",
        "invalid-message",
    }
