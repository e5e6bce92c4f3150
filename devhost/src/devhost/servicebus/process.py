"""The embedded broker in a process of its own: ``python -m devhost servicebus`` as a child.

Service Bus is a service apart from the Functions host; the demo and the benchmark run the
broker as a separate process so that its work does not compete with the devhost's for one
interpreter lock. Tests keep the in-process ``ServiceBusBroker`` (it starts in milliseconds).

With a ``data`` journal the child keeps accepted messages across a crash: ``kill`` ends it
with SIGKILL, as an outage would, and ``start`` again brings it back on the same port with
the same journal, so clients reconnect to the address they know and find the messages kept.
``active_counts`` asks the child for its queues' active message counts over the same stdin.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from devhost import child_process

READY_BOUND_SECONDS = 30.0
COUNTS_BOUND_SECONDS = 10.0
ACTIVE_COUNTS_REQUEST = "active-counts"
"""The line a parent writes to a ``servicebus --stop-with-stdin`` child for its queue counts."""


class BrokerProcess:
    """One broker child process with the queues of ``config``.

    ``port`` 0 picks a free port on the first start; later starts reuse it. ``data`` is the
    SQLite journal (``--data``) that keeps accepted messages; without it they live in memory.
    """

    def __init__(self, config: Path, *, data: Path | None = None, port: int = 0) -> None:
        self._config = config
        self._data = data
        self._port = port
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

    @property
    def port(self) -> int:
        """The port the broker listens on (0 until the first start picked one)."""
        return self._port

    def start(self) -> None:
        """Start the child and wait until it listens (again on the same port after a kill)."""
        if self._process is not None:
            raise RuntimeError("the broker process is already running")
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        data = () if self._data is None else ("--data", str(self._data))
        self._process = subprocess.Popen(
            [
                *(sys.executable, "-m", "devhost", "--log-level", level, "servicebus"),
                *("--port", str(self._port), "--config", str(self._config), *data),
                "--stop-with-stdin",
            ],
            # Held open until stop(); if this process dies first, the broker sees it close.
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = child_process.first_lines(self._process, 2, READY_BOUND_SECONDS)
        if (
            len(lines) < 2
            or not lines[0].startswith("listening on ")
            or not lines[1].startswith("Endpoint=")
        ):
            code = self._process.poll()
            self.stop()
            raise RuntimeError(
                f"the broker process did not report readiness within {READY_BOUND_SECONDS:.0f}s "
                f"(exit code {code}; it said {lines!r})"
            )
        self._port = int(lines[0].rsplit(":", 1)[1])
        self._connection_string = lines[1]

    def active_counts(self) -> dict[str, int]:
        """Messages available to receive now in each queue, as the child counts them
        (``ServiceBusBroker.active_counts``); raises RuntimeError when it does not answer."""
        process = self._process
        if process is None or process.stdin is None:
            raise RuntimeError("the broker process is not running: call start() first")
        process.stdin.write(ACTIVE_COUNTS_REQUEST + "\n")
        process.stdin.flush()
        lines = child_process.first_lines(process, 1, COUNTS_BOUND_SECONDS)
        answer = json.loads(lines[0]) if lines else None
        if not isinstance(answer, dict) or "error" in answer:
            raise RuntimeError(f"the broker process did not count its queues: {answer!r}")
        return {str(queue): int(count) for queue, count in answer.items()}

    def kill(self) -> None:
        """End the child with SIGKILL, as a crash would: no link or connection is closed, and
        only what the journal holds survives. ``start`` brings it back on the same port."""
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait(child_process.STOP_BOUND_SECONDS)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def stop(self) -> None:
        process, self._process = self._process, None
        self._connection_string = None
        if process is not None:
            child_process.stop(process)
