"""The embedded broker in a process of its own: ``python -m devhost servicebus`` as a child.

Service Bus is a service apart from the Functions host; the demo and the benchmark run the
broker as a separate process so that its work does not compete with the devhost's for one
interpreter lock. Tests keep the in-process ``ServiceBusBroker`` (it starts in milliseconds).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

READY_BOUND_SECONDS = 30.0
STOP_BOUND_SECONDS = 10.0


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
        lines = self._first_lines(self._process, 2)
        if len(lines) < 2 or not lines[1].startswith("Endpoint="):
            code = self._process.poll()
            self.stop()
            raise RuntimeError(
                f"the broker process did not report readiness within {READY_BOUND_SECONDS:.0f}s "
                f"(exit code {code}; it said {lines!r})"
            )
        self._connection_string = lines[1]

    @staticmethod
    def _first_lines(process: subprocess.Popen[str], count: int) -> list[str]:
        # readline blocks, so it runs on a helper thread and the wait on it is bounded.
        lines: list[str] = []

        def read() -> None:
            while process.stdout is not None and len(lines) < count:
                line = process.stdout.readline()
                if not line:
                    return
                lines.append(line.strip())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(READY_BOUND_SECONDS)
        return list(lines)

    def stop(self) -> None:
        process, self._process = self._process, None
        self._connection_string = None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(STOP_BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_BOUND_SECONDS)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
