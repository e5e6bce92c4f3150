"""A command's progress line: rewritten in place on a terminal, a plain line now and then in a
log.

`make demo` and `make chaos` show how far a run got. On a terminal the line is redrawn with a
carriage return; written to a file or a CI log, carriage returns would pile every update onto
one line thousands of characters long, so there a line is written only when its text changed
and at most every `LOG_INTERVAL_SECONDS`, and the last state is always written at the end.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

LOG_INTERVAL_SECONDS = 5.0


class ProgressLine:
    """One progress line on `stream` (standard error by default); with `enabled` off, it
    writes nothing (a command's ``--no-progress``)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        log_interval: float = LOG_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = self._stream.isatty()
        self._log_interval = log_interval
        self._clock = clock
        self._written: str | None = None
        self._written_at = -math.inf
        self._latest: str | None = None

    def show(self, text: str) -> None:
        """The run's state now."""
        if not self.enabled:
            return
        self._latest = text
        if self._terminal:
            # Padded to the line it replaces, so a shorter text leaves nothing of the longer.
            self._write(f"\r{text.ljust(len(self._written or ''))}")
            self._written = text
            return
        now = self._clock()
        if text != self._written and now - self._written_at >= self._log_interval:
            self._write(f"{text}\n")
            self._written, self._written_at = text, now

    def note(self, text: str) -> None:
        """A line of its own between updates (a crash, a restart): on a terminal it breaks
        the progress line, which the next update draws again below it."""
        if not self.enabled:
            return
        self._write(f"\n{text}\n" if self._terminal and self._written is not None else f"{text}\n")
        if self._terminal:
            self._written = None

    def end(self) -> None:
        """Finish the line: on a terminal, move past it; in a log, write the last state shown
        unless it was written already."""
        if self._latest is None:
            return
        if self._terminal:
            if self._written is not None:
                self._write("\n")
        elif self._latest != self._written:
            self._write(f"{self._latest}\n")

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()
