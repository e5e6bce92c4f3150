"""The ``<entity>/$management`` request/response operations the azure-servicebus SDK uses.

renew-lock, peek-message, schedule-message, cancel-scheduled-message, update-disposition and
receive-by-sequence-number, answered with the real service's status codes and error conditions:
410 + com.microsoft:message-lock-lost (SDK: MessageLockLostError), 404 +
com.microsoft:message-not-found (MessageNotFoundError), 413-style
amqp:link:message-size-exceeded (MessageSizeExceededError), 400 + com.microsoft:argument-error.
Every failure is an answer, never an exception escaping into the IO loop.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from proton import UNDESCRIBED, Array, Data

from devhost.servicebus.entities import (
    BrokerMessage,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    MessageState,
    Queue,
)
from devhost.servicebus.wire_codec import (
    STATE_ACTIVE,
    STATE_DEFERRED,
    STATE_SCHEDULED,
    DeadLetterInfo,
    MalformedMessage,
    encode_delivery,
    parse_message,
)

logger = logging.getLogger(__name__)

LOCK_LOST = "com.microsoft:message-lock-lost"
MESSAGE_NOT_FOUND = "com.microsoft:message-not-found"
ARGUMENT_ERROR = "com.microsoft:argument-error"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
NOT_IMPLEMENTED = "amqp:not-implemented"
NOT_ALLOWED = "amqp:not-allowed"
INTERNAL_ERROR = "amqp:internal-error"

LOCK_LOST_DESCRIPTION = (
    "The lock supplied is invalid. Either the lock expired, or the message has already been "
    "removed from the queue, or was received by a different receiver instance."
)
_RECEIVE_AND_DELETE = 0  # receiver-settle-mode "first", as the SDK sends it for RECEIVE_AND_DELETE

_STATE_ON_WIRE = {
    MessageState.ACTIVE: STATE_ACTIVE,
    MessageState.DEFERRED: STATE_DEFERRED,
    MessageState.SCHEDULED: STATE_SCHEDULED,
}


@dataclass(frozen=True)
class ManagementResponse:
    status_code: int
    description: str
    body: Any = None
    error_condition: str | None = None


class RequestError(Exception):
    """A request the broker answers with an error status."""

    def __init__(self, status_code: int, condition: str, description: str) -> None:
        super().__init__(description)
        self.status_code = status_code
        self.condition = condition
        self.description = description


def encode_broker_message(message: BrokerMessage, *, dead_letter_queue: bool) -> bytes:
    """A stored message as the SDK expects to receive or peek it."""
    dead_letter = None
    if dead_letter_queue:
        dead_letter = DeadLetterInfo(
            message.dead_letter_reason,
            message.dead_letter_description,
            message.dead_letter_source,
        )
    return encode_delivery(
        message.payload,
        sequence_number=message.sequence_number,
        enqueued_at=message.enqueued_at,
        delivery_count=message.delivery_count,
        state=_STATE_ON_WIRE[message.state],
        locked_until=message.locked_until,
        dead_letter=dead_letter,
    )


def _array(element_type: int, values: list[int]) -> Array:
    # proton's stubs do not list UNDESCRIBED among the descriptors Array accepts
    return Array(cast(Any, UNDESCRIBED), element_type, *values)


def _field(body: Mapping[str, Any], name: str) -> Any:
    if name not in body:
        raise RequestError(400, ARGUMENT_ERROR, f"The request is missing the '{name}' field.")
    return body[name]


def _lock_tokens(body: Mapping[str, Any]) -> list[uuid.UUID]:
    tokens = _field(body, "lock-tokens")
    try:
        return [t if isinstance(t, uuid.UUID) else uuid.UUID(str(t)) for t in tokens]
    except (TypeError, ValueError) as exc:
        raise RequestError(400, ARGUMENT_ERROR, f"Invalid lock token: {exc}.") from exc


def _sequence_numbers(body: Mapping[str, Any]) -> list[int]:
    try:
        return [int(n) for n in _field(body, "sequence-numbers")]
    except (TypeError, ValueError) as exc:
        raise RequestError(400, ARGUMENT_ERROR, f"Invalid sequence numbers: {exc}.") from exc


class ManagementOperations:
    """Answers one queue's management requests; ``holder`` keys locks taken through it."""

    def __init__(self, queue: Queue, *, dead_letter_queue: bool) -> None:
        self._queue = queue
        self._dead_letter_queue = dead_letter_queue
        self._handlers: dict[str, Callable[[Mapping[str, Any], Hashable], ManagementResponse]] = {
            "com.microsoft:renew-lock": self._renew_lock,
            "com.microsoft:peek-message": self._peek,
            "com.microsoft:schedule-message": self._schedule,
            "com.microsoft:cancel-scheduled-message": self._cancel_scheduled,
            "com.microsoft:update-disposition": self._update_disposition,
            "com.microsoft:receive-by-sequence-number": self._receive_by_sequence_number,
        }

    def handle(self, operation: str, body: Any, holder: Hashable) -> ManagementResponse:
        handler = self._handlers.get(operation)
        if handler is None:
            return ManagementResponse(
                501,
                f"The operation '{operation}' is not supported by the local broker "
                "(sessions, rules and topics are not implemented).",
                error_condition=NOT_IMPLEMENTED,
            )
        if not isinstance(body, Mapping):
            return ManagementResponse(
                400, "The request body must be an AMQP map.", error_condition=ARGUMENT_ERROR
            )
        try:
            return handler(body, holder)
        except RequestError as exc:
            return ManagementResponse(
                exc.status_code, exc.description, error_condition=exc.condition
            )
        except LockLost:
            return ManagementResponse(410, LOCK_LOST_DESCRIPTION, error_condition=LOCK_LOST)
        except InvalidOperation as exc:
            return ManagementResponse(400, str(exc), error_condition=NOT_ALLOWED)

    def _renew_lock(self, body: Mapping[str, Any], holder: Hashable) -> ManagementResponse:
        expirations = [self._queue.renew_lock(token) for token in _lock_tokens(body)]
        return ManagementResponse(200, "OK", {"expirations": _array(Data.TIMESTAMP, expirations)})

    def _peek(self, body: Mapping[str, Any], holder: Hashable) -> ManagementResponse:
        try:
            start = int(_field(body, "from-sequence-number"))
            count = int(_field(body, "message-count"))
        except (TypeError, ValueError) as exc:
            raise RequestError(400, ARGUMENT_ERROR, f"Invalid peek arguments: {exc}.") from exc
        peeked = self._queue.peek(start, count)
        if not peeked:
            return ManagementResponse(204, "No messages to peek.")
        messages = [
            {"message": encode_broker_message(m, dead_letter_queue=self._dead_letter_queue)}
            for m in peeked
        ]
        return ManagementResponse(200, "OK", {"messages": messages})

    def _schedule(self, body: Mapping[str, Any], holder: Hashable) -> ManagementResponse:
        limit = self._queue.settings.max_message_size
        incoming = []
        for item in _field(body, "messages"):
            raw = item.get("message") if isinstance(item, Mapping) else None
            if not isinstance(raw, bytes):
                raise RequestError(400, ARGUMENT_ERROR, "Each scheduled message needs 'message'.")
            if len(raw) > limit:
                raise RequestError(
                    413,
                    MESSAGE_SIZE_EXCEEDED,
                    f"The message size of {len(raw)} bytes exceeds the limit of {limit} bytes "
                    f"of entity '{self._queue.name}'.",
                )
            try:
                incoming.append(parse_message(raw))
            except MalformedMessage as exc:
                raise RequestError(400, ARGUMENT_ERROR, str(exc)) from exc
        sequence_numbers = []
        for message in incoming:
            stored = self._queue.enqueue(
                message.payload,
                message_id=message.message_id,
                time_to_live_ms=message.time_to_live_ms,
                scheduled_for=message.scheduled_for,
            )
            # A duplicate is dropped but still acknowledged, as on the real service.
            sequence_numbers.append(stored.sequence_number if stored is not None else 0)
        return ManagementResponse(
            200, "OK", {"sequence-numbers": _array(Data.LONG, sequence_numbers)}
        )

    def _cancel_scheduled(self, body: Mapping[str, Any], holder: Hashable) -> ManagementResponse:
        self._queue.cancel_scheduled(_sequence_numbers(body))
        return ManagementResponse(200, "OK", {})

    def _update_disposition(self, body: Mapping[str, Any], holder: Hashable) -> ManagementResponse:
        status = _field(body, "disposition-status")
        tokens = _lock_tokens(body)
        for token in tokens:
            if status == "completed":
                self._queue.complete(token)
            elif status == "abandoned":
                self._queue.abandon(token)
            elif status == "defered":
                self._queue.defer(token)
            elif status == "suspended":
                self._queue.dead_letter(
                    token,
                    body.get("deadletter-reason") or None,
                    body.get("deadletter-description") or None,
                )
            else:
                raise RequestError(400, ARGUMENT_ERROR, f"Unknown disposition-status {status!r}.")
        return ManagementResponse(200, "OK", {})

    def _receive_by_sequence_number(
        self, body: Mapping[str, Any], holder: Hashable
    ) -> ManagementResponse:
        numbers = _sequence_numbers(body)
        try:
            received = self._queue.receive_deferred(numbers, holder)
        except MessageNotFound as exc:
            raise RequestError(404, MESSAGE_NOT_FOUND, str(exc)) from exc
        messages = []
        delete = int(body.get("receiver-settle-mode", 1)) == _RECEIVE_AND_DELETE
        for message in received:
            encoded = encode_broker_message(message, dead_letter_queue=self._dead_letter_queue)
            token = message.lock_token
            if delete and token is not None:
                self._queue.complete(token)
            entry: dict[str, Any] = {"message": encoded}
            if token is not None and not delete:
                entry["lock-token"] = token
            messages.append(entry)
        return ManagementResponse(200, "OK", {"messages": messages})
