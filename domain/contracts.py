"""Public message contracts of contracts.md: submission, status and operator alert (S1-S3, R1, R2).

`parse_submission` gives a `Submission` (the typed `Order` and its allow-listed reply queue)
or an `InvalidSubmission` whose reason names the field or bound it breaks, for the
dead-letter queue (S3). `Order.immutable_data` is what S2 compares. `status_message` and
`operator_alert` build messages with their stable message ids (R2, E4).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from domain.records import ORDER_ID_PATTERN, format_utc

SUBMISSION_SCHEMA_VERSION = 1
STATUS_SCHEMA_VERSION = 1
ALERT_SCHEMA_VERSION = 1

MAX_BODY_BYTES = 65_536
"""The most UTF-8 bytes a submission body may have (the largest valid order is ~30 KB)."""
MAX_ITEMS = 100
MAX_QUANTITY = 1_000_000
"""Well inside the integers JSON stores exactly everywhere (|n| <= 2**53 - 1)."""
MAX_CUSTOMER_ID_LENGTH = 128
MAX_SKU_LENGTH = 64
_CURRENCY_PATTERN = re.compile(r"[A-Z]{3}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_SUBMISSION_FIELDS = frozenset({"schemaVersion", "orderId", "customerId", "items", "currency"})
_ITEM_FIELDS = frozenset({"sku", "quantity"})


def encode_json(value: Mapping[str, Any]) -> str:
    """The one JSON codec for message bodies and stored documents: compact, key-sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def decode_json(text: str | bytes) -> Any:
    return json.loads(text)


@dataclass(frozen=True)
class OrderItem:
    sku: str
    quantity: int


@dataclass(frozen=True)
class Order:
    """The order as submitted. Immutable: S2 accepts an existing copy only if it is equal."""

    order_id: str
    customer_id: str
    items: tuple[OrderItem, ...]
    currency: str

    def immutable_data(self) -> dict[str, Any]:
        """The submission body minus `schemaVersion` (contracts.md): what S2 compares."""
        return {
            "orderId": self.order_id,
            "customerId": self.customer_id,
            "items": [{"sku": item.sku, "quantity": item.quantity} for item in self.items],
            "currency": self.currency,
        }

    def body_hash(self) -> str:
        """SHA-256 (hex) of `immutable_data` in the one JSON codec: what the state record
        keeps to compare a resend with once the order document is gone (S2, S3, C3)."""
        return hashlib.sha256(encode_json(self.immutable_data()).encode("utf-8")).hexdigest()

    def to_document(self) -> dict[str, Any]:
        """The orders-database document: the immutable data keyed by `id` = OrderID."""
        return {
            "id": self.order_id,
            "OrderID": self.order_id,
            "SchemaVersion": SUBMISSION_SCHEMA_VERSION,
            **self.immutable_data(),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Order:
        parsed = _parse_order_fields(document)
        if isinstance(parsed, str):
            raise ValueError(f"stored order {document.get('id')!r} is malformed: {parsed}")
        return parsed


@dataclass(frozen=True)
class Submission:
    """A valid submission message: the order and the reply queue it named (R1)."""

    order: Order
    reply_to: str | None


@dataclass(frozen=True)
class InvalidSubmission:
    """A message that must be dead-lettered (S3); `order_id` when one could be read."""

    reason: str
    order_id: str | None


def parse_submission(
    body: str | bytes, reply_to: str | None, reply_queues: frozenset[str]
) -> Submission | InvalidSubmission:
    """Validate a submission message (contracts.md) and the reply queue it names (R1)."""
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        return InvalidSubmission(
            f"body is {size} bytes, more than the {MAX_BODY_BYTES} a submission may have", None
        )
    try:
        document = decode_json(body.decode("utf-8") if isinstance(body, bytes) else body)
    except UnicodeDecodeError as error:
        return InvalidSubmission(f"body is not UTF-8 (byte {error.start})", None)
    except (ValueError, RecursionError) as error:
        # JSONDecodeError, an integer literal past Python's digit limit, or nesting too deep
        return InvalidSubmission(f"body is not valid JSON: {str(error)[:200]}", None)
    if not isinstance(document, dict):
        return InvalidSubmission(f"body must be a JSON object, got {type(document).__name__}", None)
    raw_order_id = document.get("orderId")
    order_id = (
        raw_order_id
        if isinstance(raw_order_id, str) and ORDER_ID_PATTERN.fullmatch(raw_order_id)
        else None
    )
    version = document.get("schemaVersion")
    if type(version) is not int or version != SUBMISSION_SCHEMA_VERSION:
        got = f"{version}" if type(version) is int and abs(version) < 10**6 else _kind(version)
        return InvalidSubmission(
            f"unknown schemaVersion {got}; this app accepts {SUBMISSION_SCHEMA_VERSION}",
            order_id,
        )
    unknown = sorted(set(document) - _SUBMISSION_FIELDS)
    if unknown:
        return InvalidSubmission(f"unknown fields {_names(unknown)} in schemaVersion 1", order_id)
    parsed = _parse_order_fields(document, bounded=True)
    if isinstance(parsed, str):
        return InvalidSubmission(parsed, order_id)
    if reply_to is not None and reply_to not in reply_queues:
        return InvalidSubmission(
            "reply_to is not an allow-listed reply queue (REPLY_QUEUES)", order_id
        )
    return Submission(parsed, reply_to)


def _parse_order_fields(document: Mapping[str, Any], *, bounded: bool = False) -> Order | str:
    """The typed order, or a reason naming the first field that breaks the schema.

    `bounded` applies the bounds of contracts.md to a submission; a stored order (accepted
    before a bound existed, C7) is read with its types checked only.
    """
    order_id = document.get("orderId")
    if not isinstance(order_id, str) or not ORDER_ID_PATTERN.fullmatch(order_id):
        return (
            "orderId must be 1-64 characters of [A-Za-z0-9._-], not '.' or '..', "
            f"got {_kind(order_id)}"
        )
    customer_id = document.get("customerId")
    problem = _text_field_problem("customerId", customer_id, MAX_CUSTOMER_ID_LENGTH, bounded)
    if problem is not None:
        return problem
    currency = document.get("currency")
    if not isinstance(currency, str) or not _CURRENCY_PATTERN.fullmatch(currency):
        return f"currency must be three upper-case letters, got {_kind(currency)}"
    items = document.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        count = len(items) if isinstance(items, list) else type(items).__name__
        return f"items must be a list of 1-{MAX_ITEMS} entries, got {count}"
    parsed_items: list[OrderItem] = []
    max_quantity = MAX_QUANTITY if bounded else None
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            return f"items[{index}] must be an object"
        unknown = sorted(set(item) - _ITEM_FIELDS)
        if unknown:
            return f"items[{index}] has unknown fields {_names(unknown)}"
        sku = item.get("sku")
        problem = _text_field_problem(f"items[{index}].sku", sku, MAX_SKU_LENGTH, bounded)
        if problem is not None:
            return problem
        quantity = item.get("quantity")
        if type(quantity) is not int or quantity < 1:
            return f"items[{index}].quantity must be an integer >= 1, got {_kind(quantity)}"
        if max_quantity is not None and quantity > max_quantity:
            return f"items[{index}].quantity must be at most {max_quantity}"
        parsed_items.append(OrderItem(cast(str, sku), quantity))
    return Order(order_id, cast(str, customer_id), tuple(parsed_items), currency)


def _text_field_problem(name: str, value: object, max_length: int, bounded: bool) -> str | None:
    if bounded:
        return text_problem(name, value, max_length=max_length)
    if not isinstance(value, str) or not value:
        return f"{name} must be a non-empty string, got {_kind(value)}"
    return None


def text_problem(
    name: str,
    value: object,
    *,
    max_length: int,
    allow_empty: bool = False,
    allow_controls: bool = False,
) -> str | None:
    """Why `value` is not a string a store keeps as it is: not a string, empty (unless
    `allow_empty`), longer than `max_length` characters, or holding a lone surrogate (which
    no UTF-8 store can hold) or a control character (unless `allow_controls`: free text such
    as an error's detail); None when it is one."""
    if not isinstance(value, str):
        return f"{name} must be a string, got {_kind(value)}"
    shortest = 0 if allow_empty else 1
    if not shortest <= len(value) <= max_length:
        return f"{name} must be {shortest}-{max_length} characters, got {len(value)}"
    refused = ("Cs",) if allow_controls else ("Cc", "Cs")
    for character in value:
        if unicodedata.category(character) in refused:
            return (
                f"{name} must hold no control characters or lone surrogates, "
                f"got U+{ord(character):04X}"
            )
    return None


def _kind(value: object) -> str:
    """What a refused value is, never the value itself: a sender's data stays out of reasons,
    logs and alerts (C3); a string is named by its length."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"a string of {len(value)} characters" if value else "an empty string"
    if isinstance(value, int):
        return "an integer"
    return {"dict": "an object", "list": "a list", "float": "a number"}.get(
        type(value).__name__, type(value).__name__
    )


def _names(names: list[str], shown: int = 5) -> str:
    """Field names a sender made up, for a reason: those that read as identifiers, at most
    `shown` of them; any other key might be data (an e-mail address as a key) and is only
    counted."""
    plain = [name for name in names if _IDENTIFIER.fullmatch(name)]
    listed = plain[:shown]
    rest = len(names) - len(listed)
    return f"{listed}" + (f" and {rest} more" if rest else "")


class OrderStatus(StrEnum):
    """`status` of a status message (contracts.md, R2)."""

    RECEIVED = "received"
    IN_PROGRESS = "in-progress"  # a step of the order completed; the body names it
    COMPLETED = "completed"
    FAILED = "failed"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation-failed"
    REJECTED = "rejected"


@dataclass(frozen=True)
class StatusMessage:
    """A status message for the submitting app's reply queue, with its properties (R2).

    `message_id` is `"{orderId}:{status}:{attempt}"`; a status without an attempt (such as
    `received`) renders the attempt as `-`, so the id is still stable across resends.
    """

    queue: str
    body: dict[str, Any]
    message_id: str
    correlation_id: str
    subject: str

    def body_json(self) -> str:
        return encode_json(self.body)


def status_message(
    *,
    queue: str,
    order_id: str,
    status: OrderStatus,
    attempt: int | None,
    reason: str | None,
    at: datetime,
    step: str | None = None,
) -> StatusMessage:
    """The status body of contracts.md; `in-progress` names the step that completed, and its
    message id is `"{orderId}:in-progress:{step}"` (one per step, whatever the attempt)."""
    if (status is OrderStatus.IN_PROGRESS) != (step is not None):
        raise ValueError(f"an {status.value} status {'needs' if step is None else 'has no'} step")
    tail = step if step is not None else "-" if attempt is None else attempt
    return StatusMessage(
        queue=queue,
        body={
            "schemaVersion": STATUS_SCHEMA_VERSION,
            "orderId": order_id,
            "status": status.value,
            "attempt": attempt,
            "step": step,
            "reason": reason,
            "at": format_utc(at),
        },
        message_id=f"{order_id}:{status.value}:{tail}",
        correlation_id=order_id,
        subject=status.value,
    )


class AlertKind(StrEnum):
    """`kind` of an operator alert (contracts.md, S3, E8, U2, U4, C2)."""

    ORDER_CONFLICT = "order-conflict"
    ORDER_ERROR = "order-error"
    COMPENSATION_FAILED = "compensation-failed"
    INVALID_MESSAGE = "invalid-message"
    ORDER_OVERDUE = "order-overdue"
    """U2: the supervisor's catch-up found a deadline older than the sweep window."""
    DEAD_LETTER = "dead-letter"
    """S3, E8: a message of a queue the app consumes reached its dead-letter queue; the
    alert adds queue, sequenceNumber, messageId, deadLetterReason, description and
    deliveryCount (services.dead_letters)."""


@dataclass(frozen=True)
class OperatorAlert:
    """An alert for `OPERATOR_ALERTS_QUEUE`; `message_id` is stable so resends de-duplicate."""

    body: dict[str, Any]
    message_id: str

    def body_json(self) -> str:
        return encode_json(self.body)


def operator_alert(
    *,
    kind: AlertKind,
    order_id: str | None,
    reason: str,
    at: datetime,
    attempt: int | None = None,
    message_id: str | None = None,
) -> OperatorAlert:
    """Build an alert; `message_id` defaults to `"{kind}:{orderId}:{attempt}"`.

    Alerts about a message with no readable OrderID pass the broker's message id instead.
    """
    stable_id = (
        message_id or f"{kind.value}:{order_id or '-'}:{'-' if attempt is None else attempt}"
    )
    return OperatorAlert(
        body={
            "schemaVersion": ALERT_SCHEMA_VERSION,
            "kind": kind.value,
            "orderId": order_id,
            "reason": reason,
            "at": format_utc(at),
            "attempt": attempt,
        },
        message_id=stable_id,
    )
