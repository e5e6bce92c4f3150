"""The demo client is a well-behaved receiver of status messages (R2): a status delivered
twice, as at-least-once delivery allows, is counted once, and each `in-progress` status is
counted under the step it names."""

from __future__ import annotations

import asyncio
import json

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from devhost.testing import eventually, eventually_true, queue, running_broker

from tools.demo.client import DemoClient

pytestmark = pytest.mark.asyncio

TIMEOUT_SECONDS = 10.0


def status(order_id: str, name: str, step: str | None = None) -> ServiceBusMessage:
    body = json.dumps({"orderId": order_id, "status": name, "step": step}).encode()
    message_id = f"{order_id}:{name}" if step is None else f"{order_id}:{name}:{step}"
    return ServiceBusMessage(body, message_id=message_id)


async def test_a_status_delivered_twice_is_counted_once() -> None:
    # No duplicate detection on this queue, so the broker delivers both copies.
    with running_broker([queue("replies"), queue("orders")]) as broker:
        client = DemoClient(broker.connection_string, "orders", "replies")
        await client.open()
        stop = asyncio.Event()
        listener = asyncio.create_task(client.listen(stop))
        async with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
            sender = sb.get_queue_sender("replies")
            async with sender:
                copies = [status("o-1", "received"), status("o-1", "received")]
                await sender.send_messages(copies, timeout=TIMEOUT_SECONDS)
                await sender.send_messages(status("o-1", "completed"), timeout=TIMEOUT_SECONDS)

            async def replies_drained() -> bool:
                async with sb.get_queue_receiver("replies") as peeker:
                    return not await peeker.peek_messages(max_message_count=1, timeout=5)

            await eventually(lambda: "completed" in client.log.statuses, "the completed status")
            await eventually_true(replies_drained, "every status completed on the reply queue")
        stop.set()
        await listener
        await client.close()

    assert client.log.statuses == {"received": 1, "completed": 1}
    assert list(client.log.finished_at) == ["o-1"]


async def test_in_progress_statuses_are_counted_by_the_step_they_name_r2() -> None:
    with running_broker([queue("replies"), queue("orders")]) as broker:
        client = DemoClient(broker.connection_string, "orders", "replies")
        await client.open()
        stop = asyncio.Event()
        listener = asyncio.create_task(client.listen(stop))
        async with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
            async with sb.get_queue_sender("replies") as sender:
                statuses = [
                    status("o-1", "received"),
                    status("o-1", "in-progress", "reserve-stock"),
                    status("o-1", "in-progress", "charge-payment"),
                    status("o-1", "compensated"),
                    status("o-2", "received"),
                    status("o-2", "in-progress", "reserve-stock"),
                ]
                await sender.send_messages(statuses, timeout=TIMEOUT_SECONDS)
            await eventually(
                lambda: sum(client.log.statuses.values()) == len(statuses), "every status"
            )
        stop.set()
        await listener
        await client.close()

    assert client.log.statuses == {"received": 2, "in-progress": 3, "compensated": 1}
    assert client.log.steps == {"reserve-stock": 2, "charge-payment": 1}
    assert list(client.log.finished_at) == ["o-1"]
