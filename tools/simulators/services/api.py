"""HTTP API of one simulated service, the remote service an agent calls (E7-E9, C1, C2, C8).

Every service (`simulators.services.declarations`) serves the same API under its own path
prefix and names; below, the stock service's names with the payment and shipping ones after
them. All bodies are JSON. Errors are
``{"error": <code>, "message": <what to do>, ...context}``.

``POST /stock/reservations`` (``/payment/payments``, ``/shipping/shipments``), the action,
with header ``Idempotency-Key`` (required) and body ``{"orderId": str, "attempt": int >= 1,
...}`` plus what the action needs (`simulators.services.payloads`: items, or amount and
currency):
- 201 ``{"reservationId", "orderId", "attempt", "replayed": false, "status": "reserved"}``
  (``paymentId``/``charged``, ``shipmentId``/``shipped``): performed now.
- 200, same body with ``"replayed": true``: the key was seen with the same orderId and
  payload; nothing is performed. The attempt is the fencing token, not part of the request's
  identity: a newer attempt that sends an older attempt's key replays that resource (so keep
  one key per order and step across attempts). ``attempt`` is the attempt that performed it;
  ``status`` becomes the compensated one (``released``, ``refunded``, ``cancelled``) once
  compensated, or ``dispatched`` for a dispatched shipment.
- 409 ``{"error": "stale-attempt", "currentAttempt", ...}``: a newer attempt touched the order.
- 409 ``{"error": "compensated", "idempotencyKey", "orderId", "attempt", "undoneByAttempt",
  "undoneAt"}``: the key was undone by key before any action with it was performed (below);
  nothing is performed, now or ever, whichever attempt asks.
- 422 ``{"error": "permanent", "message", "orderId", "attempt"}``: declined (a business
  failure, injected as a ``permanent`` fault), nothing performed. The decline is kept with
  the key and attempt (and journaled): every later action with the key from that attempt,
  also after a restart, is declined the same way and performs nothing (the same request gets
  the same answer); it raises the fence, so an older attempt is stale, and only a newer
  attempt (a resubmit, a supervisor's retry) gets a fresh answer.
- 422 ``{"error": "idempotency-key-reuse", ...}``: the key was used for another request.
- 400 ``missing-idempotency-key`` / ``invalid-request``.

``POST /stock/reservations/{id}/release`` (``/payment/payments/{id}/refund``,
``/shipping/shipments/{id}/cancel``), the compensation (C1), with body ``{"attempt": int >=
1}``: keyed by the resource id, performed once (201) and replayed after (200), with the
action's body shape; fenced like the action (409); 404 ``unknown-reservation``
(``unknown-payment``, ``unknown-shipment``) for an id never issued. A dispatched shipment's
cancel: 422 ``{"error": "already-dispatched", "shipmentId", "orderId", "dispatchedAt"}``, for
good (C2).

``POST /stock/reservations/by-key/release`` (``/payment/payments/by-key/refund``,
``/shipping/shipments/by-key/cancel``), the compensation of an action whose outcome is in
doubt (its deadline passed, its answer was lost: no id is known), by its idempotency key (C1,
E7), with header ``Idempotency-Key`` (the action's key, required) and body ``{"orderId": str,
"attempt": int >= 1}``. The order is named because nothing may have been performed: its fence
applies and is raised either way. Never repeat the action to learn its id: if it never
happened, that would perform it after compensation began.
- 201 ``{"reservationId", "orderId", "attempt", "replayed": false, "status": "released",
  "undone": true, "idempotencyKey"}`` (``paymentId``/``refunded``, ...): the action with
  that key was performed and is compensated now, exactly as by its id (``attempt`` is the
  attempt that performed the action).
- 200, same body with ``"replayed": true``: it was compensated already, by id or by key;
  nothing more is performed.
- 200 ``{"idempotencyKey", "orderId", "attempt", "undone": false, "replayed": false,
  "status": "nothing-to-undo"}``: no action with that key was performed (a declined one
  included), and none is. The key
  is now undone for good (a tombstone): every later action with it answers 409 ``compensated``,
  so a request still in flight from an expired attempt performs nothing. Repeats answer the
  same with ``"replayed": true``; ``attempt`` is the first undo's.
- 422 ``already-dispatched`` (as above, plus ``idempotencyKey``): cannot be undone, for good.
- 409 ``stale-attempt``, as for every call; 422 ``idempotency-key-reuse``: the key is another
  order's (its action or its undo); 400 ``missing-idempotency-key`` / ``invalid-request``.
So ``undone`` true (undone), ``undone`` false (nothing was done) and a 422 (cannot be undone)
are told apart by status and body, never by a 404 that any missing route also answers.

Faults (see `simulators.services.faults`) are decided before anything is performed, per
operation (a compensation by key is the compensation's operation: ``release``, ``refund``,
``cancel``): 503 ``{"error": "transient"}`` with ``Retry-After`` (transient, lost-response), 422
``{"error": "permanent"}`` (for an action, a decline the ledger keeps; never for a key already
performed or declined: the ledger answers those), a delay, or no answer at all (hang).

Inspection and control, never faulted, under the same prefix:
- ``GET /ledger[?orderId=X]`` → ``{"entries": [{"sequence", "kind", "orderId", "attempt",
  "idempotencyKey", "reservationId", "at"}, ...], "tombstones": [{"idempotencyKey", "orderId",
  "attempt", "at"}, ...]}``. ``entries`` are every side effect in order, ``at`` the time it was
  performed (``idempotencyKey`` is null for compensations: they are keyed by the resource id,
  even when asked for by key); ``kind`` is the action's or the compensation's side effect:
  ``reservation`` / ``release``, ``payment`` / ``refund``, ``shipment`` / ``cancellation``.
  ``tombstones`` are the keys undone with nothing to undo, ``at`` the time of the undo. At
  this service an order began compensating at its first compensation entry or tombstone,
  whichever came first: where the workflow compensates correctly, none of its actions comes
  after.
- ``GET /stats`` → ``{"requests", "reservations", "releases", "side_effects_per_order":
  {orderId: {"reservation": n, "release": n}}, "double_side_effects",
  "stale_writes_refused", "idempotency_key_reuse_refused", "replays", "tombstones",
  "actions_refused_after_undo", "declines", "declines_replayed", "faults_injected": {kind:
  n}, "faults_injected_by_operation": {operation: {kind: n}}, "faults_injected_times":
  [{"at", "kind", "count"}, ...], "latency_delays": {operation: [seconds, ...]},
  "requests_per_order": {orderId: n}}``,
  with the service's side-effect names (payment: ``payments``, ``refunds``, ``{"payment": n,
  "refund": n}``); shipping adds ``dispatched`` and ``cancellations_refused`` (cancels
  refused as already dispatched). ``requests`` counts action and compensation calls, refused
  and faulted ones included, and ``requests_per_order`` those of them that named their order
  (all but a malformed one or a compensation of an unknown id). ``double_side_effects`` is
  the number of orders whose action was performed more than once. A compensation by key that
  undid an action counts as a compensation (and is one ledger entry); ``tombstones`` counts
  the keys undone with nothing to undo and ``actions_refused_after_undo`` the actions refused
  as ``compensated``; ``declines`` counts the keys declined and ``declines_replayed`` the
  later actions with them, declined again from the ledger (no fault is injected for them).
  ``faults_injected_by_operation`` splits ``faults_injected`` between the service's action and
  its compensation (both always listed, every kind with them); ``faults_injected_times`` are
  the same faults per wall-clock second and kind, oldest first: ``at`` the epoch seconds (UTC)
  of the first of them in that second, ``count`` how many; only the latest day of seconds is
  kept. ``latency_delays`` holds each latency fault's delay, per operation that had one, oldest
  first (the latest 10,000 of each): the service does not know its clients' deadlines, a
  client that does can tell which answers came after them. Like every counter here they
  restart with the process.
- ``GET /faults`` → the current plan; ``PUT /faults`` with a plan replaces it (400 if invalid
  or naming operations or fault kinds the service does not have).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from tools.simulators.services import payloads
from tools.simulators.services.faults import FaultKind, FaultPlan, InvalidFaultPlan
from tools.simulators.services.injector import Fault, FaultInjector
from tools.simulators.services.ledger import Ledger, LedgerResult, Outcome, Resource, Tombstone
from tools.simulators.services.payloads import InvalidRequest

log = logging.getLogger("simulators.services")

_MAX_KEY_LENGTH = 256


def error(status: int, code: str, message: str, **context: Any) -> web.Response:
    return web.json_response({"error": code, "message": message, **context}, status=status)


class ServiceApi:
    """One service's request handlers over its ledger and fault injector.

    ``stopping`` is set when the services shut down: hung and delayed requests then answer 503
    at once instead of holding the shutdown up.
    """

    def __init__(self, ledger: Ledger, faults: FaultInjector, stopping: asyncio.Event) -> None:
        self.service = ledger.service
        self.ledger = ledger
        self.faults = faults
        self._stopping = stopping
        self._requests = 0
        self.held = 0
        """Requests a hang or latency fault holds right now."""

    def routes(self) -> list[web.RouteDef]:
        prefix = self.service.path_prefix
        return [
            web.post(self.service.action_path, self.perform),
            # Before the route by id: "by-key" is never an issued id, but the router must not
            # have to know that.
            web.post(self.service.compensation_by_key_path, self.compensate_by_key),
            web.post(self.service.compensation_path("{resource_id}"), self.compensate),
            web.get(f"{prefix}/ledger", self.get_ledger),
            web.get(f"{prefix}/stats", self.get_stats),
            web.get(f"{prefix}/faults", self.get_faults),
            web.put(f"{prefix}/faults", self.put_faults),
        ]

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self._requests,
            **self.ledger.stats(),
            "faults_injected": self.faults.injected(),
            "faults_injected_by_operation": {
                operation: self.faults.injected(operation)
                for operation in (self.service.action, self.service.compensation)
            },
            "faults_injected_times": self.faults.injected_times(),
            "latency_delays": self.faults.latency_delays(),
            "requests_per_order": self.faults.requests_per_order(),
        }

    def replace_plan(self, plan: FaultPlan) -> None:
        """Use ``plan`` from the next request on; raises InvalidFaultPlan if it does not fit."""
        self.service.check_plan(plan)
        self.faults.replace_plan(plan)
        log.info("fault plan replaced service=%s plan=%s", self.service.name, plan.to_json())

    async def perform(self, request: web.Request) -> web.Response:
        self._requests += 1
        key = _idempotency_key(request)
        if key is None:
            return error(
                400,
                "missing-idempotency-key",
                f"send an Idempotency-Key header of 1-{_MAX_KEY_LENGTH} characters, the same "
                f"on every retry of this {self.service.action_effect}",
            )
        try:
            body = await _json_object(request)
            order_id = payloads.order_id(body)
            attempt = payloads.attempt(body)
            payload = self.service.payload.parse(body)
        except InvalidRequest as invalid:
            return error(400, "invalid-request", str(invalid))
        fault = self.faults.decide(
            self.service.action,
            order_id,
            attempt,
            declinable=not self.ledger.answered(key, attempt),
        )
        refusal = await self._before_side_effect(fault, order_id, attempt, request.path, None)
        if refusal is not None:
            return refusal
        # The ledger declines, so that the key keeps its answer (a concurrent request that
        # performed it first wins: that key is then answered as performed).
        result = self.ledger.perform(
            order_id,
            attempt,
            payload,
            key,
            dispatch=_is(fault, FaultKind.DISPATCHED),
            decline=_is(fault, FaultKind.PERMANENT),
        )
        response = self._answer(result, order_id, attempt, key)
        return self._after_side_effect(fault, response)

    async def compensate(self, request: web.Request) -> web.Response:
        self._requests += 1
        resource_id = request.match_info["resource_id"]
        try:
            attempt = payloads.attempt(await _json_object(request))
        except InvalidRequest as invalid:
            return error(400, "invalid-request", str(invalid))
        resource = self.ledger.find(resource_id)
        if resource is None:
            return error(
                404,
                f"unknown-{self.service.action_effect}",
                f"no {self.service.action_effect} {resource_id!r} was ever performed; nothing "
                f"to {self.service.compensation}",
                **{self.service.id_field: resource_id},
            )
        fault = self.faults.decide(self.service.compensation, resource.order_id, attempt)
        refusal = await self._before_side_effect(
            fault,
            resource.order_id,
            attempt,
            request.path,
            f"{self.service.action_effect} {resource_id} of order {resource.order_id} cannot be "
            f"{self.service.compensated_status} (simulated failure); retrying will not help",
        )
        if refusal is not None:
            return refusal
        result = self.ledger.compensate(
            resource_id,
            attempt,
            dispatch=_is(fault, FaultKind.DISPATCHED),
            dispatch_after_seconds=self.faults.plan.dispatch_after_seconds,
        )
        assert result is not None, "resources are never forgotten"
        response = self._answer(result, resource.order_id, attempt, None)
        return self._after_side_effect(fault, response)

    async def compensate_by_key(self, request: web.Request) -> web.Response:
        self._requests += 1
        key = _idempotency_key(request)
        if key is None:
            return error(
                400,
                "missing-idempotency-key",
                f"send the Idempotency-Key header of the {self.service.action_effect} to "
                f"{self.service.compensation} (1-{_MAX_KEY_LENGTH} characters)",
            )
        try:
            body = await _json_object(request)
            order_id = payloads.order_id(body)
            attempt = payloads.attempt(body)
        except InvalidRequest as invalid:
            return error(400, "invalid-request", str(invalid))
        fault = self.faults.decide(self.service.compensation, order_id, attempt)
        refusal = await self._before_side_effect(
            fault,
            order_id,
            attempt,
            request.path,
            f"the {self.service.action_effect} with Idempotency-Key {key!r} of order {order_id} "
            f"cannot be {self.service.compensated_status} (simulated failure); retrying will "
            "not help",
        )
        if refusal is not None:
            return refusal
        result = self.ledger.compensate_by_key(
            order_id,
            attempt,
            key,
            dispatch=_is(fault, FaultKind.DISPATCHED),
            dispatch_after_seconds=self.faults.plan.dispatch_after_seconds,
        )
        response = self._answer(result, order_id, attempt, key, by_key=True)
        return self._after_side_effect(fault, response)

    async def get_ledger(self, request: web.Request) -> web.Response:
        order_id = request.query.get("orderId")
        entries = self.ledger.entries(order_id)
        return web.json_response(
            {
                "entries": [entry.to_json(self.service.id_field) for entry in entries],
                "tombstones": [
                    tombstone.to_json() for tombstone in self.ledger.tombstones(order_id)
                ],
            }
        )

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def get_faults(self, request: web.Request) -> web.Response:
        return web.json_response(self.faults.plan.to_json())

    async def put_faults(self, request: web.Request) -> web.Response:
        try:
            plan = FaultPlan.from_json(await _json_object(request), self.service.name)
            self.replace_plan(plan)
        except (InvalidRequest, InvalidFaultPlan) as invalid:
            return error(400, "invalid-fault-plan", str(invalid))
        return web.json_response(plan.to_json())

    async def _before_side_effect(
        self, fault: Fault | None, order_id: str, attempt: int, path: str, permanent: str | None
    ) -> web.Response | None:
        """Apply the faults that come before the side effect; a response means: stop here.
        ``permanent`` is the message of a permanent fault's 422; None when the ledger answers
        it (an action's decline)."""
        if fault is None or fault.kind is FaultKind.LOST_RESPONSE:
            return None
        log.info(
            "fault injected service=%s kind=%s orderId=%s attempt=%d path=%s",
            self.service.name,
            fault.kind,
            order_id,
            attempt,
            path,
        )
        if fault.kind is FaultKind.DISPATCHED:
            return None
        if fault.kind is FaultKind.TRANSIENT:
            return self._unavailable()
        if fault.kind is FaultKind.PERMANENT:
            if permanent is None:
                return None
            return error(422, "permanent", permanent, orderId=order_id, attempt=attempt)
        # Hangs wait for shutdown only: a client that gives up disconnects, and the server
        # cancels this handler then (handler cancellation is on).
        delay = None if fault.kind is FaultKind.HANG else fault.delay_seconds
        self.held += 1
        try:
            await asyncio.wait_for(self._stopping.wait(), delay)
        except TimeoutError:
            return None
        finally:
            self.held -= 1
        return error(
            503, "stopping", f"the {self.service.name} service is shutting down; retry later"
        )

    def _after_side_effect(self, fault: Fault | None, response: web.Response) -> web.Response:
        if not _is(fault, FaultKind.LOST_RESPONSE):
            return response
        log.info(
            "fault injected service=%s kind=%s status_lost=%d",
            self.service.name,
            FaultKind.LOST_RESPONSE,
            response.status,
        )
        return self._unavailable()

    def _unavailable(self) -> web.Response:
        seconds = self.faults.plan.retry_after_seconds
        response = error(
            503,
            "transient",
            f"the {self.service.name} service is temporarily unavailable; retry after "
            f"{seconds}s with the same Idempotency-Key",
            retryAfterSeconds=seconds,
        )
        response.headers["Retry-After"] = str(seconds)
        return response

    def _answer(
        self,
        result: LedgerResult,
        order_id: str,
        attempt: int,
        key: str | None,
        *,
        by_key: bool = False,
    ) -> web.Response:
        """The response to ``result``; ``by_key`` for a compensation by idempotency key."""
        if result.outcome in _REFUSALS:
            log.info(
                "request refused service=%s outcome=%s orderId=%s attempt=%d fence=%d "
                "idempotencyKey=%s",
                self.service.name,
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
        if result.tombstone is not None:
            return self._tombstone_answer(result, result.tombstone, order_id, attempt, key)
        if result.decline is not None:
            if result.outcome is Outcome.KEY_REUSE:
                return self._key_reuse(key, result.decline.order_id)
            return error(
                422,
                "permanent",
                f"order {order_id} cannot be {self.service.performed_status} (simulated "
                "business failure); retrying will not help",
                orderId=order_id,
                attempt=attempt,
            )
        assert result.resource is not None, (
            "only stale calls, tombstones and declines come without one"
        )
        if result.outcome is Outcome.KEY_REUSE:
            return self._key_reuse(key, result.resource.order_id)
        context = {"idempotencyKey": key} if by_key else {}
        if result.outcome is Outcome.ALREADY_DISPATCHED:
            return self._already_dispatched(result, context)
        replayed = result.outcome is Outcome.REPLAYED
        document = self._resource_json(result.resource, replayed, result.status)
        if by_key:
            document |= {"undone": True, **context}
        return web.json_response(document, status=200 if replayed else 201)

    def _tombstone_answer(
        self,
        result: LedgerResult,
        tombstone: Tombstone,
        order_id: str,
        attempt: int,
        key: str | None,
    ) -> web.Response:
        if result.outcome is Outcome.KEY_REUSE:
            return self._key_reuse(key, tombstone.order_id)
        if result.outcome is Outcome.COMPENSATED:
            return error(
                409,
                "compensated",
                f"the {self.service.action_effect} with Idempotency-Key {key!r} of order "
                f"{tombstone.order_id} was undone (attempt {tombstone.attempt}, "
                f"{tombstone.at}) before it was performed; it will never be performed: stop "
                "this attempt",
                idempotencyKey=key,
                orderId=order_id,
                attempt=attempt,
                undoneByAttempt=tombstone.attempt,
                undoneAt=tombstone.at,
            )
        return web.json_response(
            {
                "idempotencyKey": tombstone.idempotency_key,
                "orderId": tombstone.order_id,
                "attempt": tombstone.attempt,
                "undone": False,
                "replayed": result.outcome is Outcome.REPLAYED,
                "status": _NOTHING_TO_UNDO,
            }
        )

    def _key_reuse(self, key: str | None, other_order_id: str) -> web.Response:
        return error(
            422,
            "idempotency-key-reuse",
            f"Idempotency-Key {key!r} was used for a different request (order "
            f"{other_order_id}); use a new key for a new request",
            idempotencyKey=key,
        )

    def _already_dispatched(self, result: LedgerResult, context: dict[str, Any]) -> web.Response:
        assert result.resource is not None
        resource = result.resource
        return error(
            422,
            "already-dispatched",
            f"{self.service.action_effect} {resource.resource_id} of order {resource.order_id} "
            f"was dispatched at {result.dispatched_at} and cannot be "
            f"{self.service.compensated_status}; retrying will not help, an operator must "
            "undo it another way",
            orderId=resource.order_id,
            dispatchedAt=result.dispatched_at,
            **{self.service.id_field: resource.resource_id},
            **context,
        )

    def _resource_json(self, resource: Resource, replayed: bool, status: str) -> dict[str, Any]:
        return {
            self.service.id_field: resource.resource_id,
            "orderId": resource.order_id,
            "attempt": resource.attempt,
            "replayed": replayed,
            "status": status,
        }


_REFUSALS = frozenset(
    {Outcome.STALE_ATTEMPT, Outcome.KEY_REUSE, Outcome.ALREADY_DISPATCHED, Outcome.COMPENSATED}
)
_NOTHING_TO_UNDO = "nothing-to-undo"


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key", "").strip()
    return key if key and len(key) <= _MAX_KEY_LENGTH else None


def _is(fault: Fault | None, kind: FaultKind) -> bool:
    return fault is not None and fault.kind is kind


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise InvalidRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body
