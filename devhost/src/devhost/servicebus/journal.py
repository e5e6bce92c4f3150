"""Durability of the broker's queue model: an acknowledged message is never lost.

The model reports every mutation to a Journal before the model method returns; SqliteJournal
commits it at once. SQLite in WAL mode with synchronous=NORMAL makes a committed transaction
survive a kill -9 of the process (an OS crash may lose the last transactions, which is the
service's "process restart" durability, enough for a local broker).

Stored: every accepted message (active, scheduled, deferred, dead-lettered) with all fields needed
to rebuild it, the duplicate-detection history and the per-entity sequence counters. Locks are
not stored: a lock held at a crash is released on recovery without counting a failed delivery.
Rows are keyed by (entity, sequence_number), where entity is the lower-cased queue name; a
dead-lettered message keeps its row and number and is flagged as being in the dead-letter queue.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from .broker_message import BrokerMessage, MessageState

SCHEMA_VERSION = 1

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS messages (
        entity TEXT NOT NULL,
        sequence_number INTEGER NOT NULL,
        dead_lettered INTEGER NOT NULL,
        state TEXT NOT NULL,
        payload BLOB NOT NULL,
        message_id TEXT,
        enqueued_at INTEGER NOT NULL,
        expires_at INTEGER,
        scheduled_for INTEGER,
        delivery_count INTEGER NOT NULL,
        dead_letter_reason TEXT,
        dead_letter_description TEXT,
        dead_letter_source TEXT,
        PRIMARY KEY (entity, sequence_number)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS duplicate_history (
        entity TEXT NOT NULL,
        message_id TEXT NOT NULL,
        seen_at INTEGER NOT NULL,
        PRIMARY KEY (entity, message_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS sequence_counters (
        entity TEXT PRIMARY KEY,
        last_sequence_number INTEGER NOT NULL
    )
    """,
)

_INSERT_MESSAGE = """
    INSERT INTO messages (
        entity, sequence_number, dead_lettered, state, payload, message_id, enqueued_at,
        expires_at, scheduled_for, delivery_count, dead_letter_reason, dead_letter_description,
        dead_letter_source
    ) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)
"""
_ADVANCE_COUNTER = """
    INSERT INTO sequence_counters (entity, last_sequence_number) VALUES (?, ?)
    ON CONFLICT (entity) DO UPDATE SET last_sequence_number = excluded.last_sequence_number
    WHERE excluded.last_sequence_number > last_sequence_number
"""
_RECORD_DUPLICATE = """
    INSERT INTO duplicate_history (entity, message_id, seen_at) VALUES (?, ?, ?)
    ON CONFLICT (entity, message_id) DO UPDATE SET seen_at = excluded.seen_at
"""
_UPDATE_MESSAGE = """
    UPDATE messages SET dead_lettered = ?, state = ?, delivery_count = ?, dead_letter_reason = ?,
        dead_letter_description = ?, dead_letter_source = ?
    WHERE entity = ? AND sequence_number = ?
"""
_DELETE_MESSAGE = "DELETE FROM messages WHERE entity = ? AND sequence_number = ?"
_FORGET_DUPLICATES = "DELETE FROM duplicate_history WHERE entity = ? AND seen_at <= ?"
_SELECT_MESSAGES = """
    SELECT entity, dead_lettered, sequence_number, payload, message_id, enqueued_at, expires_at,
        scheduled_for, state, delivery_count, dead_letter_reason, dead_letter_description,
        dead_letter_source
    FROM messages ORDER BY entity, sequence_number
"""


class JournalError(RuntimeError):
    """The journal file cannot be used; the message names the file and what to do."""


@dataclass(frozen=True)
class RecoveredMessage:
    entity: str  # lower-cased queue name
    dead_lettered: bool
    message: BrokerMessage


@dataclass
class JournalSnapshot:
    """Everything a journal holds, as read at start-up."""

    messages: list[RecoveredMessage] = field(default_factory=list)
    sequence_counters: dict[str, int] = field(default_factory=dict)
    duplicate_history: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


class Journal(Protocol):
    """Where the model records its mutations; each call is durable when it returns."""

    def load(self) -> JournalSnapshot: ...

    def message_added(
        self, entity: str, message: BrokerMessage, *, duplicate_seen_at: int | None
    ) -> None:
        """A message was accepted (also advances the entity's sequence counter, and records its
        message id for duplicate detection when ``duplicate_seen_at`` is given)."""

    def message_changed(self, entity: str, message: BrokerMessage, *, dead_lettered: bool) -> None:
        """State, delivery count or dead-letter fields changed (or it moved to the DLQ)."""

    def message_removed(self, entity: str, sequence_number: int) -> None: ...

    def duplicates_forgotten(self, entity: str, seen_at_or_before: int) -> None:
        """Message ids seen at or before this time left the duplicate-detection window."""

    def close(self) -> None: ...


class NoJournal:
    """The journal of a purely in-memory namespace: records nothing, recovers nothing."""

    def load(self) -> JournalSnapshot:
        return JournalSnapshot()

    def message_added(
        self, entity: str, message: BrokerMessage, *, duplicate_seen_at: int | None
    ) -> None:
        pass

    def message_changed(self, entity: str, message: BrokerMessage, *, dead_lettered: bool) -> None:
        pass

    def message_removed(self, entity: str, sequence_number: int) -> None:
        pass

    def duplicates_forgotten(self, entity: str, seen_at_or_before: int) -> None:
        pass

    def close(self) -> None:
        pass


class SqliteJournal:
    """A Journal in one SQLite file (created if missing). Used from one thread at a time."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            # The broker may open the journal on one thread and run on its reactor thread.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._prepare_schema()
        except sqlite3.Error as error:
            raise JournalError(
                f"cannot use {self.path!r} as the broker's data file: {error}; "
                "pass a writable path to a new file or to one this broker created"
            ) from error
        self._closed = False

    def _prepare_schema(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version not in (0, SCHEMA_VERSION):
            raise JournalError(
                f"{self.path!r} has journal schema version {version}, this broker reads "
                f"version {SCHEMA_VERSION}; use a new data file"
            )
        with self._transaction():
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def load(self) -> JournalSnapshot:
        snapshot = JournalSnapshot()
        for row in self._db.execute(_SELECT_MESSAGES):
            entity, dead_lettered, *fields = row
            message = BrokerMessage(
                sequence_number=fields[0],
                payload=bytes(fields[1]),
                message_id=fields[2],
                enqueued_at=fields[3],
                expires_at=fields[4],
                scheduled_for=fields[5],
                state=MessageState(fields[6]),
                delivery_count=fields[7],
                dead_letter_reason=fields[8],
                dead_letter_description=fields[9],
                dead_letter_source=fields[10],
            )
            snapshot.messages.append(RecoveredMessage(entity, bool(dead_lettered), message))
        for entity, last in self._db.execute(
            "SELECT entity, last_sequence_number FROM sequence_counters"
        ):
            snapshot.sequence_counters[entity] = last
        for entity, message_id, seen_at in self._db.execute(
            "SELECT entity, message_id, seen_at FROM duplicate_history"
        ):
            snapshot.duplicate_history.setdefault(entity, []).append((message_id, seen_at))
        return snapshot

    def message_added(
        self, entity: str, message: BrokerMessage, *, duplicate_seen_at: int | None
    ) -> None:
        execute = self._db.execute
        with self._transaction():
            execute(
                _INSERT_MESSAGE,
                (
                    entity,
                    message.sequence_number,
                    message.state.value,
                    message.payload,
                    message.message_id,
                    message.enqueued_at,
                    message.expires_at,
                    message.scheduled_for,
                    message.delivery_count,
                ),
            )
            execute(_ADVANCE_COUNTER, (entity, message.sequence_number))
            if duplicate_seen_at is not None:
                execute(_RECORD_DUPLICATE, (entity, message.message_id, duplicate_seen_at))

    def message_changed(self, entity: str, message: BrokerMessage, *, dead_lettered: bool) -> None:
        self._db.execute(
            _UPDATE_MESSAGE,
            (
                int(dead_lettered),
                message.state.value,
                message.delivery_count,
                message.dead_letter_reason,
                message.dead_letter_description,
                message.dead_letter_source,
                entity,
                message.sequence_number,
            ),
        )

    def message_removed(self, entity: str, sequence_number: int) -> None:
        self._db.execute(_DELETE_MESSAGE, (entity, sequence_number))

    def duplicates_forgotten(self, entity: str, seen_at_or_before: int) -> None:
        self._db.execute(_FORGET_DUPLICATES, (entity, seen_at_or_before))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()
