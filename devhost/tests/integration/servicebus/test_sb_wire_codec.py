"""The wire codec against real AMQP encodings (proton's), without a broker."""

from __future__ import annotations

import struct
import uuid

import pytest
from proton import Message, symbol, timestamp

from devhost.servicebus.wire_codec import (
    DeadLetterInfo,
    MalformedMessage,
    encode_delivery,
    parse_message,
    split_transfer,
)


def _data_section(content: bytes) -> bytes:
    return b"\x00\x53\x75\xb0" + struct.pack(">I", len(content)) + content


def _decoded(
    payload: bytes,
    *,
    delivery_count: int,
    locked_until: int | None = None,
    dead_letter: DeadLetterInfo | None = None,
) -> Message:
    message = Message()
    message.decode(
        encode_delivery(
            payload,
            sequence_number=7,
            enqueued_at=1_000,
            delivery_count=delivery_count,
            locked_until=locked_until,
            dead_letter=dead_letter,
        )
    )
    return message


@pytest.mark.parametrize(
    ("message_id", "key"),
    [
        ("order-1", "order-1"),
        (uuid.UUID(int=5), str(uuid.UUID(int=5))),
        (42, "42"),
        (b"\x01\x02", "0102"),
    ],
)
def test_every_message_id_type_gives_a_duplicate_detection_key(
    message_id: object, key: str
) -> None:
    raw = Message(id=message_id, body="x").encode()
    assert parse_message(raw).message_id == key


def test_ttl_and_scheduled_time_are_read_and_the_client_cannot_set_broker_annotations() -> None:
    sent = Message(body="x", ttl=30, durable=True, priority=7)
    sent.annotations = {
        symbol("x-opt-scheduled-enqueue-time"): timestamp(1_700_000_000_000),
        symbol("x-opt-sequence-number"): 999,
        symbol("x-opt-partition-key"): "pk",
    }
    incoming = parse_message(sent.encode())
    assert incoming.time_to_live_ms == 30_000
    assert incoming.scheduled_for == 1_700_000_000_000
    delivered = _decoded(incoming.payload, delivery_count=3, locked_until=2_000)
    assert delivered.annotations == {
        symbol("x-opt-scheduled-enqueue-time"): 1_700_000_000_000,
        symbol("x-opt-partition-key"): "pk",
        symbol("x-opt-sequence-number"): 7,
        symbol("x-opt-enqueued-time"): 1_000,
        symbol("x-opt-locked-until"): 2_000,
    }
    assert (delivered.delivery_count, delivered.first_acquirer) == (3, False)
    assert (delivered.ttl, delivered.durable, delivered.priority) == (30, True, 7)


def test_dead_letter_details_replace_any_the_client_sent() -> None:
    sent = Message(body="x", properties={"DeadLetterReason": "forged", "kept": 1})
    payload = parse_message(sent.encode()).payload
    info = DeadLetterInfo("MaxDeliveryCountExceeded", "tried 3 times", "orders")
    delivered = _decoded(payload, delivery_count=3, dead_letter=info)
    assert delivered.properties == {
        "kept": 1,
        "DeadLetterReason": "MaxDeliveryCountExceeded",
        "DeadLetterErrorDescription": "tried 3 times",
    }
    assert delivered.annotations is not None
    assert delivered.annotations[symbol("x-opt-deadletter-source")] == "orders"


def test_batch_envelopes_are_split_even_with_one_value_bodied_message() -> None:
    inner = [Message(id="a", body={"k": 1}).encode(), Message(id="b", body=b"raw").encode()]
    envelope = Message(id="a").encode()  # properties only: the SDK's envelope carries no body
    assert split_transfer(envelope + _data_section(inner[0])) == [inner[0]]
    assert split_transfer(envelope + b"".join(_data_section(m) for m in inner)) == inner


def test_plain_data_bodies_are_not_mistaken_for_batches() -> None:
    single = Message(id="x", body=b"\x00\x53not a message").encode()
    assert split_transfer(single) == [single]


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x53\x77\xa1\x10short",  # string longer than the data
        b"\x00\x53\x77\xff",  # no such type
        b"\x01\x02\x03",  # not a described section
    ],
)
def test_malformed_messages_are_refused(raw: bytes) -> None:
    with pytest.raises(MalformedMessage):
        split_transfer(raw)
    with pytest.raises(MalformedMessage):
        parse_message(raw)
