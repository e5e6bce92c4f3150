"""The devhost's language worker processes, host side (``--worker-processes N``).

As the Functions host runs function code in ``FUNCTIONS_WORKER_PROCESS_COUNT`` Python worker
processes, the devhost can run orchestrator replays, activities and trigger functions in
``language_worker.py`` processes, keeping triggers, settlement, Durable histories and HTTP
in its own process. Requests are pipelined over each worker's stdin (``worker_frames.py``)
and answered on its stdout, matched by id; the least busy worker gets the next one. Workers
start on first use, with the environment (the app settings the devhost exported) and the
host's gRPC settlement address on their command line, as the host starts the Python worker.
A worker that dies fails its requests in flight with ``WorkerUnavailableError`` and is
started again on the next request, as the host restarts a crashed language worker. Each
request carries the trace context current where it was made (the host's span of the
invocation, C9), as the host sends it in the InvocationRequest. Closing a worker closes its
stdin first so it can flush its telemetry, and kills it only if it does not exit in time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devhost.durable.replay import WorkerUnavailableError
from devhost.invocation import FunctionError
from devhost.telemetry import current_carrier
from devhost.worker_frames import FRAME_HEADER, decode_payload, encode_frame

logger = logging.getLogger(__name__)

EXIT_GRACE_SECONDS = 5.0


class LanguageWorkers:
    """``processes`` language workers for the app ``app`` (``module:attribute``) in ``app_root``."""

    def __init__(
        self, app: str, app_root: Path, processes: int, extra_arguments: Sequence[str] = ()
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self._command = [
            sys.executable,
            "-m",
            "devhost.language_worker",
            app,
            str(app_root.resolve()),
            "--log-level",
            logging.getLevelName(logging.getLogger().getEffectiveLevel()),
            *extra_arguments,
        ]
        self._workers: list[_Worker | None] = [None] * processes
        self._ids = itertools.count()
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        """Start every worker and wait until each has loaded the app.

        The Functions host starts its listeners once the workers answered the function load;
        otherwise the first burst of messages waits behind a worker still importing the app.
        """
        await self.call_everywhere("os:getpid")

    async def replay(self, name: str, context_json: str) -> dict[str, Any]:
        state: dict[str, Any] = await self._request("replay", name, context_json)
        return state

    async def run_activity(self, name: str, input_json: str | None) -> str:
        output: str = await self._request("activity", name, input_json)
        return output

    async def invoke(self, function_name: str, arguments: dict[str, Any]) -> Any:
        return await self._request("invoke", function_name, arguments)

    async def call_everywhere(self, spec: str) -> list[Any]:
        """``module:function`` called in every worker (started if need be); their results."""
        await self._least_busy()
        workers = [worker for worker in self._workers if worker is not None]
        return list(
            await asyncio.gather(
                *(worker.request(next(self._ids), "call", spec) for worker in workers)
            )
        )

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (for operators and tests)."""
        return [worker.pid for worker in self._workers if worker is not None and worker.alive]

    async def close(self) -> None:
        for worker in self._workers:
            if worker is not None:
                await worker.close()
        self._workers = [None] * len(self._workers)

    async def _request(self, kind: str, *payload: Any) -> Any:
        worker = await self._least_busy()
        return await worker.request(next(self._ids), kind, *payload)

    async def _least_busy(self) -> _Worker:
        workers = [worker for worker in self._workers if worker is not None and worker.alive]
        if len(workers) < len(self._workers):  # on first use, or after a worker died
            async with self._starting:
                for index, worker in enumerate(self._workers):
                    if worker is None or not worker.alive:
                        if worker is not None:
                            await worker.close()
                        self._workers[index] = await _Worker.start(self._command)
            workers = [worker for worker in self._workers if worker is not None]
        return min(workers, key=lambda worker: len(worker.pending))


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.alive = True
        self._reader = asyncio.create_task(self._read_answers(), name="language-worker-reader")

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    async def start(cls, command: list[str]) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=2**31 - 1
        )
        logger.info("language worker process started pid=%s", process.pid)
        return cls(process)

    async def request(self, request_id: int, kind: str, *payload: Any) -> Any:
        if not self.alive:
            raise WorkerUnavailableError("worker process lost")
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = answer
        try:
            self._stdin.write(encode_frame((kind, request_id, current_carrier(), *payload)))
            await self._stdin.drain()
            return await answer
        except (ConnectionError, BrokenPipeError) as error:
            self._lost(f"cannot write to it: {error}")
            raise WorkerUnavailableError(str(error)) from error
        finally:
            self.pending.pop(request_id, None)

    async def _read_answers(self) -> None:
        try:
            while True:
                header = await self._stdout.readexactly(FRAME_HEADER.size)
                (length,) = FRAME_HEADER.unpack(header)
                request_id, status, *result = decode_payload(await self._stdout.readexactly(length))
                answer = self.pending.get(request_id)
                if answer is None or answer.done():
                    continue  # its caller was cancelled meanwhile
                if status == "ok":
                    answer.set_result(result[0])
                else:
                    answer.set_exception(FunctionError(*result))
        except asyncio.IncompleteReadError:
            self._lost(f"it exited with code {await self._process.wait()}")
        except Exception as error:  # a frame the devhost cannot read: the worker is unusable
            self._lost(f"unreadable answer: {error!r}")
            self._process.kill()

    def _lost(self, why: str, *, expected: bool = False) -> None:
        if self.alive and not expected:
            logger.error("language worker process lost pid=%s: %s", self._process.pid, why)
        self.alive = False
        for answer in self.pending.values():
            if not answer.done():
                answer.set_exception(WorkerUnavailableError(f"worker process lost: {why}"))

    async def close(self) -> None:
        self._lost("the devhost stopped it", expected=True)
        self._reader.cancel()
        if self._process.returncode is None:
            # End of its requests: the worker flushes its telemetry and exits by itself.
            self._stdin.close()
            try:
                await asyncio.wait_for(self._process.wait(), EXIT_GRACE_SECONDS)
            except TimeoutError:
                self._process.kill()
        await self._process.wait()
