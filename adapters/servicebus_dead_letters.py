"""The `DeadLetterQueues` port on Service Bus (S3, E8, DLQ triage): `ServiceBusDeadLetterQueues`.

`list` peeks a queue's dead-letter sub-queue, locking and consuming nothing, each body
reduced to its preview (`domain.dead_letters.summarise_body`). `resubmit` and `discard` act
only while holding the dead letter's lock: of two operators one acts and the other gets
False; one locked elsewhere, or behind more than `scan_limit` others, raises
`DeadLetterBusy`. `oldest_sequence_number` peeks the source queue for the watcher's floor.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from typing import Any

from azure.servicebus import (
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType, AmqpMessageProperties
from azure.servicebus.exceptions import MessageAlreadySettled, MessageLockLostError

from adapters.message_bodies import NotADataBody, data_body
from adapters.servicebus_closing import close_quietly
from domain.dead_letters import (
    DEAD_LETTER_PROPERTIES,
    RESUBMITTED_FROM_PROPERTY,
    BodySummary,
    DeadLetter,
    resubmitted_message_id,
    summarise_body,
)
from domain.ports import DeadLetterBusy, DeadLetterQueues
from observability import logs

log = logs.get_logger("app.dead_letters")

OPERATION_TIMEOUT_SECONDS = 30.0
PEEK_PAGE = 100
"""The most messages one peek request asks for."""

PropertyValue = str | int | float | bool | None


class ServiceBusDeadLetterQueues(DeadLetterQueues):
    """Dead-letter triage through one `ServiceBusClient`, which it closes on `close`."""

    def __init__(
        self,
        client: ServiceBusClient,
        *,
        receive_wait_seconds: float = 1.0,
        busy_wait_seconds: float = 10.0,
        scan_limit: int = 1000,
        timeout_seconds: float = OPERATION_TIMEOUT_SECONDS,
    ) -> None:
        self._client = client
        self._receive_wait = receive_wait_seconds
        self._busy_wait = busy_wait_seconds
        self._scan_limit = scan_limit
        self._timeout = timeout_seconds
        self._peekers: dict[tuple[str, bool], tuple[ServiceBusReceiver, asyncio.Lock]] = {}

    async def list(
        self, queue: str, *, after_sequence: int = 0, max_count: int = 50
    ) -> builtins.list[DeadLetter]:
        if max_count < 1:
            return []
        letters: builtins.list[DeadLetter] = []
        start = after_sequence + 1
        while len(letters) < max_count:
            count = min(PEEK_PAGE, max_count - len(letters))
            page = await self._kept_peek(queue, start, count, dead_letters=True)
            if not page:
                break
            letters.extend(_dead_letter(queue, message) for message in page)
            start = max(_sequence(message) for message in page) + 1
        return letters

    async def oldest_sequence_number(self, queue: str) -> int | None:
        page = await self._kept_peek(queue, 1, 1, dead_letters=False)
        return _sequence(page[0]) if page else None

    async def resubmit(self, queue: str, sequence_number: int) -> bool:
        async def send_copy(message: ServiceBusReceivedMessage) -> None:
            sender = self._client.get_queue_sender(queue)
            async with sender:
                async with asyncio.timeout(self._timeout):
                    await sender.send_messages(_copy(message), timeout=self._timeout)

        return await self._settle(queue, sequence_number, send_copy, "resubmitted")

    async def discard(self, queue: str, sequence_number: int) -> bool:
        async def nothing(message: ServiceBusReceivedMessage) -> None:
            return None

        return await self._settle(queue, sequence_number, nothing, "discarded")

    async def close(self) -> None:
        peekers, self._peekers = list(self._peekers.values()), {}
        for receiver, _ in peekers:
            await close_quietly(receiver, "receiver")
        await close_quietly(self._client, "client")

    async def _kept_peek(
        self, queue: str, start: int, count: int, *, dead_letters: bool
    ) -> builtins.list[ServiceBusReceivedMessage]:
        """Peek through the kept receiver of `queue` or its dead letters; one that failed is
        closed, and the next peek opens a new one."""
        key = (queue, dead_letters)
        if key not in self._peekers:
            receiver = self._client.get_queue_receiver(
                queue,
                sub_queue=ServiceBusSubQueue.DEAD_LETTER if dead_letters else None,
                prefetch_count=0,
            )
            self._peekers[key] = (receiver, asyncio.Lock())
        receiver, lock = self._peekers[key]
        async with lock:
            try:
                return await self._peek(receiver, start, count)
            except BaseException:
                if self._peekers.get(key, (None,))[0] is receiver:
                    del self._peekers[key]
                await close_quietly(receiver, "receiver")
                raise

    # -- the conditional action ---------------------------------------------------------------

    async def _settle(
        self,
        queue: str,
        sequence_number: int,
        act: Callable[[ServiceBusReceivedMessage], Awaitable[None]],
        done: str,
    ) -> bool:
        """Lock dead letter `sequence_number`, `act` on it and complete it; False when it is
        not there, `DeadLetterBusy` when another receiver keeps it locked."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._busy_wait
        while True:
            async with self._dead_letter_receiver(
                queue, ServiceBusReceiveMode.PEEK_LOCK
            ) as receiver:
                if not await self._present(receiver, sequence_number):
                    return False
                held: builtins.list[ServiceBusReceivedMessage] = []
                try:
                    target = await self._lock(receiver, sequence_number, held)
                    if target is not None:
                        try:
                            await act(target)
                        except BaseException:
                            held.append(target)  # not acted on: handed back with the rest
                            raise
                        return await self._complete(receiver, target, queue, done)
                finally:
                    await self._abandon_all(receiver, held)
                if not await self._present(receiver, sequence_number):
                    return False
            if loop.time() >= give_up_at:
                raise DeadLetterBusy(
                    f"dead letter {sequence_number} of queue {queue!r} is locked by another "
                    f"receiver; try again when its lock is released or expires"
                )
            await asyncio.sleep(min(self._receive_wait, 0.5))

    async def _lock(
        self,
        receiver: ServiceBusReceiver,
        sequence_number: int,
        held: builtins.list[ServiceBusReceivedMessage],
    ) -> ServiceBusReceivedMessage | None:
        """Receive until the dead letter numbered `sequence_number` is locked (returned) or
        nothing more comes; everything else received is added to `held`."""
        while len(held) < self._scan_limit:
            async with asyncio.timeout(self._timeout):
                batch = await receiver.receive_messages(
                    max_message_count=min(PEEK_PAGE, self._scan_limit - len(held)),
                    max_wait_time=self._receive_wait,
                )
            if not batch:
                return None
            target = None
            for message in batch:
                if _sequence(message) == sequence_number and target is None:
                    target = message
                else:
                    held.append(message)
            if target is not None:
                return target
        raise DeadLetterBusy(
            f"dead letter {sequence_number} is behind more than {self._scan_limit} others that "
            "a receiver must lock first; resubmit or discard older dead letters first"
        )

    async def _complete(
        self, receiver: ServiceBusReceiver, target: ServiceBusReceivedMessage, queue: str, done: str
    ) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                await receiver.complete_message(target)
        except (MessageLockLostError, MessageAlreadySettled) as error:
            if done == "resubmitted":
                # The copy is in the source queue; a second resubmit of this dead letter sends
                # the same message id, which the queue's duplicate detection removes.
                log.warning(
                    "dead letter not removed: it may still be listed",
                    action=done,
                    queue=queue,
                    sequence=_sequence(target),
                    error=type(error).__name__,
                )
                return True
            raise DeadLetterBusy(
                f"dead letter {_sequence(target)} of queue {queue!r} lost its lock before it "
                "was removed; list it again"
            ) from error
        log.info(
            "dead letter removed",
            action=done,
            queue=queue,
            sequence=_sequence(target),
            message_id=target.message_id,
        )
        return True

    async def _abandon_all(
        self, receiver: ServiceBusReceiver, held: builtins.list[ServiceBusReceivedMessage]
    ) -> None:
        for message in held:
            try:
                async with asyncio.timeout(self._timeout):
                    await receiver.abandon_message(message)
            except Exception as error:  # the lock ends with the receiver or its duration
                log.debug(
                    "could not abandon dead letter",
                    sequence=_sequence(message),
                    error=type(error).__name__,
                    detail=str(error),
                )

    async def _present(self, receiver: ServiceBusReceiver, sequence_number: int) -> bool:
        page = await self._peek(receiver, sequence_number, 1)
        return bool(page) and _sequence(page[0]) == sequence_number

    async def _peek(
        self, receiver: ServiceBusReceiver, start: int, count: int
    ) -> builtins.list[ServiceBusReceivedMessage]:
        async with asyncio.timeout(self._timeout):
            return await receiver.peek_messages(
                max_message_count=count, sequence_number=max(start, 1), timeout=self._timeout
            )

    def _dead_letter_receiver(
        self,
        queue: str,
        receive_mode: ServiceBusReceiveMode = ServiceBusReceiveMode.PEEK_LOCK,
    ) -> ServiceBusReceiver:
        return self._client.get_queue_receiver(
            queue,
            sub_queue=ServiceBusSubQueue.DEAD_LETTER,
            receive_mode=receive_mode,
            prefetch_count=0,
        )


def _sequence(message: ServiceBusReceivedMessage) -> int:
    number = message.sequence_number
    if number is None:
        raise ValueError("a message received from Service Bus carries no sequence number")
    return number


def _text(value: Any) -> PropertyValue:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _own_properties(message: ServiceBusReceivedMessage) -> dict[str, PropertyValue]:
    """The message's application properties without the ones dead-lettering added."""
    properties = message.application_properties or {}
    own = {str(_text(key)): _text(value) for key, value in properties.items()}
    return {key: value for key, value in own.items() if key not in DEAD_LETTER_PROPERTIES}


def _summary(message: ServiceBusReceivedMessage) -> BodySummary:
    try:
        return summarise_body(data_body(message))
    except NotADataBody as error:
        return BodySummary(
            f"an AMQP {error.section.value} body, unreadable: the app reads data bodies only",
            None,
        )


def _dead_letter(queue: str, message: ServiceBusReceivedMessage) -> DeadLetter:
    summary = _summary(message)
    return DeadLetter(
        queue=queue,
        sequence_number=_sequence(message),
        message_id=None if message.message_id is None else str(message.message_id),
        reason=message.dead_letter_reason,
        description=message.dead_letter_error_description,
        enqueued_at=message.enqueued_time_utc,
        delivery_count=message.delivery_count or 0,
        application_properties=_own_properties(message),
        body_preview=summary.preview,
        order_id=summary.order_id,
    )


def _copy(message: ServiceBusReceivedMessage) -> AmqpAnnotatedMessage:
    """The message to send back to the source queue for dead letter `message`: its body in
    the AMQP section it came in, its properties, and a message id of its own."""
    properties: dict[str, Any] = {
        key: value for key, value in _own_properties(message).items() if value is not None
    }
    properties[RESUBMITTED_FROM_PROPERTY] = _sequence(message)
    message_id = None if message.message_id is None else str(message.message_id)
    header = AmqpMessageProperties(
        message_id=resubmitted_message_id(message_id, _sequence(message)),
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        reply_to=message.reply_to,
        to=message.to,
    )
    if message.body_type is AmqpMessageBodyType.VALUE:
        section: dict[str, Any] = {"value_body": message.body}
    elif message.body_type is AmqpMessageBodyType.SEQUENCE:
        section = {"sequence_body": list(message.body)}
    else:
        section = {"data_body": data_body(message)}
    return AmqpAnnotatedMessage(**section, properties=header, application_properties=properties)
