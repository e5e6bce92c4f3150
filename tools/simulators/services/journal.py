"""The ledgers' optional JSON-lines file, so restarted services keep idempotency and fences.

Each line is one fact a service's ledger learnt (a side effect, a raised fence, a dispatch, a
key undone with nothing to undo, a decline), tagged with the service's name and written and
flushed before the client hears about it: a process killed at any point (even ``kill -9``)
leaves either the whole fact or nothing, so a retry after a restart replays instead of
performing the side effect twice, an undone key stays undone and a declined request stays
declined (E7, E8, C1, C8). A line cut short by the kill is
dropped on load. The services of one process share one file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


class CorruptJournal(ValueError):
    """A ledger file with a damaged line before its end; it is not safe to guess past it."""


class LedgerJournal:
    """Appends ledger facts to ``path`` and reads back the facts written by earlier runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._drop_torn_tail()
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def events(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every fact in the file with its line number."""
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                try:
                    event = json.loads(line)
                except json.JSONDecodeError as error:
                    raise CorruptJournal(
                        f"{self.path}:{number} is not a JSON line ({error}); move the file "
                        "away to start with an empty ledger"
                    ) from None
                if not isinstance(event, dict):
                    raise CorruptJournal(f"{self.path}:{number} is not a JSON object")
                yield number, event

    def append(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None:
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(line)
            # The OS keeps flushed bytes when the process dies, which is the crash this file
            # is for.
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _drop_torn_tail(self) -> None:
        if not self.path.exists():
            return
        content = self.path.read_bytes()
        if content and not content.endswith(b"\n"):
            with self.path.open("r+b") as file:
                file.truncate(content.rfind(b"\n") + 1)
