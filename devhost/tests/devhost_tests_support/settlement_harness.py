"""A Service Bus trigger of the devhost over the embedded broker, for settlement tests: one
invocation at a time, locks never renewed, and the queue reads a test makes afterwards.
Every SDK call carries a timeout."""

from __future__ import annotations

import datetime as dt
from typing import Any

import azure.functions as func
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

from devhost.host_config import ServiceBusOptions
from devhost.indexing import index_app
from devhost.invocation import FunctionInvoker
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from devhost.testing import queue
from devhost.triggers.servicebus import ServiceBusTrigger

TIMEOUT = 15
NO_RENEWAL = dt.timedelta(0)
TEST_DEADLINE = 0.5
"""A settlement call's deadline in these tests: small, so a test shows the call ending at it,
far below the devhost settlement service's own wait (60 s)."""
SETTLEMENT_QUEUES = [
    queue("lost-lock", LockDuration="PT1S", MaxDeliveryCount=5),
    queue("stalled-complete", LockDuration="PT30S", MaxDeliveryCount=5),
    queue("stalled-dead-letter", LockDuration="PT30S", MaxDeliveryCount=5),
    queue("stalled-both", LockDuration="PT1S", MaxDeliveryCount=5),
    queue("long-description", LockDuration="PT30S", MaxDeliveryCount=5),
]
"""A queue per case: a lock that expires before the settlement, and settlements that stall."""


def trigger_for(
    app: func.FunctionApp, broker: ServiceBusBroker, invoker: FunctionInvoker
) -> ServiceBusTrigger:
    """The devhost's trigger of `app`'s one function, whose connection setting is ``SB``."""
    settings = AppSettings({"SB": broker.connection_string})
    (function,) = index_app(app, settings)
    options = ServiceBusOptions(1, max_auto_lock_renewal=NO_RENEWAL)
    return ServiceBusTrigger(function, invoker, settings, options)


async def send(broker: ServiceBusBroker, queue_name: str, message: ServiceBusMessage) -> None:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        sender = client.get_queue_sender(queue_name)
        async with sender:
            await sender.send_messages(message, timeout=TIMEOUT)


async def is_empty(broker: ServiceBusBroker, queue_name: str) -> bool:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        receiver = client.get_queue_receiver(queue_name)
        async with receiver:
            return not await receiver.peek_messages(max_message_count=1, timeout=TIMEOUT)


async def dead_letters(broker: ServiceBusBroker, queue_name: str) -> list[Any]:
    """The queue's dead letters, received and completed (at most one)."""
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        receiver = client.get_queue_receiver(queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        async with receiver:
            received = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            for message in received:
                await receiver.complete_message(message)
            return received
