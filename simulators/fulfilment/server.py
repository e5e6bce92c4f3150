"""Running the fulfilment simulator: in-process, on a background thread, or as a command.

- `FulfilmentService`: ``await start()`` / ``await stop()`` on the caller's event loop; binds
  127.0.0.1 on an ephemeral port unless told otherwise (``.port``, ``.base_url``).
- `FulfilmentServiceThread`: the same service on its own thread and loop, as a context manager,
  for callers without an event loop.
- ``python -m simulators.fulfilment --port 0 --faults none|default|harsh --seed S
  [--ledger FILE]``: prints ``listening on 127.0.0.1:<port>`` once it serves, and exits 0 on
  SIGTERM or SIGINT.

With a ledger file the idempotency records, fences and side effects survive a restart (even
``kill -9``); without one they live in memory only. Fault counters and the request count
always start from zero.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from simulators.fulfilment.api import FulfilmentApi
from simulators.fulfilment.faults import PRESETS, FaultInjector, FaultPlan
from simulators.fulfilment.journal import CorruptJournal, LedgerJournal
from simulators.fulfilment.ledger import Ledger, SideEffect

LOOPBACK = "127.0.0.1"
# In-flight requests are released by the stopping event, so this only bounds a stuck client.
_SHUTDOWN_TIMEOUT_SECONDS = 5.0


class FulfilmentService:
    def __init__(
        self,
        plan: FaultPlan | None = None,
        *,
        seed: int = 0,
        host: str = LOOPBACK,
        port: int = 0,
        ledger_path: Path | None = None,
    ) -> None:
        self._plan = plan or PRESETS["none"]
        self._seed = seed
        self._host = host
        self._requested_port = port
        self._ledger_path = ledger_path
        self._api: FulfilmentApi | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._port: int | None = None

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the fulfilment service is already running")
        journal = LedgerJournal(self._ledger_path) if self._ledger_path else None
        self._stopping = asyncio.Event()
        self._api = FulfilmentApi(
            Ledger(journal), FaultInjector(self._plan, self._seed), self._stopping
        )
        runner = web.AppRunner(
            self._api.app,
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=_SHUTDOWN_TIMEOUT_SECONDS,
        )
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._requested_port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            self._api.ledger.close()
            raise
        self._runner = runner
        self._port = _bound_port(runner)

    async def stop(self) -> None:
        """Release hung and delayed requests, stop serving, close the ledger file. Idempotent."""
        if self._runner is None or self._stopping is None or self._api is None:
            return
        self._stopping.set()
        await self._runner.cleanup()
        self._api.ledger.close()
        self._runner = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the fulfilment service has not been started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def stats(self) -> dict[str, Any]:
        """The ``GET /stats`` document, read in-process."""
        return self._running_api().stats()

    def ledger_entries(self, order_id: str | None = None) -> list[SideEffect]:
        return self._running_api().ledger.entries(order_id)

    def replace_fault_plan(self, plan: FaultPlan) -> None:
        """Like ``PUT /faults``; the next request already uses ``plan``."""
        self._plan = plan
        if self._api is not None:
            self._api.faults.replace_plan(plan)

    def _running_api(self) -> FulfilmentApi:
        if self._api is None:
            raise RuntimeError("the fulfilment service has not been started")
        return self._api


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the fulfilment service bound no socket")


class FulfilmentServiceThread:
    """A `FulfilmentService` on a background thread with its own event loop.

    ``with FulfilmentServiceThread(FaultPlan.preset("default"), seed=7) as service:`` starts it
    (raising what start raised, or TimeoutError after ``start_timeout`` seconds) and stops it on
    exit. The inspection methods are safe to call from any thread.
    """

    def __init__(
        self,
        plan: FaultPlan | None = None,
        *,
        seed: int = 0,
        host: str = LOOPBACK,
        port: int = 0,
        ledger_path: Path | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.service = FulfilmentService(
            plan, seed=seed, host=host, port=port, ledger_path=ledger_path
        )
        self._start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="fulfilment-service", daemon=True)
        self._started = threading.Event()
        self._startup_error: BaseException | None = None

    def __enter__(self) -> Self:
        self._loop = asyncio.new_event_loop()
        self._thread.start()
        if not self._started.wait(self._start_timeout):
            raise TimeoutError(
                f"the fulfilment service did not start within {self._start_timeout}s"
            )
        if self._startup_error is not None:
            self._thread.join(self._start_timeout)
            raise self._startup_error
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        loop = self._running_loop()
        stopped = asyncio.run_coroutine_threadsafe(self.service.stop(), loop)
        stopped.result(timeout=_SHUTDOWN_TIMEOUT_SECONDS * 2)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(_SHUTDOWN_TIMEOUT_SECONDS * 2)

    @property
    def port(self) -> int:
        return self.service.port

    @property
    def base_url(self) -> str:
        return self.service.base_url

    def stats(self) -> dict[str, Any]:
        return self.service.stats()

    def ledger_entries(self, order_id: str | None = None) -> list[SideEffect]:
        return self.service.ledger_entries(order_id)

    def replace_fault_plan(self, plan: FaultPlan) -> None:
        self.service.replace_fault_plan(plan)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the fulfilment service thread was never entered")
        return self._loop

    def _run(self) -> None:
        loop = self._running_loop()
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self.service.start())
            except BaseException as error:  # re-raised in the caller's thread by __enter__
                self._startup_error = error
                return
            finally:
                self._started.set()
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulators.fulfilment",
        description="Simulated fulfilment service: the remote service the order agents call.",
    )
    parser.add_argument("--host", default=LOOPBACK, help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--faults", choices=sorted(PRESETS), default="none", help="fault preset")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    parser.add_argument("--ledger", type=Path, help="JSON-lines file keeping the ledger")
    return parser.parse_args(argv)


async def _serve(arguments: argparse.Namespace) -> None:
    service = FulfilmentService(
        FaultPlan.preset(arguments.faults),
        seed=arguments.seed,
        host=arguments.host,
        port=arguments.port,
        ledger_path=arguments.ledger,
    )
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"listening on {arguments.host}:{service.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await service.stop()


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parse_arguments(argv)
    try:
        asyncio.run(_serve(arguments))
    except (OSError, CorruptJournal) as error:
        print(f"fulfilment service could not start: {error}", file=sys.stderr)
        return 1
    return 0
