"""HTTP client of the remote fulfilment service (the service the agent wraps, E1).

It maps every answer to one of four results the agent's policy understands: fulfilled,
a non-transient failure (E8), a newer attempt holds the order (the fencing token was refused,
E7), or a transient fault worth retrying (E9). Timeouts and connection errors are transient:
the request may or may not have been performed, which the idempotency key makes harmless.

The service's address is the FULFILMENT_SERVICE_URL setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from domain.contracts import Order


@dataclass(frozen=True)
class Fulfilled:
    fulfilment_id: str
    replayed: bool


@dataclass(frozen=True)
class PermanentFailure:
    reason: str


@dataclass(frozen=True)
class Superseded:
    reason: str


@dataclass(frozen=True)
class TransientFailure:
    reason: str


RemoteResult = Fulfilled | PermanentFailure | Superseded | TransientFailure


class FulfilmentClient:
    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self._base_url = base_url.rstrip("/")
        self._session = session

    async def fulfil(
        self, order: Order, *, attempt: int, idempotency_key: str, timeout_seconds: float
    ) -> RemoteResult:
        body = {
            "orderId": order.order_id,
            "attempt": attempt,
            "items": [{"sku": item.sku, "quantity": item.quantity} for item in order.items],
        }
        try:
            async with self._session.post(
                f"{self._base_url}/fulfilments",
                json=body,
                headers={"Idempotency-Key": idempotency_key},
                timeout=aiohttp.ClientTimeout(total=timeout_seconds),
            ) as response:
                answer = await _json(response)
                return _result(response.status, answer)
        except TimeoutError:
            return TransientFailure(f"no answer within {timeout_seconds:.1f}s")
        except aiohttp.ClientError as error:
            return TransientFailure(f"cannot reach the fulfilment service: {error}")


async def _json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        answer = await response.json(content_type=None)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _result(status: int, answer: dict[str, Any]) -> RemoteResult:
    if status in (200, 201) and answer.get("fulfilmentId"):
        return Fulfilled(str(answer["fulfilmentId"]), bool(answer.get("replayed")))
    error = str(answer.get("error", f"HTTP {status}"))
    message = str(answer.get("message", ""))
    if status == 409:
        return Superseded(f"{error}: {message}".strip(": "))
    if status in (400, 404, 422):
        return PermanentFailure(f"{error}: {message}".strip(": "))
    return TransientFailure(f"{error} (HTTP {status})")
