"""Outbound Service Bus messages: status replies (R1-R2), operator alerts, agent traffic (E1, E4).

Every message carries a stable ``message_id`` chosen by the caller, so a resend after a crash
or a retried activity is removed by the queue's duplicate detection instead of reaching a
consumer twice. Senders are created lazily per queue and reused; one send at a time goes
through each sender, since an AMQP link is not safe for concurrent use. The counts of
messages sent per queue feed the demo's cost per order.

The connection is the app's ``ServiceBusConnection`` setting, a connection string locally or
the identity form ``ServiceBusConnection__fullyQualifiedNamespace`` in Azure.
"""

from __future__ import annotations

import asyncio
import collections
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender

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
    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self._senders: dict[str, tuple[ServiceBusSender, asyncio.Lock]] = {}
        self.sent: collections.Counter[str] = collections.Counter()

    async def send(self, message: OutgoingMessage) -> None:
        sender, lock = self._sender(message.queue)
        properties: dict[str | bytes, int | float | bytes | bool | str | uuid.UUID] = {
            name: value for name, value in message.application_properties.items()
        }
        outgoing = ServiceBusMessage(
            message.body,
            message_id=message.message_id,
            correlation_id=message.correlation_id,
            subject=message.subject,
            content_type="application/json",
            application_properties=properties or None,
        )
        async with lock:
            await sender.send_messages(outgoing, timeout=SEND_TIMEOUT_SECONDS)
        self.sent[message.queue] += 1

    def _sender(self, queue: str) -> tuple[ServiceBusSender, asyncio.Lock]:
        if queue not in self._senders:
            self._senders[queue] = (self._client.get_queue_sender(queue), asyncio.Lock())
        return self._senders[queue]

    async def close(self) -> None:
        for sender, _ in self._senders.values():
            await sender.close()
        self._senders.clear()
        await self._client.close()


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
