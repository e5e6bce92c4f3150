"""Settling a trigger's Service Bus message from function code (S1, S3).

The Functions host dead-letters a message with a reason only through the SDK-type binding of
``azurefunctions-extensions-bindings-servicebus``: the function declares
``auto_complete_messages=False``, receives an ``azure.servicebus.ServiceBusReceivedMessage``
and a ``ServiceBusMessageActions`` client, and settles the message itself over the host's
gRPC settlement service. Those calls block, so they run off the event loop.
"""

from __future__ import annotations

import asyncio

from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)


async def complete(actions: ServiceBusMessageActions, message: ServiceBusReceivedMessage) -> None:
    await asyncio.to_thread(actions.complete, message)


async def dead_letter(
    actions: ServiceBusMessageActions,
    message: ServiceBusReceivedMessage,
    *,
    reason: str,
    description: str,
) -> None:
    await asyncio.to_thread(
        actions.deadletter,
        message,
        deadletter_reason=reason,
        deadletter_error_description=description,
    )


def body_bytes(message: ServiceBusReceivedMessage) -> bytes:
    """The message body as bytes, whatever AMQP body section carried it."""
    body = message.body
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return b"".join(part if isinstance(part, bytes) else str(part).encode() for part in body)
