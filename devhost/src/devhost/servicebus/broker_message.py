"""A message as the broker's queue model holds it.

The payload is opaque here: it is the wire layer's encoding of the AMQP message. Everything the
model decides on (sequence number, times, state, delivery count, lock, dead-letter metadata) lives
in the fields beside it. Times are integer milliseconds since the Unix epoch.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Hashable
from dataclasses import dataclass


class MessageState(enum.Enum):
    """Where a message stands; a lock is separate (an ACTIVE or DEFERRED message may be locked)."""

    ACTIVE = "active"
    SCHEDULED = "scheduled"
    DEFERRED = "deferred"


@dataclass(slots=True)
class BrokerMessage:
    sequence_number: int  # per entity, from 1, never reused (a DLQ keeps the parent's number)
    payload: bytes
    message_id: str | None
    enqueued_at: int  # for a scheduled message: its scheduled enqueue time
    expires_at: int | None  # None: never
    scheduled_for: int | None
    state: MessageState
    delivery_count: int = 0  # failed deliveries so far = the AMQP header delivery-count
    lock_token: uuid.UUID | None = None
    locked_until: int | None = None
    holder: Hashable | None = None  # the wire layer's key for whoever holds the lock
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    dead_letter_source: str | None = None  # name of the queue it was dead-lettered from
