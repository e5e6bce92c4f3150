"""Outbound Service Bus messages: status replies (R1-R2), operator alerts, agent traffic (E1, E4).

Every message carries a stable ``message_id`` chosen by the caller, so a resend after a crash
or a retried activity is removed by the queue's duplicate detection instead of reaching a
consumer twice. Senders are created lazily per queue and reused, and sends that wait at the
same time go out together as one batch. The counts of messages sent per queue feed the
demo's cost per order.

The connection is the app's ``ServiceBusConnection`` setting, a connection string locally or
the identity form ``ServiceBusConnection__fullyQualifiedNamespace`` in Azure.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError

from domain.contracts import OperatorAlert, StatusMessage

CONNECTION_SETTING = "ServiceBusConnection"
SEND_TIMEOUT_SECONDS = 30.0


class PublisherConfigurationError(RuntimeError):
    """Neither form of the Service Bus connection setting is present."""


@dataclass(frozen=True)
class OutgoingMessage:
    queue: str
    body: str
    message_id: str
    correlation_id: str | None = None
    subject: str | None = None
    application_properties: Mapping[str, str | int] = field(default_factory=dict)


def client_from_environment(environ: Mapping[str, str] | None = None) -> ServiceBusClient:
    values = os.environ if environ is None else environ
    connection_string = values.get(CONNECTION_SETTING)
    if connection_string:
        return ServiceBusClient.from_connection_string(connection_string)
    namespace = values.get(f"{CONNECTION_SETTING}__fullyQualifiedNamespace")
    if namespace:
        from azure.identity.aio import DefaultAzureCredential

        return ServiceBusClient(namespace, DefaultAzureCredential())
    raise PublisherConfigurationError(
        f"set {CONNECTION_SETTING} (a connection string) or "
        f"{CONNECTION_SETTING}__fullyQualifiedNamespace (managed identity)"
    )


class ServiceBusPublisher:
    """Sends through one link per queue, batching the sends that wait at the same time.

    An AMQP link takes one send at a time (concurrent sends would read the connection's
    frames concurrently), and each send waits a round trip for the broker's acceptance. So
    callers hand their message to a per-queue writer task, which sends everything waiting
    as one batch and resolves every caller with the batch's outcome: one round trip for many
    messages, each still with its own message id for duplicate detection.
    """

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self._writers: dict[str, _QueueWriter] = {}
        self.sent: collections.Counter[str] = collections.Counter()

    async def send(self, message: OutgoingMessage) -> None:
        writer = self._writers.get(message.queue)
        if writer is None:
            writer = self._writers[message.queue] = _QueueWriter(
                self._client.get_queue_sender(message.queue)
            )
        await writer.send(_to_service_bus(message))
        self.sent[message.queue] += 1

    async def close(self) -> None:
        await asyncio.gather(*(writer.close() for writer in self._writers.values()))
        self._writers.clear()
        await self._client.close()


class _QueueWriter:
    def __init__(self, sender: ServiceBusSender) -> None:
        self._sender = sender
        self._waiting: list[tuple[ServiceBusMessage, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._write())

    async def send(self, message: ServiceBusMessage) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((message, done))
        self._wake.set()
        await done

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                try:
                    batch = await self._sender.create_message_batch()
                except Exception as error:  # the link cannot open: whoever waits learns why
                    waiting, self._waiting = self._waiting, []
                    for _, done in waiting:
                        if not done.done():
                            done.set_exception(error)
                    continue
                taken: list[asyncio.Future[None]] = []
                while self._waiting:
                    message, done = self._waiting[0]
                    try:
                        batch.add_message(message)
                    except MessageSizeExceededError:
                        if taken:
                            break  # the batch is full: the rest go in the next one
                        self._waiting.pop(0)
                        done.set_exception(MessageSizeExceededError(message="message too large"))
                        continue
                    self._waiting.pop(0)
                    taken.append(done)
                if not taken:
                    continue
                try:
                    await self._sender.send_messages(batch, timeout=SEND_TIMEOUT_SECONDS)
                except Exception as error:  # every caller of this batch learns the outcome
                    for done in taken:
                        if not done.done():
                            done.set_exception(error)
                else:
                    for done in taken:
                        if not done.done():
                            done.set_result(None)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for _, done in self._waiting:
            if not done.done():
                done.set_exception(RuntimeError("the publisher closed before sending"))
        await self._sender.close()


def _to_service_bus(message: OutgoingMessage) -> ServiceBusMessage:
    properties: dict[str | bytes, int | float | bytes | bool | str | uuid.UUID] = {
        name: value for name, value in message.application_properties.items()
    }
    return ServiceBusMessage(
        message.body,
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        subject=message.subject,
        content_type="application/json",
        application_properties=properties or None,
    )


def status_outgoing(status: StatusMessage) -> OutgoingMessage:
    """A status message for the submitting app's own reply queue (R2)."""
    return OutgoingMessage(
        queue=status.queue,
        body=status.body_json(),
        message_id=status.message_id,
        correlation_id=status.correlation_id,
        subject=status.subject,
    )


def alert_outgoing(alert: OperatorAlert, queue: str) -> OutgoingMessage:
    """An operator alert (S3, E8, U4); the order id correlates it when there is one."""
    order_id = alert.body.get("orderId")
    return OutgoingMessage(
        queue=queue,
        body=alert.body_json(),
        message_id=alert.message_id,
        correlation_id=None if order_id is None else str(order_id),
        subject=str(alert.body.get("kind")),
    )
