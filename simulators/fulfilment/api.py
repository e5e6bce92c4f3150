"""HTTP API of the simulated fulfilment service: the remote service the agents call (E7-E9, C1).

All bodies are JSON. Errors are ``{"error": <code>, "message": <what to do>, ...context}``.

``POST /fulfilments`` with header ``Idempotency-Key`` (required) and body
``{"orderId": str, "attempt": int >= 1, "items": [{"sku": str, "quantity": int >= 1}, ...]}``
- 201 ``{"fulfilmentId", "orderId", "attempt", "replayed": false, "status": "fulfilled"}``:
  performed now.
- 200, same body with ``"replayed": true``: the key was seen with the same orderId and items;
  nothing is performed. The attempt is the fencing token, not part of the request's identity:
  a newer attempt that sends an older attempt's key replays that fulfilment (so keep one key
  per order and step across attempts). ``attempt`` is the attempt that performed it;
  ``status`` becomes ``"cancelled"`` once compensated.
- 409 ``{"error": "stale-attempt", "currentAttempt", ...}``: a newer attempt touched the order.
- 422 ``{"error": "idempotency-key-reuse", ...}``: the key was used for another request.
- 400 ``missing-idempotency-key`` / ``invalid-request``.
``POST /fulfilments/{fulfilmentId}/cancel`` with body ``{"attempt": int >= 1}``: the
compensation (C1), performed once (201) and replayed after (200), fenced like a fulfilment
(409), 404 ``unknown-fulfilment`` for an id never issued.

Faults (see `simulators.fulfilment.faults`) are decided before anything is performed:
503 ``{"error": "transient"}`` with ``Retry-After`` (transient, lost-response), 422
``{"error": "permanent"}``, a delay, or no answer at all (hang).

Inspection and control, never faulted:
- ``GET /ledger[?orderId=X]`` → ``{"entries": [{"sequence", "kind", "orderId", "attempt",
  "idempotencyKey", "fulfilmentId", "at"}, ...]}``, every side effect in order
  (``idempotencyKey`` is null for compensations: a cancel is keyed by its fulfilmentId).
- ``GET /stats`` → ``{"requests", "fulfilments", "compensations", "side_effects_per_order":
  {orderId: {"fulfilment": n, "compensation": n}}, "double_side_effects",
  "stale_writes_refused", "idempotency_key_reuse_refused", "replays",
  "faults_injected": {kind: n}}``; ``requests`` counts fulfil and cancel calls, refused and
  faulted ones included. ``double_side_effects`` is the number of orders fulfilled more than
  once.
- ``GET /faults`` → the current plan; ``PUT /faults`` with a plan replaces it (400 if invalid).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, TypeGuard

from aiohttp import web

from simulators.fulfilment.faults import (
    Fault,
    FaultInjector,
    FaultKind,
    FaultPlan,
    InvalidFaultPlan,
    Operation,
)
from simulators.fulfilment.ledger import Fulfilment, Item, Ledger, LedgerResult, Outcome

log = logging.getLogger("simulators.fulfilment")

MAX_ITEMS = 100
_ORDER_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_MAX_KEY_LENGTH = 256


class InvalidRequest(ValueError):
    """A request body the service refuses with 400; the message names the bad field."""


def error(status: int, code: str, message: str, **context: Any) -> web.Response:
    return web.json_response({"error": code, "message": message, **context}, status=status)


class FulfilmentApi:
    """The aiohttp application over a ledger and a fault injector.

    ``stopping`` is set when the service shuts down: hung and delayed requests then answer 503
    at once instead of holding the shutdown up.
    """

    def __init__(self, ledger: Ledger, faults: FaultInjector, stopping: asyncio.Event) -> None:
        self.ledger = ledger
        self.faults = faults
        self._stopping = stopping
        self._requests = 0
        self.app = web.Application()
        self.app.add_routes(
            [
                web.post("/fulfilments", self.fulfil),
                web.post("/fulfilments/{fulfilment_id}/cancel", self.cancel),
                web.get("/ledger", self.get_ledger),
                web.get("/stats", self.get_stats),
                web.get("/faults", self.get_faults),
                web.put("/faults", self.put_faults),
            ]
        )

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self._requests,
            **self.ledger.stats(),
            "faults_injected": self.faults.injected(),
        }

    async def fulfil(self, request: web.Request) -> web.Response:
        self._requests += 1
        key = request.headers.get("Idempotency-Key", "").strip()
        if not key or len(key) > _MAX_KEY_LENGTH:
            return error(
                400,
                "missing-idempotency-key",
                f"send an Idempotency-Key header of 1-{_MAX_KEY_LENGTH} characters, the same "
                "on every retry of this fulfilment",
            )
        try:
            body = await _json_object(request)
            order_id = _order_id(body)
            attempt = _attempt(body)
            items = _items(body)
        except InvalidRequest as invalid:
            return error(400, "invalid-request", str(invalid))
        fault = self.faults.decide(Operation.FULFIL, order_id, attempt)
        refusal = await self._before_side_effect(fault, order_id, attempt, request.path)
        if refusal is not None:
            return refusal
        result = self.ledger.fulfil(order_id, attempt, items, key)
        response = self._answer(result, order_id, attempt, key)
        return self._after_side_effect(fault, response)

    async def cancel(self, request: web.Request) -> web.Response:
        self._requests += 1
        fulfilment_id = request.match_info["fulfilment_id"]
        try:
            attempt = _attempt(await _json_object(request))
        except InvalidRequest as invalid:
            return error(400, "invalid-request", str(invalid))
        fulfilment = self.ledger.find(fulfilment_id)
        if fulfilment is None:
            return error(
                404,
                "unknown-fulfilment",
                f"no fulfilment {fulfilment_id!r} was ever performed; nothing to cancel",
                fulfilmentId=fulfilment_id,
            )
        fault = self.faults.decide(Operation.CANCEL, fulfilment.order_id, attempt)
        refusal = await self._before_side_effect(fault, fulfilment.order_id, attempt, request.path)
        if refusal is not None:
            return refusal
        result = self.ledger.cancel(fulfilment_id, attempt)
        assert result is not None, "fulfilments are never forgotten"
        response = self._answer(result, fulfilment.order_id, attempt, None)
        return self._after_side_effect(fault, response)

    async def get_ledger(self, request: web.Request) -> web.Response:
        entries = self.ledger.entries(request.query.get("orderId"))
        return web.json_response({"entries": [entry.to_json() for entry in entries]})

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def get_faults(self, request: web.Request) -> web.Response:
        return web.json_response(self.faults.plan.to_json())

    async def put_faults(self, request: web.Request) -> web.Response:
        try:
            plan = FaultPlan.from_json(await _json_object(request))
        except (InvalidRequest, InvalidFaultPlan) as invalid:
            return error(400, "invalid-fault-plan", str(invalid))
        self.faults.replace_plan(plan)
        log.info("fault plan replaced plan=%s", plan.to_json())
        return web.json_response(plan.to_json())

    async def _before_side_effect(
        self, fault: Fault | None, order_id: str, attempt: int, path: str
    ) -> web.Response | None:
        """Apply the faults that come before the side effect; a response means: stop here."""
        if fault is None or fault.kind is FaultKind.LOST_RESPONSE:
            return None
        log.info(
            "fault injected kind=%s orderId=%s attempt=%d path=%s",
            fault.kind,
            order_id,
            attempt,
            path,
        )
        if fault.kind is FaultKind.TRANSIENT:
            return self._unavailable()
        if fault.kind is FaultKind.PERMANENT:
            return error(
                422,
                "permanent",
                f"order {order_id} cannot be fulfilled (simulated business failure); "
                "retrying will not help",
                orderId=order_id,
                attempt=attempt,
            )
        # Hangs wait for shutdown only: a client that gives up disconnects, and the server
        # cancels this handler then (handler cancellation is on).
        delay = None if fault.kind is FaultKind.HANG else fault.delay_seconds
        try:
            await asyncio.wait_for(self._stopping.wait(), delay)
        except TimeoutError:
            return None
        return error(503, "stopping", "the fulfilment service is shutting down; retry later")

    def _after_side_effect(self, fault: Fault | None, response: web.Response) -> web.Response:
        if fault is None or fault.kind is not FaultKind.LOST_RESPONSE:
            return response
        log.info("fault injected kind=%s status_lost=%d", fault.kind, response.status)
        return self._unavailable()

    def _unavailable(self) -> web.Response:
        seconds = self.faults.plan.retry_after_seconds
        response = error(
            503,
            "transient",
            f"the fulfilment service is temporarily unavailable; retry after {seconds}s "
            "with the same Idempotency-Key",
            retryAfterSeconds=seconds,
        )
        response.headers["Retry-After"] = str(seconds)
        return response

    def _answer(
        self, result: LedgerResult, order_id: str, attempt: int, key: str | None
    ) -> web.Response:
        if result.outcome in (Outcome.STALE_ATTEMPT, Outcome.KEY_REUSE):
            log.info(
                "request refused outcome=%s orderId=%s attempt=%d fence=%d idempotencyKey=%s",
                result.outcome,
                order_id,
                attempt,
                result.fence,
                key,
            )
        if result.outcome is Outcome.STALE_ATTEMPT:
            return error(
                409,
                "stale-attempt",
                f"attempt {attempt} of order {order_id} is stale: attempt {result.fence} has "
                "taken over; stop this attempt",
                orderId=order_id,
                attempt=attempt,
                currentAttempt=result.fence,
            )
        assert result.fulfilment is not None, "only stale calls come without a fulfilment"
        if result.outcome is Outcome.KEY_REUSE:
            return error(
                422,
                "idempotency-key-reuse",
                f"Idempotency-Key {key!r} was used for a different request (order "
                f"{result.fulfilment.order_id}); use a new key for a new request",
                idempotencyKey=key,
            )
        replayed = result.outcome is Outcome.REPLAYED
        return web.json_response(
            _fulfilment_json(result.fulfilment, replayed, result.cancelled),
            status=200 if replayed else 201,
        )


def _fulfilment_json(fulfilment: Fulfilment, replayed: bool, cancelled: bool) -> dict[str, Any]:
    return {
        "fulfilmentId": fulfilment.fulfilment_id,
        "orderId": fulfilment.order_id,
        "attempt": fulfilment.attempt,
        "replayed": replayed,
        "status": "cancelled" if cancelled else "fulfilled",
    }


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise InvalidRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def _order_id(body: dict[str, Any]) -> str:
    order_id = body.get("orderId")
    if not isinstance(order_id, str) or not _ORDER_ID.fullmatch(order_id):
        raise InvalidRequest(f"orderId must be 1-64 characters of [A-Za-z0-9._-], got {order_id!r}")
    return order_id


def _attempt(body: dict[str, Any]) -> int:
    attempt = body.get("attempt")
    if not _is_int(attempt) or attempt < 1:
        raise InvalidRequest(
            f"attempt must be an integer >= 1 (the fencing token), got {attempt!r}"
        )
    return attempt


def _items(body: dict[str, Any]) -> tuple[Item, ...]:
    items = body.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        raise InvalidRequest(f"items must be a list of 1-{MAX_ITEMS} entries")
    parsed = []
    for position, item in enumerate(items):
        sku = item.get("sku") if isinstance(item, dict) else None
        quantity = item.get("quantity") if isinstance(item, dict) else None
        if not isinstance(sku, str) or not sku or not _is_int(quantity) or quantity < 1:
            raise InvalidRequest(
                f"items[{position}] must be {{'sku': non-empty str, 'quantity': int >= 1}}, "
                f"got {item!r}"
            )
        parsed.append(Item(sku, quantity))
    return tuple(parsed)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
