"""HTTP client of the remote services the agents wrap (E1, E7, E8, E9, C1, C8): `ServiceClient`.

Given a `ServiceApi`, one client serves every service. Each answer becomes `Done`,
`PermanentFailure` (E8), `Superseded` (a newer attempt holds the order, E7) or
`TransientFailure` (E9); a timeout or connection error is transient, as the idempotency key
makes a repeat harmless (C8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from opentelemetry.trace import SpanKind

from domain.contracts import Order
from observability.tracing import inject, order_span


@dataclass(frozen=True)
class Done:
    """The service performed (or undid) the side effect, now or on an earlier try."""

    reference: str | None


@dataclass(frozen=True)
class PermanentFailure:
    reason: str


@dataclass(frozen=True)
class Superseded:
    reason: str


@dataclass(frozen=True)
class TransientFailure:
    reason: str


RemoteResult = Done | PermanentFailure | Superseded | TransientFailure


@dataclass(frozen=True)
class ServiceApi:
    """What an agent's remote service calls its side effects."""

    name: str
    collection: str
    """Path of the side effects under the service's base URL: ``reservations``."""
    id_field: str
    """The id the service gives a side effect in its answers: ``reservationId``."""
    undo: str
    """The undo's path segment: ``release``."""
    action_body: Callable[[Order], dict[str, Any]]
    """What the action needs beyond the order id and the attempt."""


def items_of(order: Order) -> dict[str, Any]:
    return {"items": [{"sku": item.sku, "quantity": item.quantity} for item in order.items]}


class ServiceClient:
    def __init__(self, api: ServiceApi, base_url: str, session: aiohttp.ClientSession) -> None:
        self._api = api
        self._base_url = base_url.rstrip("/")
        self._session = session

    async def perform(
        self, order: Order, *, attempt: int, idempotency_key: str, timeout_seconds: float
    ) -> RemoteResult:
        body = {"orderId": order.order_id, "attempt": attempt, **self._api.action_body(order)}
        return await self._post(
            f"{self._base_url}/{self._api.collection}",
            body,
            {"Idempotency-Key": idempotency_key},
            timeout_seconds,
        )

    async def undo(
        self,
        order: Order,
        *,
        reference: str | None,
        attempt: int,
        idempotency_key: str,
        timeout_seconds: float,
    ) -> RemoteResult:
        """Undo the side effect `reference`, or - when its outcome is in doubt (no reference)
        - whatever the action with `idempotency_key` did, if anything; the service then
        refuses that action for good, so a late try cannot perform it after the undo (C1)."""
        collection = f"{self._base_url}/{self._api.collection}"
        if reference is not None:
            # The reference came back from the service through a queue: encoded, it stays
            # one path segment and cannot name another path of the service's host.
            return await self._post(
                f"{collection}/{quote(reference, safe='')}/{self._api.undo}",
                {"attempt": attempt},
                {},
                timeout_seconds,
            )
        return await self._post(
            f"{collection}/by-key/{self._api.undo}",
            {"orderId": order.order_id, "attempt": attempt},
            {"Idempotency-Key": idempotency_key},
            timeout_seconds,
        )

    async def _post(
        self, url: str, body: dict[str, Any], headers: dict[str, str], timeout_seconds: float
    ) -> RemoteResult:
        with order_span(
            f"{self._api.name} POST", order_id=body.get("orderId"), kind=SpanKind.CLIENT
        ) as span:
            span.set_attribute("http.request.method", "POST")
            span.set_attribute("url.full", url)
            result = await self._send(url, body, inject(headers), timeout_seconds)
            span.set_attribute("outcome", type(result).__name__)
            return result

    async def _send(
        self, url: str, body: dict[str, Any], headers: dict[str, str], timeout_seconds: float
    ) -> RemoteResult:
        try:
            async with self._session.post(
                url,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_seconds),
            ) as response:
                return self._result(response.status, await _json(response))
        except TimeoutError:
            return TransientFailure(f"no answer within {timeout_seconds:.1f}s")
        except aiohttp.ClientError as error:
            return TransientFailure(f"cannot reach the {self._api.name} service: {error}")

    def _result(self, status: int, answer: dict[str, Any]) -> RemoteResult:
        if status in (200, 201) and (answer.get(self._api.id_field) or "undone" in answer):
            reference = answer.get(self._api.id_field)
            return Done(None if reference is None else str(reference))
        error = str(answer.get("error", f"HTTP {status}"))
        reason = f"{error}: {answer.get('message', '')}".strip(": ")
        if status == 409:
            return Superseded(reason)
        if status in (400, 404, 422):
            return PermanentFailure(reason)
        return TransientFailure(f"{error} (HTTP {status})")


async def _json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        answer = await response.json(content_type=None)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}
