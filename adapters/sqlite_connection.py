"""Thread-safe access to one SQLite database file for the embedded stores (S2, C6).

`SqliteDatabase` gives each thread its own connection, in WAL and autocommit mode (every
store operation is one statement), and queues the writers of one process on a lock.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from domain.ports import StoreUnavailable

BUSY_TIMEOUT_SECONDS = 30.0


class SqliteDatabase:
    """Per-thread connections to one database file, created with `schema` on first use."""

    def __init__(self, path: str | Path, schema: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self.connection().executescript(schema)

    def connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self.path} is closed")
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is not None:
            return connection
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"SQLite store {self.path} is closed")
            try:
                connection = sqlite3.connect(
                    self.path,
                    timeout=BUSY_TIMEOUT_SECONDS,
                    isolation_level=None,
                    check_same_thread=False,
                )
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as error:
                raise StoreUnavailable(f"cannot open SQLite store {self.path}: {error}") from error
            self._connections.append(connection)
        self._local.connection = connection
        return connection

    def execute(self, sql: str, parameters: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """Run one read statement to completion and return its rows."""
        try:
            cursor = self.connection().execute(sql, parameters)
            rows: list[sqlite3.Row] = cursor.fetchall()
        except sqlite3.OperationalError as error:
            raise StoreUnavailable(f"SQLite store {self.path}: {error}") from error
        return rows

    def write(self, sql: str, parameters: tuple[object, ...] = ()) -> tuple[int, list[sqlite3.Row]]:
        """Run one write statement: how many rows it changed, and its RETURNING rows."""
        connection = self.connection()
        try:
            with self._write_lock:
                cursor = connection.execute(sql, parameters)
                rows: list[sqlite3.Row] = cursor.fetchall()
                return cursor.rowcount, rows
        except sqlite3.OperationalError as error:
            raise StoreUnavailable(f"SQLite store {self.path}: {error}") from error

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
