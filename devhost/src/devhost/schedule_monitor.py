"""Persisted timer schedule status, like the Functions host's schedule monitor.

The host records each timer function's last and next occurrence in storage; after a restart
an occurrence that passed while the host was down fires once with ``IsPastDue`` set. The
devhost keeps the same record in SQLite.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ScheduleStatus:
    last: dt.datetime | None
    next: dt.datetime
    last_updated: dt.datetime

    def as_binding_data(self) -> dict[str, str | None]:
        return {
            "Last": self.last.isoformat() if self.last else None,
            "Next": self.next.isoformat(),
            "LastUpdated": self.last_updated.isoformat(),
        }


class ScheduleMonitor:
    def __init__(self, path: Path | str) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS schedule_status ("
            " function TEXT PRIMARY KEY, last TEXT, next TEXT NOT NULL, last_updated TEXT NOT NULL)"
        )

    def load(self, function: str) -> ScheduleStatus | None:
        with self._lock:
            row = self._db.execute(
                "SELECT last, next, last_updated FROM schedule_status WHERE function = ?",
                (function,),
            ).fetchone()
        if row is None:
            return None
        last, next_, updated = row
        return ScheduleStatus(
            dt.datetime.fromisoformat(last) if last else None,
            dt.datetime.fromisoformat(next_),
            dt.datetime.fromisoformat(updated),
        )

    def save(self, function: str, status: ScheduleStatus) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO schedule_status (function, last, next, last_updated)"
                " VALUES (?, ?, ?, ?) ON CONFLICT(function) DO UPDATE SET"
                " last = excluded.last, next = excluded.next, last_updated = excluded.last_updated",
                (
                    function,
                    status.last.isoformat() if status.last else None,
                    status.next.isoformat(),
                    status.last_updated.isoformat(),
                ),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
