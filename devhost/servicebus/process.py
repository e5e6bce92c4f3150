"""The embedded broker in a process of its own: ``python -m devhost servicebus`` as a child.

Service Bus is a service apart from the Functions host; the demo and the benchmark run the
broker as a separate process so that its work does not compete with the devhost's for one
interpreter lock. Tests keep the in-process ``ServiceBusBroker`` (it starts in milliseconds).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from devhost import child_process

READY_BOUND_SECONDS = 30.0


class BrokerProcess:
    """One broker child process on a free port, with the queues of ``config``."""

    def __init__(self, config: Path) -> None:
        self._config = config
        self._process: subprocess.Popen[str] | None = None
        self._connection_string: str | None = None

    @property
    def connection_string(self) -> str:
        if self._connection_string is None:
            raise RuntimeError("the broker process is not running: call start() first")
        return self._connection_string

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        self._process = subprocess.Popen(
            [
                *(sys.executable, "-m", "devhost", "--log-level", level, "servicebus"),
                *("--port", "0", "--config", str(self._config), "--stop-with-stdin"),
            ],
            # Held open until stop(); if this process dies first, the broker sees it close.
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = child_process.first_lines(self._process, 2, READY_BOUND_SECONDS)
        if len(lines) < 2 or not lines[1].startswith("Endpoint="):
            code = self._process.poll()
            self.stop()
            raise RuntimeError(
                f"the broker process did not report readiness within {READY_BOUND_SECONDS:.0f}s "
                f"(exit code {code}; it said {lines!r})"
            )
        self._connection_string = lines[1]

    def stop(self) -> None:
        process, self._process = self._process, None
        self._connection_string = None
        if process is not None:
            child_process.stop(process)
