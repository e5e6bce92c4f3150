"""The simulated services' HTTP calls as the tests make them, each with a timeout.

``post_action``, ``post_compensation`` and ``post_compensation_by_key`` call any service
(`simulators.services.SERVICES`) on the root URL of the services' port, with a valid payload of
that service unless told otherwise.
"""

from collections.abc import Mapping
from typing import Any

import aiohttp

from tools.simulators.services import PAYMENT, SHIPPING, STOCK, ServiceDeclaration

TIMEOUT = aiohttp.ClientTimeout(total=10)

ITEMS: list[dict[str, Any]] = [{"sku": "sku-1", "quantity": 2}, {"sku": "sku-2", "quantity": 1}]
PAYLOADS: Mapping[str, Mapping[str, Any]] = {
    STOCK.name: {"items": ITEMS},
    PAYMENT.name: {"amount": 1250, "currency": "EUR"},
    SHIPPING.name: {"items": ITEMS},
}


async def post_action(
    session: aiohttp.ClientSession,
    base_url: str,
    service: ServiceDeclaration,
    order_id: str,
    *,
    attempt: int = 1,
    key: str | None = None,
    payload: Mapping[str, Any] | None = None,
    client_timeout: aiohttp.ClientTimeout = TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    """The service's action; the key defaults to ``{order_id}:{action}``."""
    async with session.post(
        f"{base_url}{service.action_path}",
        json={"orderId": order_id, "attempt": attempt, **(payload or PAYLOADS[service.name])},
        headers={"Idempotency-Key": key or f"{order_id}:{service.action}"},
        timeout=client_timeout,
    ) as response:
        return response.status, await response.json()


async def post_compensation(
    session: aiohttp.ClientSession,
    base_url: str,
    service: ServiceDeclaration,
    resource_id: str,
    attempt: int,
    client_timeout: aiohttp.ClientTimeout = TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{base_url}{service.compensation_path(resource_id)}",
        json={"attempt": attempt},
        timeout=client_timeout,
    ) as response:
        return response.status, await response.json()


async def post_compensation_by_key(
    session: aiohttp.ClientSession,
    base_url: str,
    service: ServiceDeclaration,
    order_id: str,
    attempt: int,
    *,
    key: str | None = None,
    client_timeout: aiohttp.ClientTimeout = TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    """The compensation of the action with ``key``, by default ``post_action``'s key."""
    async with session.post(
        f"{base_url}{service.compensation_by_key_path}",
        json={"orderId": order_id, "attempt": attempt},
        headers={"Idempotency-Key": key or f"{order_id}:{service.action}"},
        timeout=client_timeout,
    ) as response:
        return response.status, await response.json()


async def get_json(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url, timeout=TIMEOUT) as response:
        assert response.status == 200, url
        body: dict[str, Any] = await response.json()
        return body


async def put_faults(
    session: aiohttp.ClientSession, service_url: str, plan: Mapping[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with session.put(f"{service_url}/faults", json=plan, timeout=TIMEOUT) as response:
        return response.status, await response.json()
