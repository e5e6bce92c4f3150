"""Scheduled messages, TTL expiry and duplicate detection through the real SDK."""

from __future__ import annotations

import datetime

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from devhost_tests_support.sb_helpers import (
    SEND_TIMEOUT_SECONDS,
    body_text,
    receive_exactly,
    receive_exactly_async,
)

from devhost.servicebus.server import ServiceBusBroker

pytestmark = pytest.mark.timeout(90)


def _in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


def test_scheduled_enqueue_time_on_send_holds_the_message_back(client: ServiceBusClient) -> None:
    due = _in(2)
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            ServiceBusMessage("later", scheduled_enqueue_time_utc=due), timeout=SEND_TIMEOUT_SECONDS
        )
        sender.send_messages(ServiceBusMessage("now"), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work") as receiver:
        (now,) = receive_exactly(receiver, 1)
        assert body_text(now) == "now"
        receiver.complete_message(now)
        (later,) = receive_exactly(receiver, 1)
        assert body_text(later) == "later"
        assert datetime.datetime.now(datetime.UTC) >= due - datetime.timedelta(milliseconds=50)
        assert later.scheduled_enqueue_time_utc is not None
        receiver.complete_message(later)


def test_schedule_and_cancel_mixed_with_other_traffic_on_one_connection(
    client: ServiceBusClient,
) -> None:
    """The probe failed here: replies must go to the asking link pair, not the connection's last."""
    with (
        client.get_queue_sender("work") as sender,
        client.get_queue_receiver("work", prefetch_count=5) as receiver,
    ):
        sender.send_messages(ServiceBusMessage("plain-1"), timeout=SEND_TIMEOUT_SECONDS)
        (kept,) = sender.schedule_messages(ServiceBusMessage("scheduled-kept"), _in(2), timeout=10)
        cancelled = sender.schedule_messages(
            [
                ServiceBusMessage("scheduled-cancelled-1"),
                ServiceBusMessage("scheduled-cancelled-2"),
            ],
            _in(2),
            timeout=10,
        )
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=1, timeout=10)
        states = {body_text(m): m.state for m in peeked}
        assert states["plain-1"] == ServiceBusMessageState.ACTIVE
        assert states["scheduled-kept"] == ServiceBusMessageState.SCHEDULED
        sender.cancel_scheduled_messages(cancelled, timeout=10)
        sender.send_messages(ServiceBusMessage("plain-2"), timeout=SEND_TIMEOUT_SECONDS)
        plain = receive_exactly(receiver, 2)
        assert [body_text(m) for m in plain] == ["plain-1", "plain-2"]
        for message in plain:
            receiver.complete_message(message)
        (scheduled,) = receive_exactly(receiver, 1)
        assert body_text(scheduled) == "scheduled-kept"
        assert scheduled.sequence_number == kept
        receiver.complete_message(scheduled)
        assert receiver.receive_messages(max_message_count=5, max_wait_time=3) == []


@pytest.mark.asyncio
async def test_async_schedule_cancel_and_receive_on_one_connection(
    broker: ServiceBusBroker,
) -> None:
    async with (
        AsyncServiceBusClient.from_connection_string(broker.connection_string) as client,
        client.get_queue_sender("work") as sender,
        client.get_queue_receiver("work") as receiver,
    ):
        kept = await sender.schedule_messages(ServiceBusMessage("kept"), _in(2), timeout=10)
        dropped = await sender.schedule_messages(ServiceBusMessage("dropped"), _in(2), timeout=10)
        await sender.send_messages(ServiceBusMessage("plain"), timeout=SEND_TIMEOUT_SECONDS)
        await sender.cancel_scheduled_messages(dropped, timeout=10)
        peeked = await receiver.peek_messages(max_message_count=10, timeout=10)
        assert sorted(body_text(m) for m in peeked) == ["kept", "plain"]
        first, second = await receive_exactly_async(receiver, 2)
        assert [body_text(first), body_text(second)] == ["plain", "kept"]
        assert second.sequence_number == kept[0]
        await receiver.complete_message(first)
        await receiver.complete_message(second)


def test_expired_messages_go_to_the_dead_letter_queue_when_configured(
    client: ServiceBusClient,
) -> None:
    with client.get_queue_sender("expiring") as sender:
        sender.send_messages(
            ServiceBusMessage("stale", message_id="s1"), timeout=SEND_TIMEOUT_SECONDS
        )
    with client.get_queue_receiver("expiring", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (dead,) = receive_exactly(dlq, 1)
        assert dead.message_id == "s1"
        assert dead.dead_letter_reason == "TTLExpiredException"
        assert dead.dead_letter_source == "expiring"
        dlq.complete_message(dead)
    with client.get_queue_receiver("expiring") as receiver:
        assert receiver.peek_messages(max_message_count=5, timeout=10) == []


def test_message_ttl_shorter_than_the_queue_default_applies(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            ServiceBusMessage("brief", time_to_live=datetime.timedelta(seconds=1)),
            timeout=SEND_TIMEOUT_SECONDS,
        )
        sender.send_messages(ServiceBusMessage("lasting"), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        # "work" does not dead-letter on expiry: the bounded wait gives the TTL time to pass
        assert dlq.receive_messages(max_message_count=1, max_wait_time=2) == []
    with client.get_queue_receiver("work") as receiver:
        (only,) = receive_exactly(receiver, 1)
        assert body_text(only) == "lasting"
        receiver.complete_message(only)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_expired_messages_vanish_without_dead_lettering(client: ServiceBusClient) -> None:
    with client.get_queue_sender("vanishing") as sender:
        sender.send_messages(ServiceBusMessage("gone"), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("vanishing", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        assert dlq.receive_messages(max_message_count=1, max_wait_time=2) == []
    with client.get_queue_receiver("vanishing") as receiver:
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_duplicate_message_ids_are_dropped_within_the_window(client: ServiceBusClient) -> None:
    with client.get_queue_sender("dedup") as sender:
        sender.send_messages(
            ServiceBusMessage("first", message_id="order-1"), timeout=SEND_TIMEOUT_SECONDS
        )
        sender.send_messages(
            ServiceBusMessage("again", message_id="order-1"), timeout=SEND_TIMEOUT_SECONDS
        )
        batch = sender.create_message_batch()
        batch.add_message(ServiceBusMessage("in batch", message_id="order-1"))
        batch.add_message(ServiceBusMessage("other", message_id="order-2"))
        sender.send_messages(batch, timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver(
        "dedup", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        got = receive_exactly(receiver, 2)
        assert [body_text(m) for m in got] == ["first", "other"]
        assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_without_duplicate_detection_repeated_ids_are_kept(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        for body in ("a", "b"):
            sender.send_messages(
                ServiceBusMessage(body, message_id="same"), timeout=SEND_TIMEOUT_SECONDS
            )
    with client.get_queue_receiver(
        "work", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        assert [body_text(m) for m in receive_exactly(receiver, 2)] == ["a", "b"]
