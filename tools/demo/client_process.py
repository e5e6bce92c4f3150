"""The demo's client app in a process of its own: ``python -m tools.demo.client_process``.

In production the submitting app is another program. Here, too: run inside the devhost's
process, its sending and listening (the pure-Python AMQP stack) held the event loop that
receives and dispatches the very submissions it had just sent, and both cores sat half idle
until the whole burst was out.

Protocol, one JSON object per line. The parent writes a spec line on the child's stdin
(``ClientSpec``; the connection string goes there rather than on the command line, where
other local users could read it). The child answers on stdout: ``{"started": t}`` just
before its first send, ``{"submitted": n}`` when every message is out, ``{"finished": n,
"statuses": {...}}`` as statuses arrive, and, once a ``stop`` line comes (or stdin closes,
when the parent died), a last ``{"log": ..., "sent": n}`` before it exits. Times are
``time.monotonic()``, one clock for every process on the machine (CLOCK_MONOTONIC).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from devhost import event_loop, telemetry

from tools.demo.client import ClientLog, DemoClient, Workload

PROGRESS_SECONDS = 0.1
STOP_BOUND_SECONDS = 30.0
STOP_LINE = "stop"


@dataclass(frozen=True)
class ClientSpec:
    """What the client app is told: where to send, where to listen, which workload."""

    connection_string: str
    orders_queue: str
    reply_queue: str
    orders: int
    seed: int
    telemetry_export: str | None = None
    """Where the client exports its spans (``devhost.telemetry``): a file, ``console``."""

    def workload(self) -> Workload:
        return Workload.generate(self.orders, self.seed)


@dataclass
class ClientOutcome:
    """What the client process saw, read back by the parent."""

    log: ClientLog
    sent: int
    started: float


class ClientProcess:
    """The parent's handle on one client process: live counts, then its whole log."""

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec
        self.finished = 0
        self.statuses: Counter[str] = Counter()
        self.submitted = asyncio.Event()
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[ClientOutcome] | None = None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.demo.client_process",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # A log of 5,000 orders is one line of a few hundred kilobytes.
            limit=64 * 1024 * 1024,
        )
        stdin, stdout = self._process.stdin, self._process.stdout
        if stdin is None or stdout is None:
            raise RuntimeError("the demo client process has no pipes")
        stdin.write((json.dumps(asdict(self.spec)) + "\n").encode())
        await stdin.drain()
        self._reader = asyncio.create_task(self._read(self._process, stdout))

    def check(self) -> None:
        """Raise what went wrong if the client process ended before it was stopped."""
        if self._reader is not None and self._reader.done():
            self._reader.result()
            raise RuntimeError("the demo client process ended before it was stopped")

    async def stop(self) -> ClientOutcome:
        """Stop listening and read the client's log."""
        if self._process is None or self._process.stdin is None or self._reader is None:
            raise RuntimeError("the demo client process was not started")
        if not self._reader.done():
            self._process.stdin.write(f"{STOP_LINE}\n".encode())
            with contextlib.suppress(ConnectionError):
                await self._process.stdin.drain()
        return await asyncio.wait_for(asyncio.shield(self._reader), STOP_BOUND_SECONDS)

    async def close(self) -> None:
        """End the process whatever state it is in."""
        if self._process is None:
            return
        if self._process.returncode is None:
            self._process.kill()
        await self._process.wait()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(
        self, process: asyncio.subprocess.Process, stdout: asyncio.StreamReader
    ) -> ClientOutcome:
        started: float | None = None
        while line := await stdout.readline():
            message = json.loads(line)
            if "started" in message:
                started = float(message["started"])
            elif "submitted" in message:
                self.submitted.set()
            elif "finished" in message:
                self.finished = int(message["finished"])
                self.statuses = Counter(message["statuses"])
            elif "log" in message:
                if started is None:
                    raise RuntimeError("the demo client process never said when it started")
                log = ClientLog.from_document(message["log"])
                return ClientOutcome(log, int(message["sent"]), started)
        code = await process.wait()
        raise RuntimeError(f"the demo client process exited with code {code} before its report")


# -- the child ---------------------------------------------------------------------------


def _emit(out: TextIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


async def _progress(client: DemoClient, out: TextIO) -> None:
    shown: dict[str, int] | None = None
    while True:
        statuses = dict(client.log.statuses)
        if statuses != shown:
            shown = statuses
            _emit(out, {"finished": client.log.answered, "statuses": statuses})
        await asyncio.sleep(PROGRESS_SECONDS)


async def run_client(spec: ClientSpec, commands: TextIO, out: TextIO) -> None:
    client = DemoClient(spec.connection_string, spec.orders_queue, spec.reply_queue)
    await client.open()
    stop = asyncio.Event()
    listener = asyncio.create_task(client.listen(stop))
    progress = asyncio.create_task(_progress(client, out))
    # readline blocks, so it waits on a thread; it returns on the stop line or at EOF.
    stop_line = asyncio.ensure_future(asyncio.to_thread(commands.readline))
    try:
        _emit(out, {"started": time.monotonic()})
        await client.submit(spec.workload())
        _emit(out, {"submitted": client.sent})
        await asyncio.wait({listener, stop_line}, return_when=asyncio.FIRST_COMPLETED)
        if listener.done():
            listener.result()  # the listener failed: say why, not a log that looks complete
        stop.set()
        await listener
    finally:
        progress.cancel()
        listener.cancel()
        await asyncio.gather(progress, listener, return_exceptions=True)
        await client.close()
    _emit(out, {"log": client.log.to_document(), "sent": client.sent})


def main() -> int:
    spec = ClientSpec(**json.loads(sys.stdin.readline()))
    if spec.telemetry_export is not None:
        telemetry.configure(spec.telemetry_export, service_name="demo-client")
    try:
        event_loop.run(run_client(spec, sys.stdin, sys.stdout))
        telemetry.shutdown()
    except BaseException:
        # Leave now: the thread waiting for the stop line would hold a normal exit until
        # the parent closed stdin, and the parent learns of the failure from the exit.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
