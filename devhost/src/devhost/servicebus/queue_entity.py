"""One queue (or dead-letter sub-queue) of the broker's queue model.

See entities.py for the semantics. Internally a queue keeps every message by sequence number, a
min-heap of the sequence numbers available for receive (FIFO by sequence number; a message made
available again goes back to its position), and its locks by token and by holder. Heap entries
of messages that left are skipped when popped, so lock_next and every settlement are O(log n).
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Hashable, Iterable, Sequence
from datetime import timedelta

from .broker_message import BrokerMessage, MessageState
from .config import QueueSettings
from .due_work import Clock, DueKey, DueKind, DueWork
from .duplicate_detection import DuplicateDetector
from .journal import Journal

DEAD_LETTER_SUFFIX = "/$deadletterqueue"
MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
TTL_EXPIRED = "TTLExpiredException"
TTL_EXPIRED_DESCRIPTION = "The message expired and was dead lettered."


class LockLost(Exception):
    """The lock token is unknown, already settled, or its lock expired."""


class MessageNotFound(LookupError):
    """receive_deferred named a sequence number that is not a deferred message of the queue."""


class InvalidOperation(Exception):
    """Not allowed on this entity (e.g. dead-lettering a message of a dead-letter queue)."""


class QueueContext:
    """What a namespace shares with its queues."""

    def __init__(self, clock: Clock, journal: Journal) -> None:
        self.clock = clock
        self.journal = journal
        self.due = DueWork()
        self.ready: set[Queue] = set()


def _to_ms(duration: timedelta) -> int:
    return duration // timedelta(milliseconds=1)


class Queue:
    """A queue or a dead-letter sub-queue. Created by Namespace; not thread-safe."""

    def __init__(self, settings: QueueSettings, context: QueueContext, parent: Queue | None = None):
        self.settings = settings
        self.parent = parent
        self.name: str = settings.name if parent is None else parent.name + DEAD_LETTER_SUFFIX
        self.dead_letter_queue: Queue | None = (
            Queue(settings, context, parent=self) if parent is None else None
        )
        self._context = context
        self._journal = context.journal
        self._entity = settings.name.lower()
        self._is_dead_letter_queue = parent is not None
        self._lock_ms = _to_ms(settings.lock_duration)
        self._default_ttl_ms = (
            _to_ms(settings.default_message_ttl) if settings.default_message_ttl else None
        )
        self._duplicates = (
            DuplicateDetector(_to_ms(settings.duplicate_detection_window))
            if settings.requires_duplicate_detection and parent is None
            else None
        )
        self._next_sequence_number = 1
        self._messages: dict[int, BrokerMessage] = {}
        self._available: list[int] = []
        self._available_count = 0
        self._locks: dict[uuid.UUID, BrokerMessage] = {}
        self._locks_by_holder: dict[Hashable, set[uuid.UUID]] = {}

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, available={self._available_count})"

    # -- sending -------------------------------------------------------------------------------

    def enqueue(
        self,
        payload: bytes,
        *,
        message_id: str | None,
        time_to_live_ms: int | None,
        scheduled_for: int | None,
    ) -> BrokerMessage | None:
        """Accept a message; None when dropped as a duplicate (the sender still sees success)."""
        if self._is_dead_letter_queue:
            raise InvalidOperation(
                f"cannot send to '{self.name}': messages reach a dead-letter queue only by "
                "being dead-lettered from its parent queue"
            )
        now = self._context.clock()
        duplicate_seen_at = None
        if self._duplicates is not None and message_id is not None:
            forgotten_up_to = self._duplicates.forget_expired(now)
            if forgotten_up_to is not None:
                self._journal.duplicates_forgotten(self._entity, forgotten_up_to)
            if self._duplicates.is_duplicate(message_id, now):
                return None
            duplicate_seen_at = now

        ttl_ms = time_to_live_ms
        if self._default_ttl_ms is not None and (ttl_ms is None or ttl_ms > self._default_ttl_ms):
            ttl_ms = self._default_ttl_ms
        is_scheduled = scheduled_for is not None and scheduled_for > now
        enqueued_at = scheduled_for if is_scheduled and scheduled_for is not None else now
        message = BrokerMessage(
            sequence_number=self._next_sequence_number,
            payload=payload,
            message_id=message_id,
            enqueued_at=enqueued_at,
            expires_at=None if ttl_ms is None else enqueued_at + ttl_ms,
            scheduled_for=scheduled_for,
            state=MessageState.SCHEDULED if is_scheduled else MessageState.ACTIVE,
        )
        self._journal.message_added(self._entity, message, duplicate_seen_at=duplicate_seen_at)
        self._next_sequence_number += 1
        if self._duplicates is not None and message_id is not None:
            self._duplicates.record(message_id, now)
        self._messages[message.sequence_number] = message
        if is_scheduled:
            self._context.due.push(enqueued_at, DueKind.ACTIVATION, self, message.sequence_number)
        else:
            self._activate(message, now)
        return message

    def cancel_scheduled(self, sequence_numbers: Iterable[int]) -> None:
        """Remove scheduled messages; numbers that are not scheduled messages are ignored."""
        for sequence_number in sequence_numbers:
            message = self._messages.get(sequence_number)
            if message is not None and message.state is MessageState.SCHEDULED:
                self._remove(message)

    # -- receiving -----------------------------------------------------------------------------

    def lock_next(self, holder: Hashable) -> BrokerMessage | None:
        """PEEK_LOCK: lock the lowest-numbered available message for ``holder``."""
        now = self._context.clock()
        message = self._take_available(now)
        if message is not None:
            self._lock(message, holder, now)
        return message

    def receive_and_delete_next(self) -> BrokerMessage | None:
        """RECEIVE_AND_DELETE: remove and return the lowest-numbered available message."""
        message = self._take_available(self._context.clock())
        if message is not None:
            self._remove(message)
        return message

    def receive_deferred(
        self, sequence_numbers: Sequence[int], holder: Hashable
    ) -> list[BrokerMessage]:
        """Lock deferred messages by number; MessageNotFound (locking none) if any is not one."""
        now = self._context.clock()
        wanted = list(dict.fromkeys(sequence_numbers))
        for sequence_number in wanted:
            message = self._messages.get(sequence_number)
            if message is not None and message.lock_token is not None:
                self._end_lock_if_expired(message, now)
            if message is None or message.state is not MessageState.DEFERRED:
                raise MessageNotFound(
                    f"Failed to lock one or more specified messages: message with sequence "
                    f"number {sequence_number} is not a deferred message of '{self.name}'."
                )
            if message.lock_token is not None:
                raise MessageNotFound(
                    f"Failed to lock one or more specified messages: deferred message with "
                    f"sequence number {sequence_number} of '{self.name}' is already locked."
                )
        messages = [self._messages[sequence_number] for sequence_number in wanted]
        for message in messages:
            self._lock(message, holder, now)
        return messages

    def peek(self, from_sequence_number: int, count: int) -> list[BrokerMessage]:
        """Up to ``count`` messages in any state from ``from_sequence_number`` on, ascending."""
        if count <= 0:
            return []
        numbers = heapq.nsmallest(
            count, (number for number in self._messages if number >= from_sequence_number)
        )
        return [self._messages[number] for number in numbers]

    def active_count(self) -> int:
        """Messages available for receive now (not locked, scheduled or deferred)."""
        return self._available_count

    # -- settlement ----------------------------------------------------------------------------

    def complete(self, lock_token: uuid.UUID) -> None:
        message = self._unlock(lock_token)
        self._remove(message)

    def abandon(self, lock_token: uuid.UUID) -> None:
        """A failed delivery: counted; at MaxDeliveryCount the message is dead-lettered."""
        message = self._unlock(lock_token)
        self._delivery_failed(message, self._context.clock())

    def defer(self, lock_token: uuid.UUID) -> None:
        message = self._unlock(lock_token)
        message.state = MessageState.DEFERRED
        self._journal.message_changed(
            self._entity, message, dead_lettered=self._is_dead_letter_queue
        )

    def dead_letter(
        self, lock_token: uuid.UUID, reason: str | None, description: str | None
    ) -> None:
        if self._is_dead_letter_queue:
            self._locked(lock_token, self._context.clock())
            raise InvalidOperation(
                f"cannot dead-letter a message of '{self.name}': it is already in a dead-letter "
                "queue; complete it instead"
            )
        message = self._unlock(lock_token)
        self._dead_letter(message, reason, description, self._context.clock())

    def release(self, lock_token: uuid.UUID) -> None:
        """The delivery never reached the application: available again, not counted."""
        message = self._unlock(lock_token)
        self._return_unlocked(message, self._context.clock())

    def renew_lock(self, lock_token: uuid.UUID) -> int:
        """Extend the lock by LockDuration from now; returns the new locked_until."""
        now = self._context.clock()
        message = self._locked(lock_token, now)
        message.locked_until = now + self._lock_ms
        self._context.due.note_stale()
        self._context.due.push(message.locked_until, DueKind.LOCK_EXPIRY, self, lock_token)
        return message.locked_until

    def release_holder(self, holder: Hashable) -> None:
        """The holder went away: each of its locks ends as a failed delivery."""
        tokens = self._locks_by_holder.pop(holder, None)
        if not tokens:
            return
        now = self._context.clock()
        for message in sorted(
            (self._locks[token] for token in tokens), key=lambda m: m.sequence_number
        ):
            self._drop_lock(message)
            self._delivery_failed(message, now)

    # -- internals -----------------------------------------------------------------------------

    def _take_available(self, now: int) -> BrokerMessage | None:
        available = self._available
        while available:
            message = self._messages.get(heapq.heappop(available))
            if (
                message is None
                or message.state is not MessageState.ACTIVE
                or message.lock_token is not None
            ):
                continue
            self._available_count -= 1
            if self._has_expired(message, now):
                self._expire(message, now)
                continue
            return message
        return None

    def _has_expired(self, message: BrokerMessage, now: int) -> bool:
        return (
            not self._is_dead_letter_queue
            and message.expires_at is not None
            and message.expires_at <= now
        )

    def _activate(self, message: BrokerMessage, now: int) -> None:
        """A message entered the ACTIVE state (sent, scheduled time reached, or recovered)."""
        if message.expires_at is not None and not self._is_dead_letter_queue:
            self._context.due.push(
                message.expires_at, DueKind.TTL_EXPIRY, self, message.sequence_number
            )
        self._make_available(message, now)

    def _make_available(self, message: BrokerMessage, now: int) -> None:
        if self._has_expired(message, now):
            self._expire(message, now)
            return
        heapq.heappush(self._available, message.sequence_number)
        self._available_count += 1
        self._context.ready.add(self)

    def _lock(self, message: BrokerMessage, holder: Hashable, now: int) -> None:
        token = uuid.uuid4()
        message.lock_token = token
        message.locked_until = now + self._lock_ms
        message.holder = holder
        self._locks[token] = message
        holder_tokens = self._locks_by_holder.get(holder)
        if holder_tokens is None:
            self._locks_by_holder[holder] = {token}
        else:
            holder_tokens.add(token)
        self._context.due.push(message.locked_until, DueKind.LOCK_EXPIRY, self, token)

    def _locked(self, lock_token: uuid.UUID, now: int) -> BrokerMessage:
        """The message holding a valid lock ``lock_token``; LockLost otherwise."""
        message = self._locks.get(lock_token)
        if message is None:
            raise LockLost(
                f"The lock supplied is invalid. Either the lock expired, or the message has "
                f"already been removed from the queue '{self.name}' (lock token {lock_token})."
            )
        locked_until = message.locked_until
        if self._end_lock_if_expired(message, now):
            raise LockLost(
                f"The lock supplied has expired: lock token {lock_token} on '{self.name}' "
                f"(sequence number {message.sequence_number}) was held until {locked_until} "
                f"and it is now {now} (ms since the epoch); the delivery counts as failed. "
                "Settle or renew within the queue's LockDuration."
            )
        return message

    def _unlock(self, lock_token: uuid.UUID) -> BrokerMessage:
        message = self._locked(lock_token, self._context.clock())
        self._drop_lock(message)
        return message

    def _end_lock_if_expired(self, message: BrokerMessage, now: int) -> bool:
        if message.locked_until is None or message.locked_until > now:
            return False
        self._drop_lock(message)
        self._delivery_failed(message, now)
        return True

    def _drop_lock(self, message: BrokerMessage) -> None:
        token = message.lock_token
        assert token is not None
        del self._locks[token]
        holder_tokens = self._locks_by_holder.get(message.holder)
        if holder_tokens is not None:
            holder_tokens.discard(token)
            if not holder_tokens:
                del self._locks_by_holder[message.holder]
        message.lock_token = None
        message.locked_until = None
        message.holder = None
        self._context.due.note_stale()

    def _delivery_failed(self, message: BrokerMessage, now: int) -> None:
        message.delivery_count += 1
        max_count = self.settings.max_delivery_count
        if not self._is_dead_letter_queue and message.delivery_count >= max_count:
            self._dead_letter(
                message,
                MAX_DELIVERY_COUNT_EXCEEDED,
                f"Message could not be consumed after {max_count} delivery attempts.",
                now,
            )
            return
        self._journal.message_changed(
            self._entity, message, dead_lettered=self._is_dead_letter_queue
        )
        self._return_unlocked(message, now)

    def _return_unlocked(self, message: BrokerMessage, now: int) -> None:
        # A re-received deferred message stays deferred when its lock ends (as on the service).
        if message.state is MessageState.ACTIVE:
            self._make_available(message, now)

    def _dead_letter(
        self, message: BrokerMessage, reason: str | None, description: str | None, now: int
    ) -> None:
        dead_letter_queue = self.dead_letter_queue
        assert dead_letter_queue is not None
        del self._messages[message.sequence_number]
        message.state = MessageState.ACTIVE
        message.dead_letter_reason = reason
        message.dead_letter_description = description
        message.dead_letter_source = self.name
        self._journal.message_changed(self._entity, message, dead_lettered=True)
        dead_letter_queue._messages[message.sequence_number] = message
        dead_letter_queue._make_available(message, now)

    def _expire(self, message: BrokerMessage, now: int) -> None:
        """TTL reached on an available message: dead-letter it or drop it, as configured."""
        if self.settings.dead_lettering_on_message_expiration:
            self._dead_letter(message, TTL_EXPIRED, TTL_EXPIRED_DESCRIPTION, now)
        else:
            self._remove(message)

    def _remove(self, message: BrokerMessage) -> None:
        self._journal.message_removed(self._entity, message.sequence_number)
        del self._messages[message.sequence_number]
        if message.expires_at is not None or message.state is MessageState.SCHEDULED:
            self._context.due.note_stale()

    # -- due work (DueTarget) ------------------------------------------------------------------

    def due_entry_is_live(self, kind: DueKind, key: DueKey, due: int) -> bool:
        if kind is DueKind.LOCK_EXPIRY:
            assert isinstance(key, uuid.UUID)
            locked = self._locks.get(key)
            return locked is not None and locked.locked_until == due
        assert isinstance(key, int)
        message = self._messages.get(key)
        if message is None:
            return False
        if kind is DueKind.ACTIVATION:
            return message.state is MessageState.SCHEDULED
        # A locked message expires when its lock ends (see _make_available), so its entry stays.
        return message.state is MessageState.ACTIVE and message.expires_at == due

    def handle_due(self, kind: DueKind, key: DueKey, due: int, now: int) -> None:
        if not self.due_entry_is_live(kind, key, due):
            return
        if kind is DueKind.LOCK_EXPIRY:
            assert isinstance(key, uuid.UUID)
            self._end_lock_if_expired(self._locks[key], now)
            return
        assert isinstance(key, int)
        message = self._messages[key]
        if kind is DueKind.ACTIVATION:
            # Not journaled: recovery activates a scheduled message whose time has passed anyway.
            message.state = MessageState.ACTIVE
            self._activate(message, now)
        elif message.lock_token is None:
            self._available_count -= 1
            self._expire(message, now)

    def recover_message(self, message: BrokerMessage, now: int) -> None:
        """Start-up only: take back a message read from the journal (never locked)."""
        self._messages[message.sequence_number] = message
        if self.parent is None:
            self.recover_sequence_counter(message.sequence_number)
        if message.state is MessageState.SCHEDULED:
            self._context.due.push(
                message.enqueued_at, DueKind.ACTIVATION, self, message.sequence_number
            )
        elif message.state is MessageState.ACTIVE:
            self._activate(message, now)

    def recover_sequence_counter(self, last_sequence_number: int) -> None:
        """Start-up only: numbers up to ``last_sequence_number`` were handed out before."""
        self._next_sequence_number = max(self._next_sequence_number, last_sequence_number + 1)

    def recover_duplicate_history(self, history: list[tuple[str, int]]) -> None:
        """Start-up only: (message_id, seen_at) pairs of the duplicate-detection window."""
        if self._duplicates is not None:
            self._duplicates.restore(history)
