"""Send, receive and settle through the real SDK, sync and async."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from devhost_tests_support.sb_helpers import (
    SEND_TIMEOUT_SECONDS,
    body_text,
    receive_exactly,
    receive_exactly_async,
)

from devhost.servicebus.server import ServiceBusBroker

pytestmark = pytest.mark.timeout(90)


def test_all_message_properties_round_trip(client: ServiceBusClient) -> None:
    sent = ServiceBusMessage(
        b"payload",
        message_id="order-17",
        correlation_id="corr-1",
        reply_to="app-replies",
        subject="OrderSubmitted",
        content_type="application/json",
        to="scheduler",
        time_to_live=datetime.timedelta(minutes=5),
        application_properties={"attempt": 2, "tenant": "contoso", "urgent": True},
    )
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)
    with client.get_queue_sender("work") as sender:
        sender.send_messages(sent, timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work") as receiver:
        (got,) = receive_exactly(receiver, 1)
        assert got.message_id == "order-17"
        assert got.correlation_id == "corr-1"
        assert got.reply_to == "app-replies"
        assert got.subject == "OrderSubmitted"
        assert got.content_type == "application/json"
        assert got.to == "scheduler"
        assert got.time_to_live == datetime.timedelta(minutes=5)
        assert got.application_properties == {b"attempt": 2, b"tenant": b"contoso", b"urgent": True}
        assert got.sequence_number == 1
        assert got.delivery_count == 0
        assert got.enqueued_time_utc is not None
        assert got.enqueued_time_utc >= before
        assert got.locked_until_utc is not None
        assert got.locked_until_utc > datetime.datetime.now(datetime.UTC)
        assert got.session_id is None
        assert got.partition_key is None
        assert body_text(got) == "payload"
        receiver.complete_message(got)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


@pytest.mark.parametrize(
    ("body_type", "body"),
    [
        ("value", {"answer": 42, "items": [1, 2, 3]}),
        ("sequence", [[1, "two"], [3.5]]),
        ("data", [b"first chunk", b"second chunk"]),
    ],
)
def test_raw_amqp_body_types_round_trip(
    client: ServiceBusClient, body_type: str, body: Any
) -> None:
    keyword = {"value": "value_body", "sequence": "sequence_body", "data": "data_body"}[body_type]
    with client.get_queue_sender("work") as sender:
        message = AmqpAnnotatedMessage(**{keyword: body})
        sender.send_messages(message, timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver(
        "work", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as rd:
        (got,) = receive_exactly(rd, 1)
    raw = got.raw_amqp_message
    assert raw.body_type == AmqpMessageBodyType(body_type)
    expected = {"value": {b"answer": 42, b"items": [1, 2, 3]}, "sequence": [[1, b"two"], [3.5]]}
    if body_type == "data":
        assert list(raw.body) == body
    else:
        assert (list(raw.body) if body_type == "sequence" else raw.body) == expected[body_type]


def test_batches_and_lists_arrive_in_order(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        batch = sender.create_message_batch()
        for i in range(5):
            batch.add_message(ServiceBusMessage(f"batched-{i}", message_id=f"b{i}"))
        sender.send_messages(batch, timeout=SEND_TIMEOUT_SECONDS)
        sender.send_messages(
            [ServiceBusMessage(f"listed-{i}") for i in range(3)], timeout=SEND_TIMEOUT_SECONDS
        )
        single_batch = sender.create_message_batch()
        single_batch.add_message(AmqpAnnotatedMessage(value_body="lonely"))
        sender.send_messages(single_batch, timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work", prefetch_count=20) as receiver:
        got = receive_exactly(receiver, 9)
        for message in got:
            receiver.complete_message(message)
    texts = [body_text(m) for m in got[:8]]
    assert texts == [f"batched-{i}" for i in range(5)] + [f"listed-{i}" for i in range(3)]
    assert [m.message_id for m in got[:5]] == [f"b{i}" for i in range(5)]
    assert got[8].raw_amqp_message.body == b"lonely"
    assert [m.sequence_number for m in got] == list(range(1, 10))


def test_receive_and_delete_removes_on_delivery(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"m{i}") for i in range(3)], timeout=SEND_TIMEOUT_SECONDS
        )
    with client.get_queue_receiver(
        "work", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        got = receive_exactly(receiver, 3)
    assert [body_text(m) for m in got] == ["m0", "m1", "m2"]
    with client.get_queue_receiver("work") as receiver:
        assert receiver.peek_messages(max_message_count=10, timeout=10) == []


def test_abandon_redelivers_with_a_higher_delivery_count(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(ServiceBusMessage("retry me"), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work") as receiver:
        (first,) = receive_exactly(receiver, 1)
        receiver.abandon_message(first)
        (second,) = receive_exactly(receiver, 1)
        assert second.sequence_number == first.sequence_number
        assert second.delivery_count == 1
        receiver.complete_message(second)


def test_dead_letter_reason_and_description_on_the_dead_letter_queue(
    client: ServiceBusClient,
) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            ServiceBusMessage("poison", message_id="p1"), timeout=SEND_TIMEOUT_SECONDS
        )
    with client.get_queue_receiver("work") as receiver:
        (message,) = receive_exactly(receiver, 1)
        receiver.dead_letter_message(
            message, reason="SchemaInvalid", error_description="field 'OrderID' is missing"
        )
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
    with client.get_queue_receiver("work", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (dead,) = receive_exactly(dlq, 1)
        assert dead.message_id == "p1"
        assert body_text(dead) == "poison"
        assert dead.dead_letter_reason == "SchemaInvalid"
        assert dead.dead_letter_error_description == "field 'OrderID' is missing"
        assert dead.dead_letter_source == "work"
        dlq.complete_message(dead)


def test_defer_then_receive_deferred_and_settle(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            [ServiceBusMessage("later"), ServiceBusMessage("now")], timeout=SEND_TIMEOUT_SECONDS
        )
    with client.get_queue_receiver("work") as receiver:
        later, now = receive_exactly(receiver, 2)
        receiver.defer_message(later)
        receiver.complete_message(now)
        assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        assert later.sequence_number is not None
        (deferred,) = receiver.receive_deferred_messages([later.sequence_number], timeout=10)
        assert body_text(deferred) == "later"
        assert deferred.lock_token is not None
        receiver.complete_message(deferred)
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=1, timeout=10)
        assert peeked == []


def test_peek_shows_every_state_without_locking(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"m{i}") for i in range(3)], timeout=SEND_TIMEOUT_SECONDS
        )
    with client.get_queue_receiver("work") as receiver:
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=1, timeout=10)
        assert [body_text(m) for m in peeked] == ["m0", "m1", "m2"]
        assert [m.sequence_number for m in peeked] == [1, 2, 3]
        got = receive_exactly(receiver, 3)
        for message in got:
            receiver.complete_message(message)


def test_iterator_receive_with_and_without_prefetch(client: ServiceBusClient) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"m{i}") for i in range(6)], timeout=SEND_TIMEOUT_SECONDS
        )
    seen: list[str] = []
    for prefetch in (0, 10):
        with client.get_queue_receiver(
            "work", max_wait_time=5, prefetch_count=prefetch
        ) as receiver:
            for message in receiver:
                seen.append(body_text(message))
                receiver.complete_message(message)
                if len(seen) in (3, 6):
                    break
    assert seen == [f"m{i}" for i in range(6)]


@pytest.mark.asyncio
async def test_async_client_send_receive_settle(broker: ServiceBusBroker) -> None:
    async with AsyncServiceBusClient.from_connection_string(broker.connection_string) as client:
        async with client.get_queue_sender("work") as sender:
            batch = await sender.create_message_batch()
            for i in range(4):
                batch.add_message(ServiceBusMessage(f"async-{i}", message_id=str(uuid.uuid4())))
            await sender.send_messages(batch, timeout=SEND_TIMEOUT_SECONDS)
        async with client.get_queue_receiver("work", prefetch_count=5) as receiver:
            completed, abandoned, dead, deferred = await receive_exactly_async(receiver, 4)
            await receiver.complete_message(completed)
            await receiver.abandon_message(abandoned)
            await receiver.dead_letter_message(dead, reason="r", error_description="d")
            await receiver.defer_message(deferred)
            (again,) = await receive_exactly_async(receiver, 1)
            assert body_text(again) == "async-1"
            assert again.delivery_count == 1
            await receiver.complete_message(again)
            assert deferred.sequence_number is not None
            (back,) = await receiver.receive_deferred_messages(
                [deferred.sequence_number], timeout=10
            )
            await receiver.complete_message(back)
        async with client.get_queue_receiver(
            "work", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dlq:
            (dead_again,) = await receive_exactly_async(dlq, 1)
            assert dead_again.dead_letter_reason == "r"
            assert body_text(dead_again) == "async-2"
            await dlq.complete_message(dead_again)


@pytest.mark.asyncio
async def test_async_receive_and_delete_and_peek(broker: ServiceBusBroker) -> None:
    async with AsyncServiceBusClient.from_connection_string(broker.connection_string) as client:
        async with client.get_queue_sender("work") as sender:
            await sender.send_messages(
                [ServiceBusMessage(f"m{i}") for i in range(3)], timeout=SEND_TIMEOUT_SECONDS
            )
        async with client.get_queue_receiver(
            "work", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            peeked = await receiver.peek_messages(max_message_count=5, timeout=10)
            assert [m.sequence_number for m in peeked] == [1, 2, 3]
            got = await receive_exactly_async(receiver, 3)
            assert [body_text(m) for m in got] == ["m0", "m1", "m2"]
            assert await receiver.peek_messages(max_message_count=5, timeout=10) == []
