"""The remote services the agents wrap, one `ServiceApi` declaration each (E1): `STEP_SERVICES`.

Each agent wraps the one service its step declaration names (domain/workflow.py): ``stock``,
``payment``, ``shipping``.
"""

from __future__ import annotations

from typing import Any

from domain.contracts import Order
from order_agents.service_client import ServiceApi, items_of

UNIT_PRICE_CENTS = 100
"""The order contract carries no prices; the sample charges one currency unit per item."""


def payment_of(order: Order) -> dict[str, Any]:
    """A charge names an amount and a currency only: never card or personal data (C3)."""
    quantity = sum(item.quantity for item in order.items)
    return {"amount": quantity * UNIT_PRICE_CENTS, "currency": order.currency}


STEP_SERVICES: dict[str, ServiceApi] = {
    "stock": ServiceApi("stock", "reservations", "reservationId", "release", items_of),
    "payment": ServiceApi("payment", "payments", "paymentId", "refund", payment_of),
    "shipping": ServiceApi("shipping", "shipments", "shipmentId", "cancel", items_of),
}
"""The service of each step agent, by agent name."""
