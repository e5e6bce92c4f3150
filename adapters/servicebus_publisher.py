"""The `MessagePublisher` port on Service Bus (R1, R2, E4, C9): `ServiceBusPublisher`.

Each message goes out under the stable `message_id` its caller chose, batched with the sends
waiting on the same queue and stamped with its own sender's trace. A send that fails fails
its caller, whose trigger is then redelivered, and the sender is replaced. The connection is
ServiceBusConnection or its identity form (`client_from_environment`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import os
import uuid
from collections.abc import Mapping

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError

from adapters.identity_connection import async_credential, identity_choice
from adapters.servicebus_closing import close_quietly
from domain.outgoing_messages import OutgoingMessage
from domain.ports import MessagePublisher
from observability import logs

CONNECTION_SETTING = "ServiceBusConnection"
SEND_TIMEOUT_SECONDS = 30.0
# A bound on opening a sender's link (the SDK retries inside it).
OPEN_TIMEOUT_SECONDS = 30.0

log = logs.get_logger("app.servicebus_publisher")


class PublisherConfigurationError(RuntimeError):
    """Neither form of the Service Bus connection setting is present."""


def client_from_environment(environ: Mapping[str, str] | None = None) -> ServiceBusClient:
    values = os.environ if environ is None else environ
    connection_string = values.get(CONNECTION_SETTING)
    if connection_string:
        return ServiceBusClient.from_connection_string(connection_string)
    namespace = values.get(f"{CONNECTION_SETTING}__fullyQualifiedNamespace")
    if namespace:
        credential = async_credential(identity_choice(values, CONNECTION_SETTING))
        return ServiceBusClient(namespace, credential)
    raise PublisherConfigurationError(
        f"set {CONNECTION_SETTING} (a connection string) or "
        f"{CONNECTION_SETTING}__fullyQualifiedNamespace (managed identity)"
    )


class ServiceBusPublisher(MessagePublisher):
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
        self.sender_restarts: collections.Counter[str] = collections.Counter()
        """Per queue, how many failed senders were closed to be replaced by a new one."""

    async def send(self, message: OutgoingMessage) -> None:
        writer = self._writers.get(message.queue)
        if writer is None:
            writer = self._writers[message.queue] = _QueueWriter(
                self._client, message.queue, self.sender_restarts
            )
        await writer.send(_to_service_bus(message))
        self.sent[message.queue] += 1

    async def close(self) -> None:
        await asyncio.gather(*(writer.close() for writer in self._writers.values()))
        self._writers.clear()
        await close_quietly(self._client, "client")


class _QueueWriter:
    def __init__(
        self, client: ServiceBusClient, queue: str, restarts: collections.Counter[str]
    ) -> None:
        self._client = client
        self._queue = queue
        self._restarts = restarts
        self._sender: ServiceBusSender | None = None
        self._waiting: list[
            tuple[ServiceBusMessage, asyncio.Future[None], contextvars.Context]
        ] = []
        self._wake = asyncio.Event()
        # The writer belongs to no caller: it starts from an empty context.
        self._task = asyncio.create_task(self._write(), context=contextvars.Context())

    async def send(self, message: ServiceBusMessage) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((message, done, contextvars.copy_context()))
        self._wake.set()
        await done

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                taken: list[asyncio.Future[None]] = []
                try:
                    await self._send_batch(taken)
                except Exception as error:  # whoever waits on this batch learns why
                    # Nothing in the batch was sent, or the outcome is unknown: its senders
                    # retry (their trigger message comes back) with the same message ids.
                    failed = taken or [done for _, done, _ in self._waiting]
                    if not taken:
                        self._waiting = []  # the link could not open: every waiter is told
                    for done in failed:
                        if not done.done():
                            done.set_exception(error)
                    await self._replace_sender(error)

    async def _send_batch(self, taken: list[asyncio.Future[None]]) -> None:
        """Send the waiting messages that fit in one batch, adding their futures to ``taken``
        once they are in it; resolve them on success, raise on failure."""
        if self._sender is None:
            self._sender = self._client.get_queue_sender(self._queue)
        async with asyncio.timeout(OPEN_TIMEOUT_SECONDS):
            batch = await self._sender.create_message_batch()
        while self._waiting:
            message, done, context = self._waiting[0]
            try:
                context.run(batch.add_message, message)
            except MessageSizeExceededError:
                if taken:
                    break  # the batch is full: the rest go in the next one
                self._waiting.pop(0)
                done.set_exception(MessageSizeExceededError(message="message too large"))
                continue
            self._waiting.pop(0)
            taken.append(done)
        if not taken:
            return
        await self._sender.send_messages(batch, timeout=SEND_TIMEOUT_SECONDS)
        for done in taken:
            if not done.done():
                done.set_result(None)

    async def _replace_sender(self, error: Exception) -> None:
        """Close a sender a send or open failed on; the next batch opens a new one."""
        sender, self._sender = self._sender, None
        if sender is None:
            return
        self._restarts[self._queue] += 1
        log.warning(
            "service bus sender replaced",
            queue=self._queue,
            restarts=self._restarts[self._queue],
            error=type(error).__name__,
            detail=str(error),
        )
        await close_quietly(sender, "sender")

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for _, done, _ in self._waiting:
            if not done.done():
                done.set_exception(RuntimeError("the publisher closed before sending"))
        if self._sender is not None:
            await close_quietly(self._sender, "sender")


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
