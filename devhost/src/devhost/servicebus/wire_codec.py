"""Service Bus messages on the wire: incoming transfers -> stored payloads -> outgoing deliveries.

Implements the message-level Service Bus semantics: property round-trip (the bare message is
stored byte for byte), the header's delivery-count (always written in full: the SDK reads an omitted
field as None), the broker's message annotations (sequence number, enqueued time, locked-until,
message state, dead-letter source), dead-letter reason/description as application properties,
message id / TTL / scheduled enqueue time extraction, and the SDK's batch envelopes.

The stored payload is opaque to the queue model. Its layout keeps the pieces a delivery needs
apart, so building a delivery is a byte concatenation rather than a decode/encode round trip:

    version:1 flags:1 priority:1 ttl:4 | ann_count:4 ann_len:4 ann_entries
    | props_len:4 properties_section | app_count:4 app_len:4 app_entries | body_and_footer
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from devhost.servicebus.amqp_types import (
    MalformedAmqp,
    decode_value,
    encode_long,
    encode_map32,
    encode_string,
    encode_symbol,
    encode_timestamp,
    skip_value,
)

_PAYLOAD_VERSION = 1
_PREFIX = struct.Struct(">BBBI")
_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")

_FLAG_DURABLE = 1
_FLAG_PRIORITY = 2
_FLAG_TTL = 4

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = range(
    0x70, 0x75
)
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = range(0x75, 0x79)
_BODY_SECTIONS = frozenset((DATA, AMQP_SEQUENCE, AMQP_VALUE))
_SECTION_NAMES = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}

SCHEDULED_ENQUEUE_TIME = "x-opt-scheduled-enqueue-time"
# Annotations only the broker sets; a client's copy (e.g. a received message sent on) is dropped.
_BROKER_ANNOTATIONS = frozenset(
    (
        "x-opt-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-lock-token",
        "x-opt-message-state",
        "x-opt-deadletter-source",
        "x-opt-enqueue-sequence-number",
    )
)
_DEAD_LETTER_PROPERTIES = frozenset(("DeadLetterReason", "DeadLetterErrorDescription"))

_KEY_SEQUENCE_NUMBER = encode_symbol("x-opt-sequence-number")
_KEY_ENQUEUED_TIME = encode_symbol("x-opt-enqueued-time")
_KEY_LOCKED_UNTIL = encode_symbol("x-opt-locked-until")
_KEY_MESSAGE_STATE = encode_symbol("x-opt-message-state")
_KEY_DEAD_LETTER_SOURCE = encode_symbol("x-opt-deadletter-source")
_KEY_DEAD_LETTER_REASON = encode_string("DeadLetterReason")
_KEY_DEAD_LETTER_DESCRIPTION = encode_string("DeadLetterErrorDescription")

# ServiceBusMessageState values the SDK maps x-opt-message-state to
STATE_ACTIVE, STATE_DEFERRED, STATE_SCHEDULED = 0, 1, 2


class MalformedMessage(ValueError):
    """A transfer that is not a well-formed AMQP message."""


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """One message as the queue model needs it."""

    payload: bytes
    message_id: str | None
    time_to_live_ms: int | None
    scheduled_for: int | None


@dataclass(frozen=True, slots=True)
class DeadLetterInfo:
    reason: str | None
    description: str | None
    source: str | None


def _split_sections(raw: bytes) -> list[tuple[int, int, int, int]]:
    """(section code, section start, value start, section end) for each section, in order."""
    sections = []
    pos, size = 0, len(raw)
    while pos < size:
        if raw[pos] != 0x00:
            raise MalformedMessage(f"expected a described section at offset {pos}")
        descriptor = raw[pos + 1] if pos + 1 < size else -1
        if descriptor == 0x53:
            code, value_at = raw[pos + 2], pos + 3
        else:
            value_at = skip_value(raw, pos + 1)
            name, _ = decode_value(raw, pos + 1)
            code = name if isinstance(name, int) else _SECTION_NAMES.get(str(name), -1)
        if not HEADER <= code <= FOOTER:
            raise MalformedMessage(f"unknown message section descriptor at offset {pos}")
        end = skip_value(raw, value_at)
        sections.append((code, pos, value_at, end))
        pos = end
    return sections


def _map_entries(raw: bytes, value_at: int) -> tuple[int, int, int]:
    """(count, entries start, entries end) of the map encoded at value_at."""
    code = raw[value_at]
    if code == 0xC1:
        return raw[value_at + 2], value_at + 3, value_at + 2 + raw[value_at + 1]
    if code == 0xD1:
        size, count = _U32_PAIR.unpack_from(raw, value_at + 1)
        return count, value_at + 9, value_at + 5 + size
    if code == 0x40:
        return 0, value_at + 1, value_at + 1
    raise MalformedMessage(f"expected a map at offset {value_at}")


def parse_message(raw: bytes) -> IncomingMessage:
    """Turn one encoded message into the payload the broker stores."""
    try:
        return _parse_message(raw)
    except (MalformedAmqp, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"malformed AMQP message: {exc}") from exc


def _parse_message(raw: bytes) -> IncomingMessage:
    flags, priority, ttl = 0, 0, 0
    message_id: str | None = None
    scheduled_for: int | None = None
    ann_count, ann_entries = 0, b""
    properties = b""
    app_count, app_entries = 0, b""
    tail_start = len(raw)
    for code, start, value_at, end in _split_sections(raw):
        if code == HEADER:
            fields, _ = decode_value(raw, value_at)
            fields = (fields or []) + [None] * 3
            if fields[0]:
                flags |= _FLAG_DURABLE
            if fields[1] is not None:
                flags |= _FLAG_PRIORITY
                priority = int(fields[1])
            if fields[2]:
                flags |= _FLAG_TTL
                ttl = int(fields[2])
        elif code == MESSAGE_ANNOTATIONS:
            ann_count, ann_entries, scheduled_for = _client_annotations(raw, value_at)
        elif code == PROPERTIES:
            properties = raw[start:end]
            first = _first_list_item(raw, value_at)
            if first is not None:
                message_id = _message_id_text(first)
        elif code == APPLICATION_PROPERTIES:
            app_count, first, last = _map_entries(raw, value_at)
            app_entries = raw[first:last]
        elif code in _BODY_SECTIONS or code == FOOTER:
            tail_start = min(tail_start, start)
    payload = b"".join(
        (
            _PREFIX.pack(_PAYLOAD_VERSION, flags, priority, ttl),
            _U32_PAIR.pack(ann_count, len(ann_entries)),
            ann_entries,
            _U32.pack(len(properties)),
            properties,
            _U32_PAIR.pack(app_count, len(app_entries)),
            app_entries,
            raw[tail_start:],
        )
    )
    return IncomingMessage(
        payload=payload,
        message_id=message_id,
        time_to_live_ms=ttl if flags & _FLAG_TTL else None,
        scheduled_for=scheduled_for,
    )


def _first_list_item(raw: bytes, value_at: int) -> Any:
    """The first element of the list at value_at (None if empty): the message id, decoded alone."""
    code = raw[value_at]
    if code == 0xC0:
        return decode_value(raw, value_at + 3)[0] if raw[value_at + 2] else None
    if code == 0xD0:
        return (
            decode_value(raw, value_at + 9)[0] if _U32.unpack_from(raw, value_at + 5)[0] else None
        )
    if code in (0x45, 0x40):
        return None
    raise MalformedMessage(f"expected a list at offset {value_at}")


def _client_annotations(raw: bytes, value_at: int) -> tuple[int, bytes, int | None]:
    count, cursor, last = _map_entries(raw, value_at)
    kept: list[bytes] = []
    scheduled_for: int | None = None
    for _ in range(count // 2):
        key_at = cursor
        key, value_at = decode_value(raw, cursor)
        cursor = skip_value(raw, value_at)
        if key in _BROKER_ANNOTATIONS:
            continue
        if key == SCHEDULED_ENQUEUE_TIME:
            value, _ = decode_value(raw, value_at)
            scheduled_for = int(value) if value is not None else None
        kept.append(raw[key_at:cursor])
    if cursor != last:
        raise MalformedMessage("message annotations map size does not match its entries")
    return 2 * len(kept), b"".join(kept), scheduled_for


def _message_id_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def split_transfer(raw: bytes) -> list[bytes]:
    """The messages one transfer carries: the inner messages of an SDK batch, else [raw].

    The SDK sends batches with message-format 0x80013700, which proton's Python binding does not
    expose, so a batch is recognised by its shape: a body made only of data sections, each of
    which is itself a complete AMQP message with a body.
    """
    try:
        sections = _split_sections(raw)
    except (MalformedAmqp, IndexError, struct.error) as exc:
        raise MalformedMessage(f"malformed AMQP message: {exc}") from exc
    bodies = [s for s in sections if s[0] in _BODY_SECTIONS]
    if not bodies or any(code != DATA for code, *_ in bodies):
        return [raw]
    inner: list[bytes] = []
    for _, _, value_at, end in bodies:
        content = raw[end - _binary_length(raw, value_at) : end]
        if not _is_encoded_message(content):
            return [raw]
        inner.append(content)
    return inner


def _binary_length(raw: bytes, value_at: int) -> int:
    if raw[value_at] == 0xA0:
        return raw[value_at + 1]
    return int(_U32.unpack_from(raw, value_at + 1)[0])


def _is_encoded_message(content: bytes) -> bool:
    if content[:2] != b"\x00\x53":
        return False
    try:
        sections = _split_sections(content)
    except (MalformedMessage, MalformedAmqp, IndexError, struct.error):
        return False
    return any(code in _BODY_SECTIONS for code, *_ in sections)


def encode_delivery(
    payload: bytes,
    *,
    sequence_number: int,
    enqueued_at: int,
    delivery_count: int,
    state: int = STATE_ACTIVE,
    locked_until: int | None = None,
    dead_letter: DeadLetterInfo | None = None,
) -> bytes:
    """The full encoded message to send to a receiver (or return from peek/receive-deferred)."""
    version, flags, priority, ttl = _PREFIX.unpack_from(payload, 0)
    if version != _PAYLOAD_VERSION:
        raise ValueError(f"stored message payload has unknown format version {version}")
    cursor = _PREFIX.size
    ann_count, ann_len = _U32_PAIR.unpack_from(payload, cursor)
    cursor += 8
    annotations = [
        payload[cursor : cursor + ann_len],
        _KEY_SEQUENCE_NUMBER,
        encode_long(sequence_number),
        _KEY_ENQUEUED_TIME,
        encode_timestamp(enqueued_at),
    ]
    ann_count += 4
    cursor += ann_len
    if locked_until is not None:
        annotations += (_KEY_LOCKED_UNTIL, encode_timestamp(locked_until))
        ann_count += 2
    if state != STATE_ACTIVE:
        annotations += (_KEY_MESSAGE_STATE, encode_long(state))
        ann_count += 2
    if dead_letter is not None and dead_letter.source:
        annotations += (_KEY_DEAD_LETTER_SOURCE, encode_string(dead_letter.source))
        ann_count += 2
    (props_len,) = _U32.unpack_from(payload, cursor)
    cursor += 4
    properties = payload[cursor : cursor + props_len]
    cursor += props_len
    app_count, app_len = _U32_PAIR.unpack_from(payload, cursor)
    cursor += 8
    app_entries = payload[cursor : cursor + app_len]
    cursor += app_len
    if dead_letter is not None:
        app_count, app_entries = _with_dead_letter_properties(app_count, app_entries, dead_letter)
    header = _encode_header(flags, priority, ttl, delivery_count)
    app_section = b"\x00\x53\x74" + encode_map32(app_entries, app_count) if app_count else b""
    return b"".join(
        (
            header,
            b"\x00\x53\x72",
            encode_map32(b"".join(annotations), ann_count),
            properties,
            app_section,
            payload[cursor:],
        )
    )


def _encode_header(flags: int, priority: int, ttl: int, delivery_count: int) -> bytes:
    fields = b"".join(
        (
            b"\x41" if flags & _FLAG_DURABLE else b"\x42",
            b"\x50" + bytes((priority if flags & _FLAG_PRIORITY else 4,)),
            b"\x70" + _U32.pack(ttl) if flags & _FLAG_TTL else b"\x40",
            b"\x41" if delivery_count == 0 else b"\x42",
            b"\x70" + _U32.pack(delivery_count),
        )
    )
    return b"\x00\x53\x70\xc0" + bytes((len(fields) + 1, 5)) + fields


def _with_dead_letter_properties(
    count: int, entries: bytes, dead_letter: DeadLetterInfo
) -> tuple[int, bytes]:
    pairs: list[bytes] = []
    cursor = 0
    for _ in range(count // 2):
        key_at = cursor
        key, value_at = decode_value(entries, cursor)
        cursor = skip_value(entries, value_at)
        if key not in _DEAD_LETTER_PROPERTIES:
            pairs.append(entries[key_at:cursor])
    if dead_letter.reason is not None:
        pairs.append(_KEY_DEAD_LETTER_REASON + encode_string(dead_letter.reason))
    if dead_letter.description is not None:
        pairs.append(_KEY_DEAD_LETTER_DESCRIPTION + encode_string(dead_letter.description))
    return 2 * len(pairs), b"".join(pairs)


@dataclass(frozen=True, slots=True)
class RequestMessage:
    """A $cbs or $management request: fully decoded (requests are small and rare)."""

    message_id: str | bytes | uuid.UUID | int | None
    reply_to: str | None
    application_properties: dict[str, object]
    body: object


def decode_request(raw: bytes) -> RequestMessage:
    try:
        message_id: str | bytes | uuid.UUID | int | None = None
        reply_to: str | None = None
        application_properties: dict[str, object] = {}
        body: object = None
        for code, _, value_at, _ in _split_sections(raw):
            if code in (PROPERTIES, APPLICATION_PROPERTIES, AMQP_VALUE):
                value, _ = decode_value(raw, value_at)
                if code == PROPERTIES:
                    fields = (value or []) + [None] * 5
                    message_id, reply_to = fields[0], fields[4]
                elif code == APPLICATION_PROPERTIES:
                    application_properties = {str(k): v for k, v in (value or {}).items()}
                else:
                    body = value
    except (MalformedAmqp, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"malformed request message: {exc}") from exc
    return RequestMessage(message_id, reply_to, application_properties, body)
