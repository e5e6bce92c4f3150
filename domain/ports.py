"""Ports of the stores and of messaging, and the stores' errors (S2, D1, D3, D4, U1, U2, U6, C6).

`StateStore` and `OrderStore` are two stores that share no transaction (S2, C6), shaped after
what Cosmos DB offers; `StoreMetrics` counts their calls, items and request charge.
`MessagePublisher` sends the app's messages (R2, E4), `DeadLetterQueues` triages the
dead-letter sub-queues (S3, E8), and `BlockingCalls` runs a blocking call off the event loop.
"""

from __future__ import annotations

import builtins
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Generic, ParamSpec, Protocol, TypeVar

from domain.contracts import Order
from domain.dead_letters import DeadLetter, WatchMark
from domain.outgoing_messages import OutgoingMessage
from domain.records import ProcessState, StateRecord
from domain.transitions import FencedChange

T = TypeVar("T")


class StoreError(Exception):
    """A store operation failed; subclasses say whether retrying can help."""


class PreconditionFailed(StoreError):
    """The record changed since it was read (etag mismatch): someone else won the race."""

    def __init__(self, order_id: str, etag: str | None) -> None:
        super().__init__(
            f"state record {order_id!r} no longer has etag {etag!r}: another writer changed it"
        )
        self.order_id = order_id


class RecordNotFound(StoreError):
    """A conditional write targeted a record that does not exist."""


class InvalidContinuation(StoreError):
    """A continuation token was not issued by this query of this store."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or is throttling past its retries: fail and let the
    trigger retry; nothing was lost."""


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a query: its items, the token for the next page (None at the end), and
    what the page cost in request units (0 for stores that do not charge)."""

    items: tuple[T, ...]
    continuation: str | None
    request_charge: float = 0.0


@dataclass(frozen=True)
class Created(Generic[T]):
    """Outcome of an idempotent create: the stored document, and whether this call made it."""

    record: T
    created: bool


class OperationKind(StrEnum):
    CREATE = "create"
    READ = "read"
    REPLACE = "replace"
    FENCED_UPDATE = "fenced_update"
    QUERY = "query"
    DELETE = "delete"


@dataclass(frozen=True)
class OperationCost:
    calls: int = 0
    reads: int = 0
    writes: int = 0
    items_read: int = 0
    refused: int = 0
    request_charge: float = 0.0

    def __add__(self, other: OperationCost) -> OperationCost:
        return OperationCost(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(OperationCost))
        )


class StoreMetrics:
    """Thread-safe counters per operation kind; one instance may be shared by both stores."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._costs: dict[OperationKind, OperationCost] = {}

    def record(
        self,
        kind: OperationKind,
        *,
        reads: int = 0,
        writes: int = 0,
        items_read: int = 0,
        refused: int = 0,
        request_charge: float = 0.0,
    ) -> None:
        cost = OperationCost(1, reads, writes, items_read, refused, request_charge)
        with self._lock:
            self._costs[kind] = self._costs.get(kind, OperationCost()) + cost

    def snapshot(self) -> dict[OperationKind, OperationCost]:
        with self._lock:
            return dict(self._costs)

    def total(self) -> OperationCost:
        total = OperationCost()
        for cost in self.snapshot().values():
            total = total + cost
        return total


class StateStore(ABC):
    """The durable state store: one `StateRecord` per order, keyed by OrderID."""

    metrics: StoreMetrics

    @property
    @abstractmethod
    def max_page_size(self) -> int:
        """The cap on items per page; larger requests are served this many."""

    def page_limit(self, page_size: int) -> int:
        """How many items a page of ``page_size`` holds here; below 1 is a ValueError."""
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        return min(page_size, self.max_page_size)

    @abstractmethod
    def create(self, record: StateRecord) -> Created[StateRecord]:
        """Insert the record, or return the existing one unchanged (S2, S4)."""

    @abstractmethod
    def get(self, order_id: str) -> StateRecord | None:
        """The record with its etag, or None."""

    @abstractmethod
    def replace(self, record: StateRecord) -> StateRecord:
        """Write `record` if the stored etag still equals `record.etag` (D3, U4).

        Returns the stored record with its new etag; raises `PreconditionFailed` when the
        record changed since it was read and `RecordNotFound` when it does not exist.
        """

    @abstractmethod
    def fenced_update(self, change: FencedChange) -> StateRecord | None:
        """Apply `change` in one conditional write with no read (D4, E5).

        Returns the record after the change, or None when the guard did not hold (another
        attempt holds the record, its state moved on, or it does not exist).
        """

    @abstractmethod
    def query_claimable(
        self, *, now: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Pending records with LockedBy null whose CompleteBy is null or <= now (D1, U5)."""

    @abstractmethod
    def query_expired(
        self,
        *,
        window_start: datetime,
        now: datetime,
        page_size: int,
        continuation: str | None = None,
    ) -> Page[StateRecord]:
        """Processing or Compensating records with window_start <= CompleteBy <= now,
        oldest deadline first (U1, U2, C2)."""

    @abstractmethod
    def query_expired_until(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Processing or Compensating records with CompleteBy <= until, however old (U2).

        The supervisor's last resort for a deadline older than every window it watches: a
        query of the state records themselves, never of a recovery index (U3), so a record
        is found even when no index entry leads to it. A store that can order serves the
        oldest deadline first; one that cannot (a cross-partition query on Cosmos DB) serves
        them in its own order, each exactly once across the pages of one scan.
        """

    @abstractmethod
    def query_owed(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Records whose outbox (`Owed`) was due at or before `until`, in any state (C6).

        The relay's scan for messages their committer did not deliver; records that owe
        nothing are never read. Oldest first where the store can order (SQLite), in the
        store's own order across partitions (Cosmos DB), each once per scan.
        """

    @abstractmethod
    def query_by_state(
        self, *, state: ProcessState, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Records in `state`, a page at a time, for an operator's list (E8, C2).

        One single-state query with continuation tokens: an operator pages through it; a
        token is valid only for the state it was issued for.
        """

    @abstractmethod
    def count_running(self, *, at_most: int) -> int:
        """How many records are Processing or Compensating, counted up to `at_most` (C5).

        The starter needs only whether there is room under its cap, so a store may stop
        counting at `at_most` instead of reading every running record.
        """

    @abstractmethod
    def count_pending(self, *, at_most: int) -> int:
        """How many records are Pending - waiting to be started, or started again - counted up
        to `at_most` (C5, C9): the starter reports it each run, next to the running count."""

    @abstractmethod
    def oldest_pending_since(self) -> datetime | None:
        """When the longest-waiting Pending record became Pending (its UpdatedAt), claimable
        yet or still in its retry delay; None while no record is Pending (C9).

        The starter reports its age each run, also while its cap leaves it nothing to claim:
        the backlog's age is what an operator must see when the pipeline falls behind.
        """

    @abstractmethod
    def count_backlog(self, *, at_most: int) -> int:
        """How many records are unfinished - Pending, Processing or Compensating - counted up
        to `at_most` (C5).

        Submission needs only whether the backlog reached its bound, so a store may stop
        counting at `at_most`. Compensating records count: they are work the pipeline still
        owes, and a failing downstream that leaves orders compensating must show as
        back-pressure too.
        """

    @abstractmethod
    def query_retirable(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Records to retire (C3): in a `RETIRABLE_STATES` state, not retired, and last
        changed before `until`.

        A store whose documents can expire by themselves also serves every record that
        still carries such an expiry (a Cosmos DB `ttl` written before records became
        tombstones), whatever its state or age: a `replace` of it removes the expiry.
        """

    @abstractmethod
    def load_watch_mark(self, name: str) -> WatchMark:
        """The dead-letter watcher's mark called `name` (one per queue), or the empty mark
        when none was saved."""

    @abstractmethod
    def save_watch_mark(self, name: str, mark: WatchMark) -> None:
        """Remember `mark` as `name`, replacing what was there; it never expires."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""


class OrderStore(ABC):
    """The orders database: the immutable order data, keyed by OrderID (S2)."""

    metrics: StoreMetrics

    @abstractmethod
    def create(self, order: Order) -> Created[Order]:
        """Insert the order, or return the existing one unchanged (S2)."""

    @abstractmethod
    def get(self, order_id: str) -> Order | None:
        """The order, or None (D6: the orchestration loads it)."""

    @abstractmethod
    def delete(self, order_id: str) -> bool:
        """Remove the order's document, if there is one; whether this call removed it (C3)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""


P = ParamSpec("P")
R = TypeVar("R")


class BlockingCalls(Protocol):
    """Runs a blocking call on a thread, in the caller's context, and awaits its result."""

    async def __call__(self, function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``function(*args, **kwargs)``, run off the event loop."""


class MessagePublisher(ABC):
    """The messaging port: puts an `OutgoingMessage` on its queue (R2, E4, S3, E8, U4).

    Delivery is at least once. `send` returns once the queue accepted the message; when it
    raises, the message was not sent or its outcome is unknown, so the caller fails and its
    trigger runs again, resending with the same stable message id, which the queue's
    duplicate detection removes if the first send did arrive.
    """

    @abstractmethod
    async def send(self, message: OutgoingMessage) -> None:
        """Send one message; raise when the queue did not (or may not have) accepted it."""


class DeadLetterBusy(Exception):
    """The dead letter is still there but cannot be acted on now: another receiver holds
    its lock (an operator or a console acting on it right now; try again once that lock is
    released or expires), or too many older dead letters stand before it."""


class DeadLetterQueues(ABC):
    """The dead-letter sub-queues of the app's queues (S3, E8, DLQ triage).

    `queue` is always the source queue's name; its dead letters are `DeadLetter`s with the
    reason and description they were dead-lettered with. Listing peeks and never consumes or
    locks anything. `resubmit` and `discard` act on one dead letter, named by its sequence
    number, under a lock: they return False when it is no longer there (another operator
    resubmitted or discarded it first), so two operators racing on the same dead letter get
    exactly one True between them. `DeadLetterBusy` is raised when it is still there but
    locked by someone else for longer than the call waits.
    """

    @abstractmethod
    async def list(
        self, queue: str, *, after_sequence: int = 0, max_count: int = 50
    ) -> builtins.list[DeadLetter]:
        """Up to `max_count` dead letters of `queue` numbered above `after_sequence`,
        ascending by sequence number; a peek, so nothing is consumed."""

    @abstractmethod
    async def resubmit(self, queue: str, sequence_number: int) -> bool:
        """Send a copy of the dead letter back to `queue`, then remove it; False when it is
        no longer there. The copy's message id is derived from the original's
        (`domain.dead_letters.resubmitted_message_id`)."""

    @abstractmethod
    async def discard(self, queue: str, sequence_number: int) -> bool:
        """Remove the dead letter for good; False when it is no longer there."""

    @abstractmethod
    async def oldest_sequence_number(self, queue: str) -> int | None:
        """The smallest sequence number of a message still in `queue` itself (active,
        locked, deferred or scheduled), or None when it holds none: no dead letter with a
        smaller number can appear later (the watcher's floor, `domain.dead_letters`)."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""
