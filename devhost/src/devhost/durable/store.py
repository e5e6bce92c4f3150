"""SQLite persistence of the durable engine: instances, history, inbox, timers, work items.

The engine's crash safety rests here: every state change of the engine happens inside one
``transaction()``, so a process killed at any point leaves either the state before or the
state after a change.  Activities are at-least-once: a work item stays in
``activity_work`` until the transaction that puts its TaskCompleted/TaskFailed into the
inbox deletes it, so a crash mid-activity makes the next engine run it again.
``instance_trace`` keeps the W3C trace context an instance was started with (C9).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from devhost.durable.history import (
    BufferedEvent,
    HistoryEvent,
    format_timestamp,
    parse_timestamp,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    input TEXT,
    output TEXT,
    custom_status TEXT,
    runtime_status TEXT NOT NULL,
    created_time TEXT NOT NULL,
    last_updated_time TEXT NOT NULL,
    parent_instance_id TEXT,
    parent_execution_id TEXT,
    parent_task_id INTEGER
);
CREATE TABLE IF NOT EXISTS history (
    instance_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (instance_id, position)
);
CREATE TABLE IF NOT EXISTS inbox (
    message_id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_by_instance ON inbox (instance_id, message_id);
CREATE TABLE IF NOT EXISTS external_events (
    buffer_id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    name TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS timers (
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    timer_id INTEGER NOT NULL,
    fire_at TEXT NOT NULL,
    PRIMARY KEY (instance_id, execution_id, timer_id)
);
CREATE INDEX IF NOT EXISTS timers_by_time ON timers (fire_at);
CREATE TABLE IF NOT EXISTS instance_trace (
    instance_id TEXT PRIMARY KEY,
    traceparent TEXT NOT NULL,
    tracestate TEXT
);
CREATE TABLE IF NOT EXISTS activity_work (
    work_id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    task_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    input TEXT
);
"""


@dataclass(frozen=True)
class InstanceRecord:
    """One row of ``instances``."""

    instance_id: str
    name: str
    execution_id: str
    input_json: str | None
    output_json: str | None
    custom_status_json: str | None
    runtime_status: str
    created_time: dt.datetime
    last_updated_time: dt.datetime
    parent_instance_id: str | None
    parent_execution_id: str | None
    parent_task_id: int | None


@dataclass(frozen=True)
class InboxMessage:
    """A message waiting for the next episode of an instance."""

    message_id: int
    execution_id: str
    event: HistoryEvent


@dataclass(frozen=True)
class DueTimer:
    """A timer whose fire time has come."""

    instance_id: str
    execution_id: str
    timer_id: int
    fire_at: dt.datetime


@dataclass(frozen=True)
class ActivityWorkItem:
    """An activity execution that has not reported its result yet."""

    work_id: int
    instance_id: str
    execution_id: str
    task_id: int
    name: str
    input_json: str | None


class DurableStore:
    """The engine's SQLite database (a file path, or ``:memory:`` for tests)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._connection = sqlite3.connect(path, isolation_level=None)
        self._connection.execute("PRAGMA busy_timeout = 5000")
        if path != ":memory:":
            self._connection.execute("PRAGMA journal_mode = WAL")
            # WAL with NORMAL survives a kill -9 of the process (the crash the devhost must
            # survive); FULL would also survive power loss at the cost of an fsync per commit.
            self._connection.execute("PRAGMA synchronous = NORMAL")
        self._connection.executescript(_SCHEMA)
        self._depth = 0
        # How many inbox messages and work items this store has written: the engine looks
        # for new work only when these moved (one engine per file, so no other writer).
        self.posts = 0
        self.work_added = 0

    def close(self) -> None:
        self._connection.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all (nesting joins the outer one)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._connection.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self._connection.execute("ROLLBACK")
            raise
        else:
            self._connection.execute("COMMIT")
        finally:
            self._depth = 0

    # -- instances ---------------------------------------------------------------------

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        row = self._connection.execute(
            "SELECT * FROM instances WHERE instance_id = ?", (instance_id,)
        ).fetchone()
        return None if row is None else _instance(row)

    def query_instances(
        self,
        runtime_statuses: list[str] | None,
        created_from: dt.datetime | None,
        created_to: dt.datetime | None,
    ) -> list[InstanceRecord]:
        clauses: list[str] = []
        params: list[str] = []
        if runtime_statuses:
            clauses.append(f"runtime_status IN ({', '.join('?' * len(runtime_statuses))})")
            params.extend(runtime_statuses)
        if created_from is not None:
            clauses.append("created_time >= ?")
            params.append(format_timestamp(created_from))
        if created_to is not None:
            clauses.append("created_time <= ?")
            params.append(format_timestamp(created_to))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._connection.execute(
            f"SELECT * FROM instances{where} ORDER BY created_time, instance_id", params
        ).fetchall()
        return [_instance(row) for row in rows]

    def put_instance(self, record: InstanceRecord) -> None:
        self._connection.execute(
            "INSERT OR REPLACE INTO instances VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.instance_id,
                record.name,
                record.execution_id,
                record.input_json,
                record.output_json,
                record.custom_status_json,
                record.runtime_status,
                format_timestamp(record.created_time),
                format_timestamp(record.last_updated_time),
                record.parent_instance_id,
                record.parent_execution_id,
                record.parent_task_id,
            ),
        )

    def delete_instance(self, instance_id: str) -> None:
        """Remove an instance and everything that belongs to it."""
        self._connection.execute("DELETE FROM instances WHERE instance_id = ?", (instance_id,))
        self._connection.execute("DELETE FROM instance_trace WHERE instance_id = ?", (instance_id,))
        self.clear_execution_state(instance_id)
        self.delete_history(instance_id)
        self._connection.execute(
            "DELETE FROM external_events WHERE instance_id = ?", (instance_id,)
        )

    def set_trace_context(self, instance_id: str, carrier: Mapping[str, str]) -> None:
        """Keep the W3C carrier (``traceparent``, ``tracestate``) the instance started with."""
        if not carrier.get("traceparent"):
            return
        self._connection.execute(
            "INSERT OR REPLACE INTO instance_trace VALUES (?, ?, ?)",
            (instance_id, carrier["traceparent"], carrier.get("tracestate")),
        )

    def trace_context(self, instance_id: str) -> dict[str, str]:
        """The W3C carrier the instance started with (empty if none)."""
        row = self._connection.execute(
            "SELECT traceparent, tracestate FROM instance_trace WHERE instance_id = ?",
            (instance_id,),
        ).fetchone()
        if row is None:
            return {}
        carrier = {"traceparent": str(row[0])}
        if row[1]:
            carrier["tracestate"] = str(row[1])
        return carrier

    def clear_execution_state(self, instance_id: str) -> None:
        """Drop the pending work of an instance: inbox, timers, activity work items."""
        for table in ("inbox", "timers", "activity_work"):
            self._connection.execute(f"DELETE FROM {table} WHERE instance_id = ?", (instance_id,))

    # -- history -----------------------------------------------------------------------

    def history(self, instance_id: str) -> list[HistoryEvent]:
        return [json.loads(event) for event in self.history_json(instance_id)]

    def history_json(self, instance_id: str) -> list[str]:
        """The history as stored, one JSON document per event, oldest first."""
        rows = self._connection.execute(
            "SELECT event FROM history WHERE instance_id = ? ORDER BY position", (instance_id,)
        ).fetchall()
        return [row[0] for row in rows]

    def append_history(self, instance_id: str, events: list[HistoryEvent]) -> None:
        start = self._connection.execute(
            "SELECT COUNT(*) FROM history WHERE instance_id = ?", (instance_id,)
        ).fetchone()[0]
        self._connection.executemany(
            "INSERT INTO history VALUES (?, ?, ?)",
            [(instance_id, start + i, json.dumps(event)) for i, event in enumerate(events)],
        )

    def delete_history(self, instance_id: str) -> None:
        self._connection.execute("DELETE FROM history WHERE instance_id = ?", (instance_id,))

    # -- inbox and external events -----------------------------------------------------

    def post(self, instance_id: str, execution_id: str, event: HistoryEvent) -> None:
        self.posts += 1
        self._connection.execute(
            "INSERT INTO inbox (instance_id, execution_id, event) VALUES (?, ?, ?)",
            (instance_id, execution_id, json.dumps(event)),
        )

    def instances_with_messages(self) -> list[str]:
        rows = self._connection.execute(
            "SELECT instance_id FROM inbox GROUP BY instance_id ORDER BY MIN(message_id)"
        ).fetchall()
        return [row[0] for row in rows]

    def has_messages(self, *, excluding: Collection[str] = ()) -> bool:
        """Whether any instance but those in ``excluding`` has inbox messages."""
        where = (
            f" WHERE instance_id NOT IN ({', '.join('?' * len(excluding))})" if excluding else ""
        )
        row = self._connection.execute(f"SELECT 1 FROM inbox{where} LIMIT 1", (*excluding,))
        return row.fetchone() is not None

    def messages(self, instance_id: str) -> list[InboxMessage]:
        """The inbox of an instance, oldest first; an episode removes what it consumed."""
        rows = self._connection.execute(
            "SELECT message_id, execution_id, event FROM inbox WHERE instance_id = ? "
            "ORDER BY message_id",
            (instance_id,),
        ).fetchall()
        return [InboxMessage(row[0], row[1], json.loads(row[2])) for row in rows]

    def remove_messages(self, message_ids: list[int]) -> None:
        self._connection.executemany(
            "DELETE FROM inbox WHERE message_id = ?", [(i,) for i in message_ids]
        )

    def buffer_event(self, instance_id: str, event: HistoryEvent) -> None:
        self._connection.execute(
            "INSERT INTO external_events (instance_id, name, event) VALUES (?, ?, ?)",
            (instance_id, event["Name"], json.dumps(event)),
        )

    def buffered_events(self, instance_id: str) -> list[BufferedEvent]:
        rows = self._connection.execute(
            "SELECT buffer_id, name, event FROM external_events WHERE instance_id = ? "
            "ORDER BY buffer_id",
            (instance_id,),
        ).fetchall()
        return [BufferedEvent(row[0], row[1], json.loads(row[2])) for row in rows]

    def remove_buffered_events(self, buffer_ids: list[int]) -> None:
        self._connection.executemany(
            "DELETE FROM external_events WHERE buffer_id = ?", [(i,) for i in buffer_ids]
        )

    def discard_buffered_events(self, instance_id: str) -> list[str]:
        """Drop every undelivered event of an instance; return their names."""
        names = [event.name for event in self.buffered_events(instance_id)]
        self._connection.execute(
            "DELETE FROM external_events WHERE instance_id = ?", (instance_id,)
        )
        return names

    # -- timers ------------------------------------------------------------------------

    def add_timer(
        self, instance_id: str, execution_id: str, timer_id: int, fire_at: dt.datetime
    ) -> None:
        self._connection.execute(
            "INSERT OR REPLACE INTO timers VALUES (?, ?, ?, ?)",
            (instance_id, execution_id, timer_id, format_timestamp(fire_at)),
        )

    def cancel_timers(self, instance_id: str, execution_id: str, timer_ids: set[int]) -> None:
        self._connection.executemany(
            "DELETE FROM timers WHERE instance_id = ? AND execution_id = ? AND timer_id = ?",
            [(instance_id, execution_id, timer_id) for timer_id in timer_ids],
        )

    def due_timers(self, now: dt.datetime) -> list[DueTimer]:
        rows = self._connection.execute(
            "SELECT instance_id, execution_id, timer_id, fire_at FROM timers "
            "WHERE fire_at <= ? ORDER BY fire_at, instance_id, timer_id",
            (format_timestamp(now),),
        ).fetchall()
        return [DueTimer(row[0], row[1], row[2], parse_timestamp(row[3])) for row in rows]

    def remove_timer(self, timer: DueTimer) -> None:
        self.cancel_timers(timer.instance_id, timer.execution_id, {timer.timer_id})

    def next_timer_at(self) -> dt.datetime | None:
        row = self._connection.execute("SELECT MIN(fire_at) FROM timers").fetchone()
        return None if row[0] is None else parse_timestamp(row[0])

    # -- activity work items -----------------------------------------------------------

    def add_work(
        self, instance_id: str, execution_id: str, task_id: int, name: str, input_json: str | None
    ) -> None:
        self.work_added += 1
        self._connection.execute(
            "INSERT INTO activity_work (instance_id, execution_id, task_id, name, input) "
            "VALUES (?, ?, ?, ?, ?)",
            (instance_id, execution_id, task_id, name, input_json),
        )

    def work_items(
        self, *, excluding: Collection[int] = (), limit: int | None = None
    ) -> list[ActivityWorkItem]:
        """Work items, oldest first, without those in ``excluding``, at most ``limit``."""
        where = f" WHERE work_id NOT IN ({', '.join('?' * len(excluding))})" if excluding else ""
        rows = self._connection.execute(
            "SELECT work_id, instance_id, execution_id, task_id, name, input FROM activity_work"
            f"{where} ORDER BY work_id LIMIT ?",
            (*excluding, -1 if limit is None else limit),
        ).fetchall()
        return [ActivityWorkItem(*row) for row in rows]

    def remove_work(self, work_id: int) -> bool:
        """Delete a work item; False if it was already gone (its instance was reset)."""
        cursor = self._connection.execute("DELETE FROM activity_work WHERE work_id = ?", (work_id,))
        return cursor.rowcount > 0


def _instance(row: tuple[object, ...]) -> InstanceRecord:
    def text(value: object) -> str | None:
        return None if value is None else str(value)

    return InstanceRecord(
        instance_id=str(row[0]),
        name=str(row[1]),
        execution_id=str(row[2]),
        input_json=text(row[3]),
        output_json=text(row[4]),
        custom_status_json=text(row[5]),
        runtime_status=str(row[6]),
        created_time=parse_timestamp(str(row[7])),
        last_updated_time=parse_timestamp(str(row[8])),
        parent_instance_id=text(row[9]),
        parent_execution_id=text(row[10]),
        parent_task_id=None if row[11] is None else int(str(row[11])),
    )
