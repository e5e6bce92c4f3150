"""Embedded SQLite adapters of the `StateStore` and `OrderStore` ports (S2, D1, D3, D4, U1, U2).

The default stores (STATE_STORE=sqlite, `open_sqlite_stores`): the state store and the
orders database are separate files that share no transaction (S2, C6); the state store's
file also keeps the dead-letter watcher's marks. Design: docs/architecture.md, "The stores".
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from adapters.sqlite_connection import SqliteDatabase
from domain.contracts import Order, decode_json, encode_json
from domain.dead_letters import WatchMark
from domain.ports import (
    Created,
    InvalidContinuation,
    OperationKind,
    OrderStore,
    Page,
    PreconditionFailed,
    RecordNotFound,
    StateStore,
    StoreMetrics,
)
from domain.records import RETIRABLE_STATES, ProcessState, StateRecord, format_utc, parse_utc
from domain.transitions import DocumentPath, FencedChange

MAX_PAGE_SIZE = 1000

_STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    id TEXT PRIMARY KEY,
    doc TEXT NOT NULL,
    etag TEXT NOT NULL,
    ProcessState TEXT GENERATED ALWAYS AS (json_extract(doc, '$.ProcessState')) VIRTUAL,
    LockedBy TEXT GENERATED ALWAYS AS (json_extract(doc, '$.LockedBy')) VIRTUAL,
    CompleteBy TEXT GENERATED ALWAYS AS (json_extract(doc, '$.CompleteBy')) VIRTUAL,
    UpdatedAt TEXT GENERATED ALWAYS AS (json_extract(doc, '$.UpdatedAt')) VIRTUAL
);
CREATE INDEX IF NOT EXISTS state_by_queue_position ON state (ProcessState, UpdatedAt, id);
CREATE INDEX IF NOT EXISTS state_by_deadline ON state (ProcessState, CompleteBy, id);
CREATE INDEX IF NOT EXISTS state_by_owed ON state (json_extract(doc, '$.Owed.Due'), id)
    WHERE json_extract(doc, '$.Owed.Due') IS NOT NULL;
CREATE TABLE IF NOT EXISTS watch_marks (
    name TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);
"""

_ORDERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);
"""

_OWED_DUE = "json_extract(doc, '$.Owed.Due')"
"""The expression of the `state_by_owed` index, spelled as a query must to use it."""
_RUNNING_STATES = (ProcessState.PROCESSING.value, ProcessState.COMPENSATING.value)
_BACKLOG_STATES = (ProcessState.PENDING.value, *_RUNNING_STATES)
_RETIRABLE_STATES = tuple(sorted(state.value for state in RETIRABLE_STATES))


def _json_path(path: DocumentPath) -> str:
    """A document path as SQLite's JSON path: ``("Steps", 1)`` -> ``$.Steps[1]``."""
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


def _new_etag() -> str:
    return uuid.uuid4().hex


def _encode_token(query: str, key: list[str]) -> str:
    raw = json.dumps({"q": query, "k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str, query: str, key_length: int) -> list[str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        key = decoded["k"]
        valid = (
            decoded["q"] == query
            and isinstance(key, list)
            and len(key) == key_length
            and all(isinstance(part, str) for part in key)
        )
    except (ValueError, KeyError, TypeError, binascii.Error):
        valid = False
    if not valid:
        raise InvalidContinuation(
            f"continuation token {token!r} was not issued by the {query} query of this store"
        )
    return list(key)


class SqliteStateStore(StateStore):
    """The state store in one SQLite file; safe to share between threads and processes."""

    def __init__(self, path: str | Path, metrics: StoreMetrics | None = None) -> None:
        self._db = SqliteDatabase(path, _STATE_SCHEMA)
        self.metrics = metrics if metrics is not None else StoreMetrics()

    @property
    def max_page_size(self) -> int:
        return MAX_PAGE_SIZE

    def create(self, record: StateRecord) -> Created[StateRecord]:
        etag = _new_etag()
        inserted, _ = self._db.write(
            "INSERT INTO state (id, doc, etag) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
            (record.order_id, encode_json(record.to_document()), etag),
        )
        if inserted:
            self.metrics.record(OperationKind.CREATE, writes=1)
            return Created(dataclasses.replace(record, etag=etag), created=True)
        self.metrics.record(OperationKind.CREATE, writes=1, reads=1)
        existing = self._read(record.order_id)
        if existing is None:
            raise RecordNotFound(
                f"state record {record.order_id!r} conflicted on create but cannot be read"
            )
        return Created(existing, created=False)

    def get(self, order_id: str) -> StateRecord | None:
        self.metrics.record(OperationKind.READ, reads=1)
        return self._read(order_id)

    def _read(self, order_id: str) -> StateRecord | None:
        rows = self._db.execute("SELECT doc, etag FROM state WHERE id = ?", (order_id,))
        if not rows:
            return None
        doc, etag = rows[0]
        return StateRecord.from_document(decode_json(doc), etag)

    def replace(self, record: StateRecord) -> StateRecord:
        if record.etag is None:
            raise ValueError(
                f"replace of state record {record.order_id!r} needs the etag it was read with"
            )
        etag = _new_etag()
        document = record.to_document()
        changed, _ = self._db.write(
            "UPDATE state SET doc = ?, etag = ? WHERE id = ? AND etag = ?",
            (encode_json(document), etag, record.order_id, record.etag),
        )
        if changed:
            self.metrics.record(OperationKind.REPLACE, writes=1)
            return StateRecord.from_document(document, etag)
        exists = self._db.execute("SELECT 1 FROM state WHERE id = ?", (record.order_id,))
        self.metrics.record(OperationKind.REPLACE, writes=1, reads=1, refused=1)
        if not exists:
            raise RecordNotFound(f"state record {record.order_id!r} does not exist")
        raise PreconditionFailed(record.order_id, record.etag)

    def fenced_update(self, change: FencedChange) -> StateRecord | None:
        patch_args: list[object] = []
        sets = change.document_sets()
        placeholders = ", ".join("?, json(?)" for _ in sets)
        patched = f"json_set(doc, {placeholders})"
        for path, value in sets:
            patch_args += [_json_path(path), json.dumps(value)]
        for path, amount in change.document_increments():
            # Read from the row being updated, under the write lock: concurrent draws add up.
            json_path = _json_path(path)
            patched = f"json_set({patched}, ?, coalesce(json_extract(doc, ?), 0) + ?)"
            patch_args += [json_path, json_path, amount]
        appended = change.document_append()
        if appended is not None:
            path, value = appended
            patched = f"json_insert({patched}, ?, json(?))"
            patch_args += [f"{_json_path(path)}[#]", json.dumps(value)]
        states = sorted(state.value for state in change.allowed_states)
        step_guard = ""
        guard_args: list[object] = []
        if change.step_guard is not None:
            index, step_state = change.step_guard
            step_guard = " AND json_extract(doc, ?) = ?"
            guard_args = [f"$.Steps[{index}].State", step_state.value]
        _, rows = self._db.write(
            f"UPDATE state SET doc = {patched}, etag = ? "
            f"WHERE id = ? AND LockedBy = ? AND ProcessState IN ({', '.join('?' * len(states))})"
            f"{step_guard} RETURNING doc, etag",
            (*patch_args, _new_etag(), change.order_id, change.locked_by, *states, *guard_args),
        )
        if not rows:
            self.metrics.record(OperationKind.FENCED_UPDATE, writes=1, refused=1)
            return None
        self.metrics.record(OperationKind.FENCED_UPDATE, writes=1)
        doc, etag = rows[0]
        return StateRecord.from_document(decode_json(doc), etag)

    def query_claimable(
        self, *, now: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        limit = self.page_limit(page_size)
        after = ["", ""] if continuation is None else _decode_token(continuation, "claimable", 2)
        rows = self._db.execute(
            "SELECT doc, etag, UpdatedAt, id FROM state "
            "WHERE ProcessState = ? AND LockedBy IS NULL "
            "AND (CompleteBy IS NULL OR CompleteBy <= ?) AND (UpdatedAt, id) > (?, ?) "
            "ORDER BY UpdatedAt, id LIMIT ?",
            (ProcessState.PENDING.value, format_utc(now), *after, limit + 1),
        )
        return self._page(rows, limit, "claimable")

    def query_expired(
        self,
        *,
        window_start: datetime,
        now: datetime,
        page_size: int,
        continuation: str | None = None,
    ) -> Page[StateRecord]:
        limit = self.page_limit(page_size)
        after = (
            [format_utc(window_start), ""]
            if continuation is None
            else _decode_token(continuation, "expired", 2)
        )
        rows = self._db.execute(
            "SELECT doc, etag, CompleteBy, id FROM state "
            "WHERE ProcessState IN (?, ?) AND CompleteBy >= ? AND CompleteBy <= ? "
            "AND (CompleteBy, id) > (?, ?) ORDER BY CompleteBy, id LIMIT ?",
            (*_RUNNING_STATES, format_utc(window_start), format_utc(now), *after, limit + 1),
        )
        return self._page(rows, limit, "expired")

    def query_expired_until(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Oldest deadline first, through the `state_by_deadline` index (U2)."""
        limit = self.page_limit(page_size)
        query = "expired-until"
        after = ["", ""] if continuation is None else _decode_token(continuation, query, 2)
        rows = self._db.execute(
            "SELECT doc, etag, CompleteBy, id FROM state "
            "WHERE ProcessState IN (?, ?) AND CompleteBy <= ? "
            "AND (CompleteBy, id) > (?, ?) ORDER BY CompleteBy, id LIMIT ?",
            (*_RUNNING_STATES, format_utc(until), *after, limit + 1),
        )
        return self._page(rows, limit, query)

    def query_owed(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Oldest due first, through the partial `state_by_owed` index, which holds only the
        records that owe something; an expression index, so a file made before the outbox
        gains it without a new column (C6)."""
        limit = self.page_limit(page_size)
        after = ["", ""] if continuation is None else _decode_token(continuation, "owed", 2)
        rows = self._db.execute(
            f"SELECT doc, etag, {_OWED_DUE}, id FROM state WHERE {_OWED_DUE} <= ? "
            f"AND ({_OWED_DUE}, id) > (?, ?) ORDER BY {_OWED_DUE}, id LIMIT ?",
            (format_utc(until), *after, limit + 1),
        )
        return self._page(rows, limit, "owed")

    def query_by_state(
        self, *, state: ProcessState, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        limit = self.page_limit(page_size)
        query = f"by-state:{state.value}"
        after = ["", ""] if continuation is None else _decode_token(continuation, query, 2)
        rows = self._db.execute(
            "SELECT doc, etag, UpdatedAt, id FROM state "
            "WHERE ProcessState = ? AND (UpdatedAt, id) > (?, ?) "
            "ORDER BY UpdatedAt, id LIMIT ?",
            (state.value, *after, limit + 1),
        )
        return self._page(rows, limit, query)

    def query_retirable(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """Oldest change first, through the `state_by_queue_position` index (C3)."""
        limit = self.page_limit(page_size)
        query = "retirable"
        after = ["", ""] if continuation is None else _decode_token(continuation, query, 2)
        marks = ", ".join("?" for _ in _RETIRABLE_STATES)
        rows = self._db.execute(
            "SELECT doc, etag, UpdatedAt, id FROM state "
            f"WHERE ProcessState IN ({marks}) AND UpdatedAt < ? "
            "AND json_extract(doc, '$.RetiredAt') IS NULL "
            "AND (UpdatedAt, id) > (?, ?) ORDER BY UpdatedAt, id LIMIT ?",
            (*_RETIRABLE_STATES, format_utc(until), *after, limit + 1),
        )
        return self._page(rows, limit, query)

    def count_running(self, *, at_most: int) -> int:
        return self._count_in(_RUNNING_STATES, at_most)

    def count_pending(self, *, at_most: int) -> int:
        return self._count_in((ProcessState.PENDING.value,), at_most)

    def count_backlog(self, *, at_most: int) -> int:
        return self._count_in(_BACKLOG_STATES, at_most)

    def oldest_pending_since(self) -> datetime | None:
        # The queue-position index leads with (ProcessState, UpdatedAt): one index entry.
        (oldest,) = self._db.execute(
            "SELECT MIN(UpdatedAt) FROM state WHERE ProcessState = ?",
            (ProcessState.PENDING.value,),
        )[0]
        self.metrics.record(OperationKind.QUERY, reads=1)
        return None if oldest is None else parse_utc(str(oldest))

    def _count_in(self, states: tuple[str, ...], at_most: int) -> int:
        # The LIMIT lets the count stop at the bound: callers only ask whether there is room.
        # ProcessState leads both state indexes, so the count reads index entries only.
        marks = ", ".join("?" for _ in states)
        (count,) = self._db.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM state WHERE ProcessState IN ({marks}) LIMIT ?)",
            (*states, max(at_most, 0)),
        )[0]
        self.metrics.record(OperationKind.QUERY, reads=1)
        return int(count)

    def load_watch_mark(self, name: str) -> WatchMark:
        self.metrics.record(OperationKind.READ, reads=1)
        rows = self._db.execute("SELECT doc FROM watch_marks WHERE name = ?", (name,))
        return WatchMark.from_document(decode_json(rows[0][0])) if rows else WatchMark()

    def save_watch_mark(self, name: str, mark: WatchMark) -> None:
        self._db.write(
            "INSERT INTO watch_marks (name, doc) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
            (name, encode_json(mark.to_document())),
        )
        self.metrics.record(OperationKind.REPLACE, writes=1)

    def _page(self, rows: list[Any], limit: int, query: str) -> Page[StateRecord]:
        served = rows[:limit]
        self.metrics.record(OperationKind.QUERY, reads=1, items_read=len(served))
        items = tuple(StateRecord.from_document(decode_json(doc), etag) for doc, etag, *_ in served)
        if len(rows) <= limit:
            return Page(items, None)
        _, _, last_key, last_id = served[-1]
        return Page(items, _encode_token(query, [last_key, last_id]))

    def close(self) -> None:
        self._db.close()


class SqliteOrderStore(OrderStore):
    """The orders database in its own SQLite file (no transaction shared with the state)."""

    def __init__(self, path: str | Path, metrics: StoreMetrics | None = None) -> None:
        self._db = SqliteDatabase(path, _ORDERS_SCHEMA)
        self.metrics = metrics if metrics is not None else StoreMetrics()

    def create(self, order: Order) -> Created[Order]:
        inserted, _ = self._db.write(
            "INSERT INTO orders (id, doc) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
            (order.order_id, encode_json(order.to_document())),
        )
        if inserted:
            self.metrics.record(OperationKind.CREATE, writes=1)
            return Created(order, created=True)
        self.metrics.record(OperationKind.CREATE, writes=1, reads=1)
        existing = self._read(order.order_id)
        if existing is None:
            raise RecordNotFound(f"order {order.order_id!r} conflicted on create but is missing")
        return Created(existing, created=False)

    def get(self, order_id: str) -> Order | None:
        self.metrics.record(OperationKind.READ, reads=1)
        return self._read(order_id)

    def delete(self, order_id: str) -> bool:
        deleted, _ = self._db.write("DELETE FROM orders WHERE id = ?", (order_id,))
        self.metrics.record(OperationKind.DELETE, writes=1)
        return bool(deleted)

    def _read(self, order_id: str) -> Order | None:
        rows = self._db.execute("SELECT doc FROM orders WHERE id = ?", (order_id,))
        return Order.from_document(decode_json(rows[0][0])) if rows else None

    def close(self) -> None:
        self._db.close()


STATE_FILE = "state.sqlite3"
ORDERS_FILE = "orders.sqlite3"


def open_sqlite_stores(
    directory: str | Path, metrics: StoreMetrics | None = None
) -> tuple[SqliteStateStore, SqliteOrderStore]:
    """Both embedded stores in `directory` (the SQLITE_DIRECTORY setting), one file each."""
    shared = metrics if metrics is not None else StoreMetrics()
    root = Path(directory)
    return SqliteStateStore(root / STATE_FILE, shared), SqliteOrderStore(root / ORDERS_FILE, shared)
