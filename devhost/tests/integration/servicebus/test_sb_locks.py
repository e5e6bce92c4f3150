"""Peek-lock behaviour through the real SDK: expiry, renewal, lost locks, max delivery.

The "short-lock" queue has LockDuration PT2S and MaxDeliveryCount 2, so expiry is real time but
short; waits are bounded receives, never sleeps.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import MessageLockLostError
from devhost_tests_support.sb_helpers import (
    SEND_TIMEOUT_SECONDS,
    body_text,
    receive_exactly,
)

from devhost.servicebus.server import ServiceBusBroker

pytestmark = pytest.mark.timeout(90)


def _send(client: ServiceBusClient, queue: str, *bodies: str) -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(b) for b in bodies], timeout=SEND_TIMEOUT_SECONDS)


def test_expired_lock_redelivers_with_delivery_count_plus_one(client: ServiceBusClient) -> None:
    _send(client, "short-lock", "slow job")
    with client.get_queue_receiver("short-lock") as receiver:
        (first,) = receive_exactly(receiver, 1)
        assert first.delivery_count == 0
        (second,) = receive_exactly(receiver, 1)
        assert second.sequence_number == first.sequence_number
        assert second.delivery_count == 1
        assert second.locked_until_utc is not None
        assert first.locked_until_utc is not None
        assert second.locked_until_utc > first.locked_until_utc
        receiver.complete_message(second)
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(first)


def test_lock_lost_is_reported_by_the_broker(client: ServiceBusClient) -> None:
    _send(client, "short-lock", "contended")
    with (
        client.get_queue_receiver("short-lock") as slow,
        client.get_queue_receiver("short-lock") as fast,
    ):
        (held,) = receive_exactly(slow, 1)
        (taken,) = receive_exactly(fast, 1)
        assert taken.sequence_number == held.sequence_number
        fast.complete_message(taken)
        # renew has no client-side expiry check: this 410 comes from the broker
        with pytest.raises(MessageLockLostError):
            slow.renew_message_lock(held, timeout=10)


def test_renewed_lock_keeps_the_message_from_others(client: ServiceBusClient) -> None:
    _send(client, "short-lock", "long job")
    with (
        client.get_queue_receiver("short-lock") as worker,
        client.get_queue_receiver("short-lock") as competitor,
    ):
        (message,) = receive_exactly(worker, 1)
        original_expiry = message.locked_until_utc
        assert original_expiry is not None
        for _ in range(3):
            renewed = worker.renew_message_lock(message, timeout=10)
            assert renewed >= original_expiry
            assert competitor.receive_messages(max_message_count=1, max_wait_time=1) == []
        assert message.locked_until_utc is not None
        assert message.locked_until_utc > original_expiry
        worker.complete_message(message)


def test_max_delivery_count_dead_letters_after_abandons(client: ServiceBusClient) -> None:
    _send(client, "short-lock", "poison")
    with client.get_queue_receiver("short-lock") as receiver:
        for attempt in range(2):
            (message,) = receive_exactly(receiver, 1)
            assert message.delivery_count == attempt
            receiver.abandon_message(message)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
    with client.get_queue_receiver("short-lock", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (dead,) = receive_exactly(dlq, 1)
        assert body_text(dead) == "poison"
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
        assert dead.dead_letter_error_description
        assert dead.delivery_count == 2
        dlq.complete_message(dead)


def test_max_delivery_count_dead_letters_after_lock_expiries(client: ServiceBusClient) -> None:
    _send(client, "short-lock", "forgotten")
    with client.get_queue_receiver("short-lock") as receiver:
        receive_exactly(receiver, 2)  # the second is the redelivery after the first lock expired
    with client.get_queue_receiver("short-lock", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (dead,) = receive_exactly(dlq, 1)
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
        dlq.complete_message(dead)


def test_closing_a_receiver_releases_its_locks(client: ServiceBusClient) -> None:
    _send(client, "work", "held")
    with client.get_queue_receiver("work") as receiver:
        (held,) = receive_exactly(receiver, 1)
    # "work" locks for 30 s: getting it back well before that proves the release
    with client.get_queue_receiver("work") as receiver:
        (again,) = receive_exactly(receiver, 1, bound=15)
        assert again.sequence_number == held.sequence_number
        assert again.delivery_count == 1
        receiver.complete_message(again)


_CRASHING_CLIENT = textwrap.dedent(
    """
    import os, sys
    from azure.servicebus import ServiceBusClient
    client = ServiceBusClient.from_connection_string(sys.argv[1])
    receiver = client.get_queue_receiver("work")
    messages = receiver.receive_messages(max_message_count=1, max_wait_time=20)
    print(len(messages), flush=True)
    os._exit(0)  # no close, no settlement: like a crashed process
    """
)


def test_a_client_that_dies_holding_locks_gets_them_redelivered(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    _send(client, "work", "orphaned")
    crashed = subprocess.run(
        [sys.executable, "-c", _CRASHING_CLIENT, broker.connection_string],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert crashed.stdout.strip() == "1"
    with client.get_queue_receiver("work") as receiver:
        (again,) = receive_exactly(receiver, 1, bound=15)
        assert body_text(again) == "orphaned"
        assert again.delivery_count == 1
        receiver.complete_message(again)


def test_prefetched_messages_come_back_uncounted_when_a_receiver_closes(
    client: ServiceBusClient,
) -> None:
    _send(client, "work", *(f"m{i}" for i in range(5)))
    with client.get_queue_receiver("work", prefetch_count=10) as receiver:
        (first,) = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        receiver.complete_message(first)
    # the other four were prefetched (locked for 30 s) and released on close, never handed out
    with client.get_queue_receiver("work") as receiver:
        rest = receive_exactly(receiver, 4, bound=15)
        assert [body_text(m) for m in rest] == ["m1", "m2", "m3", "m4"]
        assert [m.delivery_count for m in rest] == [0, 0, 0, 0]
        for message in rest:
            receiver.complete_message(message)
