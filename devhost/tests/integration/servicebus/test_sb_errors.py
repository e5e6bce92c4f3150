"""The broker's errors are the real service's, and one bad client never hurts the others.

Where the SDK would refuse to misbehave (oversized messages, malformed requests), a plain proton
client plays the misbehaving peer.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusError,
)
from devhost_tests_support.sb_helpers import (
    SEND_TIMEOUT_SECONDS,
    body_text,
    broker_config,
    receive_exactly,
)
from proton import Delivery, Message
from proton.utils import BlockingConnection

from devhost.servicebus.server import ServiceBusBroker

pytestmark = pytest.mark.timeout(90)

STANDARD_TIER_LIMIT = 256 * 1024


@pytest.fixture
def raw_connection(broker: ServiceBusBroker) -> Iterator[BlockingConnection]:
    """A plain AMQP client that does not follow the SDK's rules."""
    connection = BlockingConnection(
        f"amqp://127.0.0.1:{broker.port}", timeout=15, allowed_mechs="ANONYMOUS"
    )
    try:
        yield connection
    finally:
        connection.close()


def _round_trip(client: ServiceBusClient, text: str) -> None:
    with client.get_queue_sender("work") as sender:
        sender.send_messages(ServiceBusMessage(text), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work") as receiver:
        (message,) = receive_exactly(receiver, 1)
        assert body_text(message) == text
        receiver.complete_message(message)


def test_unknown_queue_is_entity_not_found_for_senders_and_receivers(
    client: ServiceBusClient,
) -> None:
    with (
        pytest.raises(MessagingEntityNotFoundError, match="could not be found"),
        client.get_queue_sender("no-such-queue") as sender,
    ):
        sender.send_messages(ServiceBusMessage("lost"), timeout=SEND_TIMEOUT_SECONDS)
    with (
        pytest.raises(MessagingEntityNotFoundError, match="no-such-queue"),
        client.get_queue_receiver("no-such-queue") as receiver,
    ):
        receiver.receive_messages(max_message_count=1, max_wait_time=5)
    _round_trip(client, "still serving")


def test_auto_create_accepts_unknown_queues() -> None:
    with (
        ServiceBusBroker(broker_config(auto_create=True)) as broker,
        ServiceBusClient.from_connection_string(broker.connection_string) as client,
    ):
        with client.get_queue_sender("made-up") as sender:
            sender.send_messages(ServiceBusMessage("hello"), timeout=SEND_TIMEOUT_SECONDS)
        with client.get_queue_receiver("made-up") as receiver:
            (message,) = receive_exactly(receiver, 1)
            assert body_text(message) == "hello"
            receiver.complete_message(message)


def test_sending_to_a_dead_letter_queue_is_refused(client: ServiceBusClient) -> None:
    with (
        pytest.raises(ServiceBusError, match="dead-letter"),
        client.get_queue_sender("work/$deadletterqueue") as sender,
    ):
        sender.send_messages(ServiceBusMessage("nope"), timeout=SEND_TIMEOUT_SECONDS)


def test_session_receivers_are_refused_with_a_clear_error(client: ServiceBusClient) -> None:
    with (
        pytest.raises(ServiceBusError, match="Sessions are not supported"),
        client.get_queue_receiver("work", session_id="s1") as receiver,
    ):
        receiver.receive_messages(max_message_count=1, max_wait_time=5)


def test_oversized_messages_are_refused_and_the_limit_is_advertised(
    client: ServiceBusClient,
) -> None:
    with client.get_queue_sender("work") as sender:
        assert sender.create_message_batch().max_size_in_bytes == STANDARD_TIER_LIMIT
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(
                ServiceBusMessage(b"x" * (STANDARD_TIER_LIMIT + 1)), timeout=SEND_TIMEOUT_SECONDS
            )
        sender.send_messages(ServiceBusMessage(b"x" * 200_000), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work") as receiver:
        (message,) = receive_exactly(receiver, 1)
        assert len(body_text(message)) == 200_000
        receiver.complete_message(message)


def test_the_size_limit_is_enforced_for_clients_that_ignore_it(
    raw_connection: BlockingConnection, client: ServiceBusClient
) -> None:
    sender = raw_connection.create_sender("work")
    delivery = sender.send(Message(body=b"x" * (STANDARD_TIER_LIMIT + 1024)), error_states=[])
    assert delivery.remote_state == Delivery.REJECTED
    condition = delivery.remote.condition
    assert condition is not None
    assert condition.name == "amqp:link:message-size-exceeded"
    accepted = sender.send(Message(body=b"small"), error_states=[])
    assert accepted.remote_state == Delivery.ACCEPTED
    with client.get_queue_receiver("work") as receiver:
        (message,) = receive_exactly(receiver, 1)
        assert message.raw_amqp_message.body == b"small"
        receiver.complete_message(message)


def test_a_malformed_transfer_is_rejected_and_the_link_keeps_working(
    raw_connection: BlockingConnection,
) -> None:
    sender = raw_connection.create_sender("work")
    link = sender.link
    broken = link.delivery("broken")
    link.stream(b"\x00\x53\x77\xff")  # an amqp-value section holding no valid value
    link.advance()
    raw_connection.wait(lambda: broken.settled, timeout=15)
    assert broken.remote_state == Delivery.REJECTED
    condition = broken.remote.condition
    assert condition is not None
    assert condition.name == "amqp:decode-error"
    assert sender.send(Message(body="fine"), error_states=[]).remote_state == Delivery.ACCEPTED


def test_bad_management_requests_get_error_answers(raw_connection: BlockingConnection) -> None:
    replies = raw_connection.create_receiver("work/$management", credit=10)
    requests = raw_connection.create_sender("work/$management")

    def ask(operation: str, body: Any) -> dict[str, object]:
        request_id = uuid.uuid4()
        request = Message(
            id=request_id,
            reply_to="work/$management",
            properties={"operation": operation},
            body=body,
        )
        requests.send(request)
        reply = replies.receive(timeout=15)
        assert reply.correlation_id == request_id
        assert reply.properties is not None
        return dict(reply.properties)

    assert ask("com.microsoft:no-such-operation", {})["statusCode"] == 501
    assert ask("com.microsoft:peek-message", "not a map")["statusCode"] == 400
    missing = ask("com.microsoft:renew-lock", {})
    assert missing["statusCode"] == 400
    assert "lock-tokens" in str(missing["statusDescription"])
    lost = ask("com.microsoft:renew-lock", {"lock-tokens": [uuid.uuid4()]})
    assert lost["statusCode"] == 410
    assert lost["errorCondition"] == "com.microsoft:message-lock-lost"
    not_deferred = ask("com.microsoft:receive-by-sequence-number", {"sequence-numbers": [99]})
    assert not_deferred["statusCode"] == 404
    assert not_deferred["errorCondition"] == "com.microsoft:message-not-found"
    empty = ask("com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 5})
    assert empty["statusCode"] == 204


def test_garbage_on_the_socket_closes_only_that_connection(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    _round_trip(client, "before")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as garbage:
        garbage.sendall(b"GET / HTTP/1.1\r\nHost: nope\r\n\r\n" + bytes(range(256)) * 4)
        received = b""
        while chunk := garbage.recv(4096):
            received += chunk
    assert not received.startswith(b"HTTP")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as truncated:
        truncated.sendall(b"AMQP\x03\x01\x00\x00\x00\x00\x00\x41\x02\x01\x00\x00\x00\x53")
    _round_trip(client, "after")
    with client.get_queue_receiver("work", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        assert dlq.receive_messages(max_message_count=1, max_wait_time=1) == []
