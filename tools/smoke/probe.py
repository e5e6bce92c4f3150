"""The smoke test's one order through a deployed (or local) app (S1, R1, R2, S3).

`probe` sends one order with a fresh id to the orders queue, naming the reply queue, reads
that queue until `completed` (or a failure status) or the bound, then looks at where the
order's message was left (peek of the orders queue and of its dead-letter queue) and at the
reply queue's dead letters. Every network call carries a timeout; the reply queue is read in
receive-and-delete mode, so it must be one only the smoke test reads.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus import ServiceBusSubQueue as SubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

from tools.smoke.verdict import ENDINGS, Observation, OrdersMessage, Status

CALL_TIMEOUT_SECONDS = 30.0
_RECEIVE_SLICE_SECONDS = 5.0
_PEEK_BATCH = 100
_PEEK_LIMIT = 5000
"""Messages read at most when looking for the order in a queue: a smoke queue holds few."""
AUTH_ERRORS = (
    ClientAuthenticationError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """Where the smoke order goes: a client of the namespace and the two queues."""

    client: Callable[[], ServiceBusClient]
    orders_queue: str
    reply_queue: str
    steps: tuple[str, ...]


def new_order_id() -> str:
    """A fresh order id within the contract (1-64 of [A-Za-z0-9._-])."""
    return f"smoke-{uuid.uuid4().hex}"


def order_body(order_id: str) -> str:
    """The smoke order (contracts.md): one item, a customer id that names it."""
    return json.dumps(
        {
            "schemaVersion": 1,
            "orderId": order_id,
            "customerId": "smoke-test",
            "items": [{"sku": "smoke-test", "quantity": 1}],
            "currency": "EUR",
        }
    )


async def _bounded(work: Awaitable[T]) -> T:
    return await asyncio.wait_for(work, CALL_TIMEOUT_SECONDS)


async def probe(target: Target, bound: float, order_id: str | None = None) -> Observation:
    """Send the order, read its statuses for at most `bound` seconds, then look for it."""
    order_id = order_id or new_order_id()
    try:
        async with target.client() as client:
            await _send(client, target.orders_queue, target.reply_queue, order_id)
            statuses = await _statuses(client, target.reply_queue, order_id, bound)
            where, deliveries, reason, description = await _orders_message(
                client, target.orders_queue, order_id
            )
            replies_dead = await _count(
                client, target.reply_queue, True, lambda m: m.correlation_id == order_id
            )
    except (AzureError, TimeoutError) as error:
        named = f"{type(error).__name__}: {_first_line(error)}"
        if is_auth_error(error):
            return Observation(order_id, target.steps, auth_error=named)
        return Observation(order_id, target.steps, service_error=named)
    return Observation(
        order_id,
        target.steps,
        statuses=tuple(statuses),
        orders_message=where,
        delivery_count=deliveries,
        dead_letter_reason=reason,
        dead_letter_description=description,
        reply_dead_letters=replies_dead,
    )


def is_auth_error(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, refused the identity or its rights:
    the SDK may wrap the credential's own error in one of its own."""
    seen: BaseException | None = error
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, AUTH_ERRORS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:300]


async def _send(client: ServiceBusClient, queue: str, reply_queue: str, order_id: str) -> None:
    sender = client.get_queue_sender(queue)
    await _bounded(sender.__aenter__())
    try:
        message = ServiceBusMessage(order_body(order_id), message_id=order_id, reply_to=reply_queue)
        await sender.send_messages(message, timeout=CALL_TIMEOUT_SECONDS)
    finally:
        await _bounded(sender.close())


async def _statuses(
    client: ServiceBusClient, queue: str, order_id: str, bound: float
) -> list[Status]:
    """The order's statuses in arrival order, one per message id, until an ending or `bound`."""
    receiver = client.get_queue_receiver(
        queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    )
    await _bounded(receiver.__aenter__())
    seen: dict[str, Status] = {}
    deadline = time.monotonic() + bound
    try:
        while (left := deadline - time.monotonic()) > 0:
            batch = await _bounded(
                receiver.receive_messages(
                    max_message_count=20, max_wait_time=min(left, _RECEIVE_SLICE_SECONDS)
                )
            )
            for message in batch:
                status = _status_of(message, order_id)
                if status is not None and str(message.message_id) not in seen:
                    seen[str(message.message_id)] = status
            if any(s.status in ENDINGS for s in seen.values()):
                break
    finally:
        await _bounded(receiver.close())
    return list(seen.values())


def _status_of(message: ServiceBusReceivedMessage, order_id: str) -> Status | None:
    if message.correlation_id != order_id:
        return None
    try:
        body = json.loads(b"".join(message.body))
    except (TypeError, ValueError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("status"), str):
        return None
    return Status(body["status"], body.get("step"), body.get("reason"))


async def _orders_message(
    client: ServiceBusClient, queue: str, order_id: str
) -> tuple[OrdersMessage, int, str | None, str | None]:
    """Where the order's message is: its dead letter first, then the queue itself."""
    dead = await _find(client, queue, True, lambda m: m.message_id == order_id)
    if dead:
        last = dead[-1]
        return (
            OrdersMessage.DEAD_LETTERED,
            last.delivery_count or 0,
            last.dead_letter_reason,
            last.dead_letter_error_description,
        )
    waiting = await _find(client, queue, False, lambda m: m.message_id == order_id)
    if not waiting:
        return OrdersMessage.GONE, 0, None, None
    deliveries = waiting[-1].delivery_count or 0
    # A message counts its delivery while locked: 1 may be the app's first try, still running.
    where = (
        OrdersMessage.WAITING
        if deliveries == 0
        else OrdersMessage.DELIVERED
        if deliveries == 1
        else OrdersMessage.REDELIVERED
    )
    return where, deliveries, None, None


async def _count(
    client: ServiceBusClient,
    queue: str,
    dead_letters: bool,
    wanted: Callable[[ServiceBusReceivedMessage], bool],
) -> int:
    return len(await _find(client, queue, dead_letters, wanted))


async def _find(
    client: ServiceBusClient,
    queue: str,
    dead_letters: bool,
    wanted: Callable[[ServiceBusReceivedMessage], bool],
) -> Sequence[ServiceBusReceivedMessage]:
    """The messages of `queue` (or its dead-letter queue) that `wanted` picks, by peeking."""
    receiver = client.get_queue_receiver(
        queue, sub_queue=SubQueue.DEAD_LETTER if dead_letters else None
    )
    await _bounded(receiver.__aenter__())
    found: list[ServiceBusReceivedMessage] = []
    try:
        read = 0
        next_sequence = 0
        while read < _PEEK_LIMIT:
            batch = await receiver.peek_messages(
                _PEEK_BATCH, sequence_number=next_sequence, timeout=CALL_TIMEOUT_SECONDS
            )
            if not batch:
                break
            read += len(batch)
            found.extend(m for m in batch if wanted(m))
            next_sequence = max(m.sequence_number or 0 for m in batch) + 1
    finally:
        await _bounded(receiver.close())
    return found
