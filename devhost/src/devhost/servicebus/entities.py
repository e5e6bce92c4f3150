"""The broker's queue model: messages, queues, dead-letter queues and the namespace.

Wire-agnostic and single-threaded (the AMQP reactor thread owns it); it never calls back into the
wire layer. Semantics follow the real Service Bus:

- sequence numbers per entity, strictly increasing and never reused (also across restarts);
- FIFO by sequence number among available messages; a message made available again (abandon, lock
  expiry, release) goes back to its sequence position;
- peek-lock with LockDuration, renew, and LockLost for unknown, settled or expired locks (expiry is
  judged against the clock at call time, whether or not advance() has run);
- delivery_count counts failed deliveries (abandon, lock expiry, holder gone; not release); reaching
  MaxDeliveryCount dead-letters with "MaxDeliveryCountExceeded";
- defer + receive_deferred; abandoning a re-received deferred message keeps it deferred;
- duplicate detection, scheduled messages, TTL (effective TTL = min(message, queue default));
  expired messages go to the DLQ with "TTLExpiredException" when DeadLetteringOnMessageExpiration
  is set, else vanish;
- each queue has a dead-letter sub-queue "<name>/$deadletterqueue": lockable, completable, peekable;
  its messages keep their sequence numbers, never expire and cannot be dead-lettered again.

Time is integer milliseconds since the Unix epoch from an injectable clock. Work that falls due
(lock expiry, scheduled activation, TTL) is kept in one heap keyed by due time (due_work.py), so
advance() is cheap when nothing is due; lock_next and the settlements are O(log n)
(queue_entity.py). This module is the model's public face: the namespace and what it hands out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .broker_message import BrokerMessage, MessageState
from .config import BrokerConfig
from .due_work import Clock, wall_clock_ms
from .journal import Journal, JournalSnapshot, NoJournal
from .queue_entity import (
    DEAD_LETTER_SUFFIX,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    Queue,
    QueueContext,
)

__all__ = [
    "BrokerMessage",
    "Clock",
    "EntityNotFound",
    "InvalidOperation",
    "LockLost",
    "MessageNotFound",
    "MessageState",
    "Namespace",
    "Queue",
    "wall_clock_ms",
]

logger = logging.getLogger(__name__)


class EntityNotFound(LookupError):
    """The address names no configured queue (and auto-create is off)."""

    def __init__(self, address: str) -> None:
        super().__init__(f"The messaging entity '{address}' could not be found.")
        self.address = address


class Namespace:
    """All queues of one broker namespace, their timers, and (optionally) their journal."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        clock: Clock = wall_clock_ms,
        journal: Journal | None = None,
    ) -> None:
        self.config = config
        self._context = QueueContext(clock, journal if journal is not None else NoJournal())
        self._queues: dict[str, Queue] = {
            key: Queue(settings, self._context) for key, settings in config.queues.items()
        }
        if journal is not None:
            self._recover(journal.load())
        self.advance()

    def queue(self, address: str) -> Queue:
        """The queue or dead-letter queue an AMQP address or entity path names."""
        path = address
        if "://" in path:
            path = path.split("://", 1)[1].partition("/")[2]
        path = path.partition("?")[0].strip("/")
        wants_dead_letters = path.lower().endswith(DEAD_LETTER_SUFFIX)
        if wants_dead_letters:
            path = path[: -len(DEAD_LETTER_SUFFIX)]
        queue = self._queues.get(path.lower())
        if queue is None:
            settings = self.config.settings_for(path) if path and "$" not in path else None
            if settings is None:
                raise EntityNotFound(address)
            queue = self._queues[path.lower()] = Queue(settings, self._context)
        if wants_dead_letters:
            assert queue.dead_letter_queue is not None
            return queue.dead_letter_queue
        return queue

    def queues(self) -> Iterable[Queue]:
        """The queues (not their dead-letter queues, reachable as queue.dead_letter_queue)."""
        return list(self._queues.values())

    def advance(self) -> None:
        """Do all work due at clock(): expire locks, activate scheduled messages, expire TTLs."""
        self._context.due.run_due(self._context.clock())

    def next_due(self) -> int | None:
        """The earliest time at which advance() has work to do; None if nothing is pending."""
        return self._context.due.next_due()

    def take_ready(self) -> set[Queue]:
        """Queues that gained available messages since the last call."""
        ready = self._context.ready
        self._context.ready = set()
        return ready

    def close(self) -> None:
        self._context.journal.close()

    def _recover(self, snapshot: JournalSnapshot) -> None:
        now = self._context.clock()
        skipped: set[str] = set()
        for entity, last_sequence_number in snapshot.sequence_counters.items():
            queue = self._recovered_queue(entity, skipped)
            if queue is not None:
                queue.recover_sequence_counter(last_sequence_number)
        for recovered in snapshot.messages:
            queue = self._recovered_queue(recovered.entity, skipped)
            if queue is None:
                continue
            if recovered.dead_lettered:
                queue.recover_sequence_counter(recovered.message.sequence_number)
                assert queue.dead_letter_queue is not None
                queue = queue.dead_letter_queue
            queue.recover_message(recovered.message, now)
        for entity, history in snapshot.duplicate_history.items():
            queue = self._recovered_queue(entity, skipped)
            if queue is not None:
                queue.recover_duplicate_history(history)
        for entity in sorted(skipped):
            logger.warning(
                "servicebus_recovery_unknown_entity entity=%s action=kept_in_journal_not_loaded "
                "hint='add the queue to the config (or enable auto-create) to get its messages'",
                entity,
            )

    def _recovered_queue(self, entity: str, skipped: set[str]) -> Queue | None:
        try:
            return self.queue(entity)
        except EntityNotFound:
            skipped.add(entity)
            return None
