"""Per-message work on the wire: sending deliveries, taking transfers, applying settlements.

Implements Service Bus settlement rules as the azure-servicebus SDK expects them: PEEK_LOCK
deliveries carry the lock token as their delivery tag (UUID bytes_le); a receiver's disposition is
applied to the queue model and echoed back settled (accepted = complete, modified(failed) =
abandon, modified(failed, undeliverable) = defer, rejected with com.microsoft:dead-letter =
dead-letter, released or settled without outcome = release, not counted); a lost lock is answered
with rejected + com.microsoft:message-lock-lost (SDK: MessageLockLostError). Transfers over the
entity's size limit are rejected with amqp:link:message-size-exceeded (MessageSizeExceededError).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from proton import Condition, Delivery, symbol

from devhost.servicebus.entities import BrokerMessage, InvalidOperation, LockLost, Queue
from devhost.servicebus.link_states import Consumer
from devhost.servicebus.management import (
    LOCK_LOST,
    LOCK_LOST_DESCRIPTION,
    MESSAGE_SIZE_EXCEEDED,
    NOT_ALLOWED,
    encode_broker_message,
)
from devhost.servicebus.wire_codec import MalformedMessage, parse_message, split_transfer

logger = logging.getLogger(__name__)

DECODE_ERROR = "amqp:decode-error"
DEAD_LETTER_CONDITION_INFO = ("DeadLetterReason", "DeadLetterErrorDescription")


def amqp_error(condition: str, description: str) -> Condition:
    """An AMQP error as the service sends it: with an info map (the SDK's sender indexes it)."""
    info: Any = {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())}
    return Condition(condition, description, info)


def settle(delivery: Any, outcome: Any, condition: Condition | None = None) -> None:
    if condition is not None:
        delivery.local.condition = condition
    delivery.update(outcome)
    delivery.settle()


def send_message(consumer: Consumer, message: BrokerMessage) -> None:
    data = encode_broker_message(message, dead_letter_queue=consumer.dead_letter_queue)
    link = consumer.link
    if consumer.peek_lock and message.lock_token is not None:
        delivery = link.delivery(message.lock_token.bytes_le)
        delivery.servicebus_lock = message.lock_token
        link.stream(data)
        link.advance()
    else:
        delivery = link.delivery(next(consumer.tags).to_bytes(8, "big"))
        link.stream(data)
        link.advance()
        delivery.settle()


def take_transfer(queue: Queue, delivery: Any, raw: bytes) -> None:
    """Enqueue one transfer (a message or an SDK batch) and accept it, or reject it."""
    limit = queue.settings.max_message_size
    if len(raw) > limit:
        description = (
            f"The received message (size: {len(raw)} bytes) exceeds the limit ({limit} bytes) "
            f"currently allowed on the link of entity '{queue.name}'."
        )
        settle(delivery, Delivery.REJECTED, amqp_error(MESSAGE_SIZE_EXCEEDED, description))
        return
    try:
        messages = [parse_message(part) for part in split_transfer(raw)]
    except MalformedMessage as exc:
        logger.info("queue=%s rejected a malformed message: %s", queue.name, exc)
        settle(delivery, Delivery.REJECTED, amqp_error(DECODE_ERROR, str(exc)))
        return
    for message in messages:
        queue.enqueue(
            message.payload,
            message_id=message.message_id,
            time_to_live_ms=message.time_to_live_ms,
            scheduled_for=message.scheduled_for,
        )
    settle(delivery, Delivery.ACCEPTED)


def apply_disposition(consumer: Consumer, delivery: Any) -> None:
    """Apply a receiver's outcome for a locked delivery, then send the settled echo."""
    token = getattr(delivery, "servicebus_lock", None)
    if token is None or consumer.queue is None:
        delivery.settle()
        return
    queue = consumer.queue
    outcome = delivery.remote_state
    remote = delivery.remote
    try:
        if outcome == Delivery.ACCEPTED:
            queue.complete(token)
        elif outcome == Delivery.REJECTED:
            info = (remote.condition.info if remote.condition else None) or {}
            reason, description = (info.get(key) for key in DEAD_LETTER_CONDITION_INFO)
            queue.dead_letter(
                token,
                str(reason) if reason is not None else None,
                str(description) if description is not None else None,
            )
        elif outcome == Delivery.MODIFIED:
            if remote.undeliverable:
                queue.defer(token)
            else:
                queue.abandon(token)
            delivery.local.failed = remote.failed
            delivery.local.undeliverable = remote.undeliverable
        elif outcome == Delivery.RELEASED or delivery.settled:
            # settled without an outcome: the client let go of it unprocessed
            queue.release(token)
            outcome = Delivery.RELEASED
        else:
            return
    except LockLost:
        settle(delivery, Delivery.REJECTED, amqp_error(LOCK_LOST, LOCK_LOST_DESCRIPTION))
        return
    except InvalidOperation as exc:
        settle(delivery, Delivery.REJECTED, amqp_error(NOT_ALLOWED, str(exc)))
        return
    # the echo the SDK waits for; a rejected echo carries no error, or the SDK raises
    settle(delivery, outcome)
