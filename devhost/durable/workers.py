"""Where episodes are decided: in the devhost's own process or in worker processes.

On Azure the Functions host keeps the histories and the Python worker replays: the host
sends the orchestration context, the worker calls the orchestrator function through the SDK
and answers with the orchestrator state. The devhost plays both parts. In one process (the
default) tests start fast and share one clock; with worker processes the whole decision of
an episode (the SDK's replays, buffered-event deliveries, the translation of the actions),
the costliest thing the devhost does per episode, stops competing for the GIL with the
triggers, the broker clients and the engine's bookkeeping (issue 4: throughput on two
cores, measured by ``make bench``). The engine reads and commits in both cases; a worker
only computes an outcome from what it was sent, so a worker that dies loses nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
from pathlib import Path
from typing import Any, Protocol

from devhost.durable.frames import FRAME_HEADER, decode_payload, encode_frame
from devhost.durable.registry import FunctionRegistry
from devhost.durable.replay import EpisodeOutcome, EpisodeRequest, decide_episode

logger = logging.getLogger(__name__)


class WorkerUnavailableError(RuntimeError):
    """A worker process died during a replay; the episode is run again, nothing is lost."""


class OrchestratorRunner(Protocol):
    """Decides one episode: replays through the SDK and translates what the code asked for."""

    async def run_episode(self, request: EpisodeRequest) -> EpisodeOutcome: ...

    async def close(self) -> None: ...


class InProcessOrchestrators:
    """Replays in the calling thread, as the devhost always did before worker processes."""

    def __init__(self, registry: FunctionRegistry) -> None:
        self._registry = registry

    async def run_episode(self, request: EpisodeRequest) -> EpisodeOutcome:
        return decide_episode(request, self._replay)

    def _replay(self, name: str, context_json: str) -> dict[str, Any]:
        return self._registry.orchestrator(name).invoke(context_json)

    async def close(self) -> None:
        pass


class WorkerProcessOrchestrators:
    """Replays in ``processes`` worker processes (``replay_worker.py``) that import the app.

    Requests are pipelined: each worker has several queued on its stdin, so it never waits
    for the devhost between replays. Workers start on the first replay and inherit the
    environment, so the app settings the devhost exported are theirs too. A worker that
    dies fails its pending replays with ``WorkerUnavailableError`` and is started again on
    the next one, as the Functions host restarts a crashed language worker.
    """

    def __init__(self, app: str, app_root: Path, processes: int) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self._command = [
            sys.executable,
            "-m",
            "devhost.durable.replay_worker",
            app,
            str(app_root.resolve()),
            logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        ]
        self._workers: list[_Worker | None] = [None] * processes
        self._ids = itertools.count()
        self._starting = asyncio.Lock()

    async def run_episode(self, request: EpisodeRequest) -> EpisodeOutcome:
        worker = await self._least_busy()
        return await worker.run_episode(next(self._ids), request)

    async def _least_busy(self) -> _Worker:
        async with self._starting:
            for index, worker in enumerate(self._workers):
                if worker is None or not worker.alive:
                    if worker is not None:
                        await worker.close()
                    self._workers[index] = await _Worker.start(self._command)
        workers = [worker for worker in self._workers if worker is not None]
        return min(workers, key=lambda worker: len(worker.pending))

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (for operators and tests)."""
        return [worker.pid for worker in self._workers if worker is not None and worker.alive]

    async def close(self) -> None:
        for worker in self._workers:
            if worker is not None:
                await worker.close()
        self._workers = [None] * len(self._workers)


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self.pending: dict[int, asyncio.Future[EpisodeOutcome]] = {}
        self.alive = True
        self._reader = asyncio.create_task(self._read_answers(), name="replay-worker-reader")

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    async def start(cls, command: list[str]) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        logger.info("orchestrator worker process started pid=%s", process.pid)
        return cls(process)

    async def run_episode(self, request_id: int, request: EpisodeRequest) -> EpisodeOutcome:
        if not self.alive:
            raise WorkerUnavailableError("worker process lost")
        answer: asyncio.Future[EpisodeOutcome] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = answer
        try:
            self._stdin.write(encode_frame((request_id, request)))
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
                request_id, outcome = decode_payload(await self._stdout.readexactly(length))
                answer = self.pending.get(request_id)
                if answer is None or answer.done():
                    continue
                if isinstance(outcome, EpisodeOutcome):
                    answer.set_result(outcome)
                else:
                    answer.set_exception(ReplayError(str(outcome)))
        except asyncio.IncompleteReadError:
            self._lost(f"it exited with code {await self._process.wait()}")
        except Exception as error:  # a frame the devhost cannot read: the worker is unusable
            self._lost(f"unreadable answer: {error!r}")
            self._process.kill()

    def _lost(self, why: str, *, expected: bool = False) -> None:
        if self.alive and not expected:
            logger.error("orchestrator worker process lost pid=%s: %s", self._process.pid, why)
        self.alive = False
        for answer in self.pending.values():
            if not answer.done():
                answer.set_exception(WorkerUnavailableError(f"worker process lost: {why}"))

    async def close(self) -> None:
        self._lost("the devhost stopped it", expected=True)
        self._reader.cancel()
        if self._process.returncode is None:
            self._process.kill()
        await self._process.wait()


class ReplayError(RuntimeError):
    """Deciding an episode failed in a worker process (a devhost bug: it is tried again)."""
