"""Several senders and competing receivers, sync and async, on one queue.

Every message is delivered and completed exactly once: none lost, none completed twice.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from devhost_tests_support.sb_helpers import SEND_TIMEOUT_SECONDS

from devhost.servicebus.server import ServiceBusBroker

pytestmark = pytest.mark.timeout(180)

SENDERS = 3
PER_SENDER = 150
TOTAL = SENDERS * PER_SENDER + PER_SENDER  # plus one async sender
RUN_BOUND_SECONDS = 120.0


def test_competing_sync_and_async_clients_lose_and_repeat_nothing(broker: ServiceBusBroker) -> None:
    completed: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + RUN_BOUND_SECONDS
    errors: list[BaseException] = []

    def done() -> bool:
        with lock:
            return sum(completed.values()) >= TOTAL or time.monotonic() > deadline

    def record(message_id: str | None) -> None:
        assert message_id is not None
        with lock:
            completed[message_id] += 1

    def sync_sender(index: int) -> None:
        with (
            ServiceBusClient.from_connection_string(broker.connection_string) as client,
            client.get_queue_sender("work") as sender,
        ):
            for n in range(0, PER_SENDER, 10):
                sender.send_messages(
                    [
                        ServiceBusMessage(b"x" * 512, message_id=f"s{index}-{n + i}")
                        for i in range(10)
                    ],
                    timeout=SEND_TIMEOUT_SECONDS,
                )

    def sync_receiver(prefetch: int) -> None:
        with (
            ServiceBusClient.from_connection_string(broker.connection_string) as client,
            client.get_queue_receiver("work", prefetch_count=prefetch) as receiver,
        ):
            while not done():
                for message in receiver.receive_messages(max_message_count=20, max_wait_time=1):
                    receiver.complete_message(message)
                    record(message.message_id)

    async def async_side() -> None:
        async with AsyncServiceBusClient.from_connection_string(broker.connection_string) as client:

            async def send() -> None:
                async with client.get_queue_sender("work") as sender:
                    for n in range(PER_SENDER):
                        await sender.send_messages(
                            ServiceBusMessage(b"y" * 512, message_id=f"a-{n}"),
                            timeout=SEND_TIMEOUT_SECONDS,
                        )

            async def receive() -> None:
                async with client.get_queue_receiver("work", prefetch_count=10) as receiver:
                    while not done():
                        batch = await receiver.receive_messages(
                            max_message_count=20, max_wait_time=1
                        )
                        for message in batch:
                            await receiver.complete_message(message)
                            record(message.message_id)

            await asyncio.gather(send(), receive())

    def start(work: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                work()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    threads = [start(functools.partial(sync_sender, i)) for i in range(SENDERS)]
    threads += [
        start(functools.partial(sync_receiver, 0)),
        start(functools.partial(sync_receiver, 20)),
        start(lambda: asyncio.run(async_side())),
    ]
    for thread in threads:
        thread.join(RUN_BOUND_SECONDS + 30)
    assert not errors, errors
    expected = {f"s{s}-{n}" for s in range(SENDERS) for n in range(PER_SENDER)}
    expected |= {f"a-{n}" for n in range(PER_SENDER)}
    assert set(completed) == expected
    assert [mid for mid, count in completed.items() if count != 1] == []
