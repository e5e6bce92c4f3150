"""The simulator's HTTP calls as the tests make them, each with a timeout."""

from typing import Any

import aiohttp

TIMEOUT = aiohttp.ClientTimeout(total=10)


async def post_fulfilment(
    session: aiohttp.ClientSession,
    base_url: str,
    *,
    key: str,
    order_id: str,
    attempt: int,
    items: list[dict[str, Any]],
    client_timeout: aiohttp.ClientTimeout = TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{base_url}/fulfilments",
        json={"orderId": order_id, "attempt": attempt, "items": items},
        headers={"Idempotency-Key": key},
        timeout=client_timeout,
    ) as response:
        return response.status, await response.json()


async def post_cancel(
    session: aiohttp.ClientSession, base_url: str, fulfilment_id: str, attempt: int
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{base_url}/fulfilments/{fulfilment_id}/cancel", json={"attempt": attempt}, timeout=TIMEOUT
    ) as response:
        return response.status, await response.json()
