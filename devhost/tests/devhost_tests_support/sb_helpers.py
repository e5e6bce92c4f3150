"""Helpers for the broker's integration tests: bounded receives and body decoding."""

from __future__ import annotations

import time
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiver
from azure.servicebus.aio import ServiceBusReceiver as AsyncServiceBusReceiver

from devhost.servicebus.config import BrokerConfig, parse_config

RECEIVE_BOUND_SECONDS = 20.0
SEND_TIMEOUT_SECONDS = 15.0

TEST_CONFIG: dict[str, Any] = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [
                    {"Name": "work", "Properties": {"LockDuration": "PT30S"}},
                    {
                        "Name": "short-lock",
                        "Properties": {"LockDuration": "PT2S", "MaxDeliveryCount": 2},
                    },
                    {
                        "Name": "dedup",
                        "Properties": {
                            "RequiresDuplicateDetection": True,
                            "DuplicateDetectionHistoryTimeWindow": "PT1M",
                        },
                    },
                    {
                        "Name": "expiring",
                        "Properties": {
                            "DefaultMessageTimeToLive": "PT1S",
                            "DeadLetteringOnMessageExpiration": True,
                        },
                    },
                    {"Name": "vanishing", "Properties": {"DefaultMessageTimeToLive": "PT1S"}},
                ],
            }
        ]
    }
}


def broker_config(*, auto_create: bool = False) -> BrokerConfig:
    return parse_config(TEST_CONFIG, auto_create=auto_create)


def receive_exactly(
    receiver: ServiceBusReceiver, count: int, bound: float = RECEIVE_BOUND_SECONDS
) -> list[ServiceBusReceivedMessage]:
    """Receive until ``count`` messages arrived; fail after ``bound`` seconds."""
    received: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + bound
    while len(received) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"received {len(received)} of {count} messages in {bound:.0f}s")
        received += receiver.receive_messages(
            max_message_count=count - len(received), max_wait_time=min(remaining, 5.0)
        )
    return received


async def receive_exactly_async(
    receiver: AsyncServiceBusReceiver, count: int, bound: float = RECEIVE_BOUND_SECONDS
) -> list[ServiceBusReceivedMessage]:
    received: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + bound
    while len(received) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"received {len(received)} of {count} messages in {bound:.0f}s")
        received += await receiver.receive_messages(
            max_message_count=count - len(received), max_wait_time=min(remaining, 5.0)
        )
    return received


def body_text(message: ServiceBusReceivedMessage) -> str:
    return b"".join(message.body).decode()
