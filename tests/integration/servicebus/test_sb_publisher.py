"""The app's publisher against the broker through the real SDK (R2, E4): sends that wait
together arrive each with its own id, and a queue that cannot be reached fails its own sends,
not the others."""

from __future__ import annotations

import asyncio

import pytest
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from adapters.servicebus_publisher import OutgoingMessage, ServiceBusPublisher
from tests.support.broker import queue, running_broker

pytestmark = pytest.mark.asyncio

TIMEOUT_SECONDS = 10.0


def message(queue_name: str, message_id: str) -> OutgoingMessage:
    return OutgoingMessage(
        queue=queue_name, body=f'{{"id": "{message_id}"}}', message_id=message_id
    )


async def test_messages_sent_together_each_arrive_once_with_their_own_id() -> None:
    with running_broker([queue("replies")]) as broker:
        publisher = ServiceBusPublisher(
            ServiceBusClient.from_connection_string(broker.connection_string)
        )
        try:
            ids = [f"m-{index}" for index in range(25)]
            await asyncio.wait_for(
                asyncio.gather(*(publisher.send(message("replies", i)) for i in ids)),
                TIMEOUT_SECONDS,
            )
            async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
                receiver = client.get_queue_receiver("replies")
                async with receiver:
                    received = await receiver.peek_messages(max_message_count=50, timeout=5)
        finally:
            await publisher.close()

    assert sorted(m.message_id for m in received) == sorted(ids)
    assert publisher.sent == {"replies": 25}


async def test_a_queue_that_cannot_be_reached_fails_its_sends_and_only_its_sends() -> None:
    """Before, the queue's writer task died with the error and its callers waited forever."""
    with running_broker([queue("replies")]) as broker:
        publisher = ServiceBusPublisher(
            ServiceBusClient.from_connection_string(broker.connection_string)
        )
        try:
            for attempt in range(2):  # the next send tries again and is told again
                with pytest.raises(MessagingEntityNotFoundError):
                    await asyncio.wait_for(
                        publisher.send(message("no-such-queue", f"x-{attempt}")), TIMEOUT_SECONDS
                    )
            await asyncio.wait_for(publisher.send(message("replies", "r-1")), TIMEOUT_SECONDS)
        finally:
            await publisher.close()

    assert publisher.sent == {"replies": 1}
