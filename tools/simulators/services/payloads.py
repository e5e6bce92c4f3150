"""Request bodies of the simulated services: the fields every call carries and what each action
needs, validated before anything is decided (E7: the attempt is the fencing token; C3: a charge
carries a reference to money, never card or personal data).

Every action body is ``{"orderId": str, "attempt": int >= 1, ...what the action needs}``:
- items (reserve, ship): ``"items": [{"sku": str, "quantity": int >= 1}, ...]``, 1-100
  entries, as in the submission message;
- money (charge): ``"amount": int >= 1`` in minor units (cents) and ``"currency"``, three
  upper-case letters; any other field is refused, so no card data can reach the service.

A compensation body is ``{"attempt": int >= 1}``: the resource id in the path names the rest.
A compensation by idempotency key (C1) has ``{"orderId": str, "attempt": int >= 1}``: the key
names the action, which may never have been performed, so the order is named for its fence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

MAX_ITEMS = 100
MAX_AMOUNT = 10**12
_ORDER_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_CURRENCY = re.compile(r"[A-Z]{3}")


class InvalidRequest(ValueError):
    """A request body the service refuses with 400; the message names the bad field."""


@dataclass(frozen=True)
class PayloadShape:
    """What an action needs besides the order and the attempt.

    ``parse`` turns a request body into the payload, a JSON object of exactly ``fields``; two
    requests are the same request when their order and payloads are equal (E7, C8).
    """

    fields: tuple[str, ...]
    parse: Callable[[Mapping[str, Any]], dict[str, Any]]


def order_id(body: Mapping[str, Any]) -> str:
    value = body.get("orderId")
    if not isinstance(value, str) or not _ORDER_ID.fullmatch(value):
        raise InvalidRequest(f"orderId must be 1-64 characters of [A-Za-z0-9._-], got {value!r}")
    return value


def attempt(body: Mapping[str, Any]) -> int:
    value = body.get("attempt")
    if not is_int(value) or value < 1:
        raise InvalidRequest(f"attempt must be an integer >= 1 (the fencing token), got {value!r}")
    return value


def _items(body: Mapping[str, Any]) -> dict[str, Any]:
    items = body.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        raise InvalidRequest(f"items must be a list of 1-{MAX_ITEMS} entries")
    parsed = []
    for position, item in enumerate(items):
        sku = item.get("sku") if isinstance(item, dict) else None
        quantity = item.get("quantity") if isinstance(item, dict) else None
        if not isinstance(sku, str) or not sku or not is_int(quantity) or quantity < 1:
            raise InvalidRequest(
                f"items[{position}] must be {{'sku': non-empty str, 'quantity': int >= 1}}, "
                f"got {item!r}"
            )
        parsed.append({"sku": sku, "quantity": quantity})
    return {"items": parsed}


_MONEY_BODY_FIELDS = frozenset({"orderId", "attempt", "amount", "currency"})


def _money(body: Mapping[str, Any]) -> dict[str, Any]:
    unexpected = sorted(set(body) - _MONEY_BODY_FIELDS)
    if unexpected:
        raise InvalidRequest(
            f"a charge takes only {sorted(_MONEY_BODY_FIELDS)}: a reference to money, no card "
            f"or personal data; remove {unexpected}"
        )
    amount = body.get("amount")
    if not is_int(amount) or not 1 <= amount <= MAX_AMOUNT:
        raise InvalidRequest(
            f"amount must be an integer of minor units (cents) in [1, {MAX_AMOUNT}], got {amount!r}"
        )
    currency = body.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise InvalidRequest(f"currency must be three upper-case letters, got {currency!r}")
    return {"amount": amount, "currency": currency}


ITEMS = PayloadShape(("items",), _items)
MONEY = PayloadShape(("amount", "currency"), _money)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
