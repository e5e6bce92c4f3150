"""Running the simulated services, all on one port: in-process, on a thread, or as a command.

Stock, payment and shipping are served under ``/stock``, ``/payment`` and ``/shipping``
(`simulators.services.declarations`), each with its own ledger, fault plan, ``/ledger``,
``/stats`` and ``/faults`` (`simulators.services.api`).

- `SimulatedServices`: ``await start()`` / ``await stop()`` on the caller's event loop; binds
  127.0.0.1 on an ephemeral port unless told otherwise (``.port``, ``.base_url``,
  ``.url(service)``: the service's base URL, what its agent's ``*_SERVICE_URL`` setting names).
- `SimulatedServicesThread`: the same services on their own thread and loop, as a context
  manager, for callers without an event loop.
- ``python -m tools.simulators.services --port 0 --faults PRESET --seed S [--ledger FILE]``:
  prints ``listening on 127.0.0.1:<port>`` once it serves, and exits 0 on SIGTERM or SIGINT.
  ``--faults`` names a preset of `simulators.services.faults` (``none`` by default); each
  service gets that preset's plan for it.

With a ledger file the idempotency records, fences and side effects of every service survive
a restart (even ``kill -9``); without one they live in memory only. Fault counters and the
request counts always start from zero.

Every request is a SERVER span, child of the W3C ``traceparent`` the caller sent (C9), when the
process has an OpenTelemetry provider (the demo's, or ``--telemetry-export FILE|console`` of
the command, which exports like the devhost's option); without one it costs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from aiohttp.typedefs import Handler
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

from tools.simulators.services.api import ServiceApi
from tools.simulators.services.declarations import SERVICES, declaration, preset_plans
from tools.simulators.services.faults import PRESET_NAMES, FaultPlan
from tools.simulators.services.injector import FaultInjector
from tools.simulators.services.journal import CorruptJournal, LedgerJournal
from tools.simulators.services.ledger import Ledger, SideEffect, Tombstone, restore_ledgers, utc_now

LOOPBACK = "127.0.0.1"
# In-flight requests are released by the stopping event, so this only bounds a stuck client.
_SHUTDOWN_TIMEOUT_SECONDS = 5.0


class SimulatedServices:
    """Every simulated service on one port; ``plans`` by service name (others: no faults).

    Raises InvalidFaultPlan for a plan that names operations or fault kinds its service does
    not have, ValueError for an unknown service name.
    """

    def __init__(
        self,
        plans: Mapping[str, FaultPlan] | None = None,
        *,
        seed: int = 0,
        host: str = LOOPBACK,
        port: int = 0,
        ledger_path: Path | None = None,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self._plans = {name: FaultPlan.preset("none", name) for name in SERVICES}
        for name, plan in (plans or {}).items():
            declaration(name).check_plan(plan)
            self._plans[name] = plan
        self._seed = seed
        self._host = host
        self._requested_port = port
        self._ledger_path = ledger_path
        # The ledgers' time (when a side effect happened, when a shipment is dispatched): the
        # machine's, or the clock the app under test runs on.
        self._now = now
        self._apis: dict[str, ServiceApi] = {}
        self._journal: LedgerJournal | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None
        self._port: int | None = None

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the simulated services are already running")
        journal = LedgerJournal(self._ledger_path) if self._ledger_path else None
        ledgers = {name: Ledger(service, journal, self._now) for name, service in SERVICES.items()}
        if journal is not None:
            restore_ledgers(journal, ledgers)
        stopping = asyncio.Event()
        apis = {
            name: ServiceApi(
                ledger,
                FaultInjector(self._plans[name], self._seed, ledger.service.fault_kinds),
                stopping,
            )
            for name, ledger in ledgers.items()
        }
        app = web.Application(middlewares=[_traced])
        for api in apis.values():
            app.add_routes(api.routes())
        runner = web.AppRunner(
            app,
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
            if journal is not None:
                journal.close()
            raise
        self._apis, self._journal, self._stopping = apis, journal, stopping
        self._runner = runner
        self._port = _bound_port(runner)

    def release_held(self) -> None:
        """Answer every hung and delayed request now (503, "stopping"), and every later one
        that a hang or latency fault would hold: what a shutdown does first."""
        if self._stopping is not None:
            self._stopping.set()

    async def stop(self) -> None:
        """Release hung and delayed requests, stop serving, close the ledger file. Idempotent."""
        if self._runner is None or self._stopping is None:
            return
        self.release_held()
        await self._runner.cleanup()
        if self._journal is not None:
            self._journal.close()
        self._runner = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the simulated services have not been started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def url(self, service: str) -> str:
        """The base URL of ``service``: its action is ``POST {url}/{collection}``."""
        return f"{self.base_url}{declaration(service).path_prefix}"

    def stats(self, service: str) -> dict[str, Any]:
        """The service's ``GET /stats`` document, read in-process."""
        return self._running_api(service).stats()

    def ledger_entries(self, service: str, order_id: str | None = None) -> list[SideEffect]:
        return self._running_api(service).ledger.entries(order_id)

    def held_requests(self) -> int:
        """Requests a hang or latency fault holds now, over every service: each keeps one
        client waiting on its own timeout (a test on virtual time counts them as waiting)."""
        return sum(api.held for api in self._apis.values())

    def tombstones(self, service: str, order_id: str | None = None) -> list[Tombstone]:
        """The keys ``service`` undid with nothing to undo (``GET {prefix}/ledger``)."""
        return self._running_api(service).ledger.tombstones(order_id)

    def replace_fault_plan(self, service: str, plan: FaultPlan) -> None:
        """Like ``PUT {prefix}/faults``; the next request already uses ``plan``."""
        declaration(service).check_plan(plan)
        self._plans[service] = plan
        if service in self._apis:
            self._apis[service].replace_plan(plan)

    def _running_api(self, service: str) -> ServiceApi:
        declaration(service)
        if not self._apis:
            raise RuntimeError("the simulated services have not been started")
        return self._apis[service]


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the simulated services bound no socket")


class SimulatedServicesThread:
    """`SimulatedServices` on a background thread with its own event loop.

    ``with SimulatedServicesThread(SimulatedServices(preset_plans("declines"))) as services:``
    starts them (raising what start raised, or TimeoutError after ``start_timeout`` seconds)
    and stops them on exit. The inspection methods are safe to call from any thread.
    """

    def __init__(self, services: SimulatedServices, *, start_timeout: float = 10.0) -> None:
        self.services = services
        self._start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="simulated-services", daemon=True)
        self._started = threading.Event()
        self._startup_error: BaseException | None = None

    def __enter__(self) -> Self:
        self._loop = asyncio.new_event_loop()
        self._thread.start()
        if not self._started.wait(self._start_timeout):
            raise TimeoutError(
                f"the simulated services did not start within {self._start_timeout}s"
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
        stopped = asyncio.run_coroutine_threadsafe(self.services.stop(), loop)
        stopped.result(timeout=_SHUTDOWN_TIMEOUT_SECONDS * 2)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(_SHUTDOWN_TIMEOUT_SECONDS * 2)

    @property
    def port(self) -> int:
        return self.services.port

    @property
    def base_url(self) -> str:
        return self.services.base_url

    def url(self, service: str) -> str:
        return self.services.url(service)

    def stats(self, service: str) -> dict[str, Any]:
        return self.services.stats(service)

    def ledger_entries(self, service: str, order_id: str | None = None) -> list[SideEffect]:
        return self.services.ledger_entries(service, order_id)

    def tombstones(self, service: str, order_id: str | None = None) -> list[Tombstone]:
        return self.services.tombstones(service, order_id)

    def replace_fault_plan(self, service: str, plan: FaultPlan) -> None:
        self.services.replace_fault_plan(service, plan)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the simulated services thread was never entered")
        return self._loop

    def _run(self) -> None:
        loop = self._running_loop()
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self.services.start())
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
        prog="python -m tools.simulators.services",
        description="Simulated remote services the order agents call: stock, payment and "
        "shipping under /stock, /payment and /shipping.",
    )
    parser.add_argument("--host", default=LOOPBACK, help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument(
        "--faults", choices=PRESET_NAMES, default="none", help="fault preset of every service"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    parser.add_argument("--ledger", type=Path, help="JSON-lines file keeping the ledgers")
    parser.add_argument(
        "--telemetry-export",
        default=None,
        metavar="FILE|console",
        help="export the services' spans as OTLP JSON lines to FILE, or to standard error",
    )
    return parser.parse_args(argv)


async def _serve(arguments: argparse.Namespace) -> None:
    services = SimulatedServices(
        preset_plans(arguments.faults),
        seed=arguments.seed,
        host=arguments.host,
        port=arguments.port,
        ledger_path=arguments.ledger,
    )
    await services.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"listening on {arguments.host}:{services.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await services.stop()


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parse_arguments(argv)
    if arguments.telemetry_export:
        from devhost import telemetry

        telemetry.configure(arguments.telemetry_export, service_name="simulated-services")
    try:
        asyncio.run(_serve(arguments))
    except (OSError, CorruptJournal) as error:
        print(f"simulated services could not start: {error}", file=sys.stderr)
        return 1
    finally:
        if arguments.telemetry_export:
            telemetry.shutdown()
    return 0


@web.middleware
async def _traced(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request as a SERVER span, child of the context its headers carry."""
    tracer = trace.get_tracer("simulators")
    route = request.match_info.route.resource
    name = f"{request.method} {route.canonical if route is not None else request.path}"
    with tracer.start_as_current_span(
        name,
        context=propagate.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": request.method, "url.path": request.path},
    ) as span:
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        return response
