"""Hypothesis strategies of the messages the app takes in: submissions (valid, broken in one
field, past a bound, or not JSON at all) and agent responses (S1-S3, E3, contracts.md).

Valid documents stay inside the bounds of contracts.md; the broken ones break exactly one
field, often just past its bound (quantity 10**30, 2**53 + 1, a 65-character sku, a lone
surrogate, a control character), and the rest are any JSON value or any bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from domain.agent_messages import (
    AGENT_SCHEMA_VERSION,
    MAX_DETAIL_LENGTH,
    MAX_REFERENCE_LENGTH,
    AgentOutcome,
)
from domain.contracts import (
    MAX_CUSTOMER_ID_LENGTH,
    MAX_ITEMS,
    MAX_QUANTITY,
    MAX_SKU_LENGTH,
)
from domain.records import ORDER_ID_PATTERN

LONE_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
CONTROL_CHARACTERS = st.characters(categories=["Cc"])
PLAIN_CHARACTERS = st.characters(exclude_categories=["Cc", "Cs"])


def plain_text(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    return st.text(PLAIN_CHARACTERS, min_size=min_size, max_size=max_size)


ORDER_IDS = st.from_regex(ORDER_ID_PATTERN, fullmatch=True)
CURRENCIES = st.from_regex(r"[A-Z]{3}", fullmatch=True)


def valid_items() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "sku": plain_text(1, MAX_SKU_LENGTH),
            "quantity": st.integers(1, MAX_QUANTITY),
        }
    )


def valid_documents() -> st.SearchStrategy[dict[str, Any]]:
    """Submission bodies inside every bound of contracts.md."""
    return st.fixed_dictionaries(
        {
            "schemaVersion": st.just(1),
            "orderId": ORDER_IDS,
            "customerId": plain_text(1, MAX_CUSTOMER_ID_LENGTH),
            "items": st.lists(valid_items(), min_size=1, max_size=MAX_ITEMS),
            "currency": CURRENCIES,
        }
    )


JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value (of modest size)."""


def _texts_past_a_bound(max_length: int) -> st.SearchStrategy[Any]:
    """A string field's wrong values: empty, one past its length, holding a control
    character or a lone surrogate, or not a string."""
    return st.one_of(
        st.just(""),
        st.just("x" * (max_length + 1)),
        plain_text(max_length + 1, max_length + 40),
        st.builds(
            lambda a, c, b: a + c + b, plain_text(0, 5), CONTROL_CHARACTERS, plain_text(0, 5)
        ),
        st.builds(lambda a, c, b: a + c + b, plain_text(0, 5), LONE_SURROGATES, plain_text(0, 5)),
        st.integers(),
        st.none(),
        JSON_VALUES.filter(lambda value: not isinstance(value, str)),
    )


WRONG_QUANTITIES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([0, -1, MAX_QUANTITY + 1, 2**53 - 1, 2**53 + 1, 10**30, -(10**30)]),
    st.integers().filter(lambda n: not 1 <= n <= MAX_QUANTITY),
    st.floats(),
    st.booleans(),
    st.text(max_size=5),
    st.none(),
)


@st.composite
def broken_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid document with exactly one field broken: past its bound, of the wrong type,
    missing, or an unknown field added."""
    document = draw(valid_documents())
    items = document["items"]
    index = draw(st.integers(0, len(items) - 1))
    how = draw(
        st.sampled_from(
            [
                "quantity",
                "sku",
                "customerId",
                "orderId",
                "currency",
                "schemaVersion",
                "items",
                "missing",
                "unknown",
                "item-unknown",
            ]
        )
    )
    if how == "quantity":
        items[index]["quantity"] = draw(WRONG_QUANTITIES)
    elif how == "sku":
        items[index]["sku"] = draw(_texts_past_a_bound(MAX_SKU_LENGTH))
    elif how == "customerId":
        document["customerId"] = draw(_texts_past_a_bound(MAX_CUSTOMER_ID_LENGTH))
    elif how == "orderId":
        document["orderId"] = draw(JSON_VALUES.filter(lambda v: v != document["orderId"]))
    elif how == "currency":
        document["currency"] = draw(JSON_VALUES | st.text(max_size=4))
    elif how == "schemaVersion":
        document["schemaVersion"] = draw(JSON_VALUES.filter(lambda v: v != 1 or v is True))
    elif how == "items":
        document["items"] = draw(
            st.just([])
            | st.just([{"sku": "s", "quantity": 1}] * (MAX_ITEMS + 1))
            | JSON_VALUES.filter(lambda v: not isinstance(v, list))
            | st.lists(JSON_VALUES.filter(lambda v: not isinstance(v, dict)), min_size=1)
        )
    elif how == "missing":
        del document[draw(st.sampled_from(sorted(document)))]
    elif how == "unknown":
        document[draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in document))] = draw(
            JSON_VALUES
        )
    else:
        items[index][draw(st.sampled_from(["price", "Sku", "qty"]))] = draw(JSON_VALUES)
    return document


@dataclass(frozen=True)
class Message:
    """A message as the broker delivers it: `document` encoded as JSON (`ascii`: escaping
    every non-ASCII character, so a lone surrogate arrives as a valid `\\udXXX` escape),
    sent as bytes or text; or `raw` bytes that may be no JSON at all."""

    document: Any = None
    raw: bytes | None = None
    ascii: bool = True
    as_bytes: bool = True
    reply_to: str | None = None

    def body(self, document: Any) -> str | bytes:
        if self.raw is not None:
            return self.raw
        text = json.dumps(document, ensure_ascii=self.ascii)
        return text.encode("utf-8", "surrogatepass") if self.as_bytes else text


REPLY_QUEUE = "replies-a"
REPLY_TOS = st.none() | st.just(REPLY_QUEUE) | st.text(max_size=12)


@st.composite
def submissions(draw: st.DrawFn) -> Message:
    """Any submission message: valid, broken in one field, any JSON value, or any bytes."""
    reply_to = draw(REPLY_TOS)
    kind = draw(st.sampled_from(["valid", "valid", "broken", "broken", "json", "bytes", "deep"]))
    if kind == "bytes":
        return Message(raw=draw(st.binary(max_size=200)), reply_to=reply_to)
    if kind == "deep":
        depth = draw(st.integers(500, 100_000))
        return Message(raw=("[" * depth + "]" * depth).encode(), reply_to=reply_to)
    document = draw(
        valid_documents()
        if kind == "valid"
        else broken_documents()
        if kind == "broken"
        else JSON_VALUES
    )
    return Message(
        document=document,
        ascii=draw(st.booleans()),
        as_bytes=draw(st.booleans()),
        reply_to=reply_to,
    )


@st.composite
def agent_response_documents(draw: st.DrawFn, instance_id: str, request_id: str) -> Any:
    """An agent's answer to `request_id`, as the app's codec writes it (snake_case keys):
    well formed (any reference and detail within the bounds), or with one field broken or
    past its bound, or any JSON value."""
    document: dict[str, Any] = {
        "schema_version": AGENT_SCHEMA_VERSION,
        "request_id": request_id,
        "instance_id": instance_id,
        "outcome": draw(st.sampled_from([outcome.value for outcome in AgentOutcome])),
        "detail": draw(st.none() | st.text(max_size=300)),
        "reference": draw(st.none() | plain_text(0, MAX_REFERENCE_LENGTH)),
    }
    kind = draw(st.sampled_from(["valid", "valid", "broken", "json"]))
    if kind == "json":
        return draw(JSON_VALUES)
    if kind == "broken":
        field = draw(st.sampled_from(sorted(document)))
        document[field] = draw(
            st.one_of(
                JSON_VALUES,
                st.just("x" * (MAX_DETAIL_LENGTH + 1)),
                st.just("r" * (MAX_REFERENCE_LENGTH + 1)),
                st.builds(lambda a, c: a + c, plain_text(0, 3), LONE_SURROGATES),
                st.builds(lambda a, c: a + c, plain_text(0, 3), CONTROL_CHARACTERS),
            )
        )
    return document
