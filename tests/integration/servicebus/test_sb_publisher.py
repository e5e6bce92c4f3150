"""The app's publisher against the broker through the real SDK (R2, E4): sends that wait
together arrive each with its own id, a queue that cannot be reached fails its own sends,
not the others, sends fail while the broker is down and work again once it is back, and
closing does not wait on a broker that stopped answering."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessagingEntityNotFoundError, ServiceBusError
from devhost.servicebus.process import BrokerProcess
from devhost.testing import queue, running_broker

from adapters.servicebus_publisher import ServiceBusPublisher
from domain.outgoing_messages import OutgoingMessage

pytestmark = pytest.mark.asyncio

TIMEOUT_SECONDS = 10.0
# A send to a broker that is down fails once the SDK's own retries (about 6 s) are spent.
DOWN_SEND_BOUND_SECONDS = 30.0
# Each sender and then the connection get a few seconds (servicebus_closing) to close.
CLOSE_BOUND_SECONDS = 30.0


def broker_config(folder: Path, *queues: dict[str, Any]) -> Path:
    """A broker config file with `queues`, for a broker in a process of its own."""
    config = folder / "servicebus.config.json"
    namespace = {"Name": "publisher", "Queues": list(queues)}
    config.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}), encoding="utf-8")
    return config


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


async def test_sends_fail_while_the_broker_is_down_and_work_once_it_is_back(
    tmp_path: Path,
) -> None:
    config = broker_config(tmp_path, queue("replies", RequiresDuplicateDetection=True))
    broker = BrokerProcess(config, data=tmp_path / "broker.sqlite")
    broker.start()
    try:
        publisher = ServiceBusPublisher(
            ServiceBusClient.from_connection_string(broker.connection_string)
        )
        try:
            await asyncio.wait_for(publisher.send(message("replies", "before")), TIMEOUT_SECONDS)
            await asyncio.to_thread(broker.kill)
            # Sends that wait together while the broker is down each learn that they failed.
            down = [message("replies", f"down-{index}") for index in range(3)]
            outcomes = await asyncio.wait_for(
                asyncio.gather(*(publisher.send(m) for m in down), return_exceptions=True),
                DOWN_SEND_BOUND_SECONDS,
            )
            assert all(isinstance(outcome, ServiceBusError) for outcome in outcomes), outcomes
            assert publisher.sender_restarts["replies"] >= 1

            await asyncio.to_thread(broker.start)
            after = [message("replies", f"after-{index}") for index in range(3)]
            await asyncio.wait_for(
                asyncio.gather(*(publisher.send(m) for m in after)), TIMEOUT_SECONDS
            )
        finally:
            await publisher.close()
        async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            receiver = client.get_queue_receiver("replies")
            async with receiver:
                received = await receiver.peek_messages(max_message_count=50, timeout=5)
    finally:
        broker.stop()

    # The journal kept what was accepted before the kill; what failed was never sent.
    assert sorted(str(m.message_id) for m in received) == [
        "after-0",
        "after-1",
        "after-2",
        "before",
    ]
    assert publisher.sent == {"replies": 4}


async def test_closing_returns_while_the_broker_answers_nothing(tmp_path: Path) -> None:
    """A shutdown must not hang on a broker that stopped answering: the publisher's links
    and its connection are closed within their bound, whatever the peer does."""
    broker = BrokerProcess(broker_config(tmp_path, queue("replies")))
    broker.start()
    pid = broker.pid
    assert pid is not None
    try:
        publisher = ServiceBusPublisher(
            ServiceBusClient.from_connection_string(broker.connection_string)
        )
        await asyncio.wait_for(publisher.send(message("replies", "sent")), TIMEOUT_SECONDS)
        # Frozen, not dead: the connection stays open and no frame ever comes back.
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(publisher.close(), CLOSE_BOUND_SECONDS)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        broker.stop()
    assert publisher.sent == {"replies": 1}
