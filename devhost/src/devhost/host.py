"""The devhost: runs a Functions app's real code offline, like the Functions host would.

Start-up follows the host: read local.settings.json and export its Values, read host.json,
import and index the app (errors name the function and cause), then start the Durable engine
(histories in ``<data>/durable.sqlite``), the durableClient management API, and one listener
per trigger: Service Bus (through the real azure-servicebus SDK), timer and HTTP.

Time comes from one Clock. Under a VirtualClock, ``skip_time`` jumps to the earliest wake-up
(a durable timer or a timer trigger) once no work is runnable, so tests of timeouts and
schedules take milliseconds; under the RealClock (the default for ``devhost start``) nothing
is skipped.

Every invocation is traced as the host traces it (``telemetry.py``, C9). With the
``DEVHOST_TELEMETRY_EXPORT`` setting (a file, or ``console``) the devhost and its language
workers export traces and metrics as OTLP JSON lines, and ``PYTHON_ENABLE_OPENTELEMETRY``
defaults to true so the workers hand the app its invocation's trace context.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devhost import telemetry
from devhost.clock import Clock, RealClock, VirtualClock
from devhost.durable import DurableEngine
from devhost.durable.management_http import ManagementApi
from devhost.durable.scheduler_api import SchedulerApi
from devhost.function_keys import KEYS_FILE, FunctionKeys
from devhost.host_config import HostConfig
from devhost.indexing import IndexedFunction, index_app, load_app
from devhost.invocation import (
    FunctionInvoker,
    WorkerFunctionInvoker,
)
from devhost.language_workers import LanguageWorkers
from devhost.schedule_monitor import ScheduleMonitor
from devhost.sdk_compat import close_durable_http_session
from devhost.settings import AppSettings
from devhost.triggers.http import HttpTriggerServer
from devhost.triggers.servicebus import ServiceBusTrigger
from devhost.triggers.settlement import SettlementService
from devhost.triggers.timer import TimerTrigger

log = logging.getLogger("devhost")

DURABLE_TRIGGERS = frozenset({"orchestrationTrigger", "activityTrigger"})
STOP_GRACE_SECONDS = 35.0
LISTENING_BOUND_SECONDS = 30.0


@dataclass(frozen=True)
class HostOptions:
    app: str = "function_app"
    app_root: Path = Path(".")
    data_dir: Path = Path(".devhost")
    http_port: int = 7071
    clock: Clock = field(default_factory=RealClock)
    # Function code (replays, activities, Service Bus and timer functions) in this many
    # language worker processes, as FUNCTIONS_WORKER_PROCESS_COUNT; 0: in the devhost's own.
    worker_processes: int = 0


class DevHost:
    def __init__(self, options: HostOptions, settings: AppSettings | None = None) -> None:
        self.options = options
        self.settings = settings or AppSettings.load(options.app_root)
        self.clock = options.clock
        self.functions: list[IndexedFunction] = []
        self.engine: DurableEngine | None = None
        self.management: ManagementApi | None = None
        self.scheduler: SchedulerApi | None = None
        """The Durable Task Scheduler's read API (full histories) on the engine's instances."""
        self.http: HttpTriggerServer | None = None
        self.keys: FunctionKeys | None = None
        """The function and master keys HTTP triggers check, also in <data>/keys.json."""
        self._invoker: FunctionInvoker | None = None
        self._http_invoker: FunctionInvoker | None = None
        self._workers: LanguageWorkers | None = None
        self._monitor: ScheduleMonitor | None = None
        self._service_bus: list[ServiceBusTrigger] = []
        self._timers: list[TimerTrigger] = []
        self._timer_tasks: list[asyncio.Task[None]] = []
        self._listener_tasks: list[asyncio.Task[None]] = []
        self._restore_environment: Callable[[], None] = lambda: None
        self._exports_telemetry = False

    async def start(self) -> None:
        destination = telemetry.export_destination(self.settings.values)
        if destination is not None:
            self.settings = AppSettings(
                {telemetry.ENABLE_OPENTELEMETRY_SETTING: "true", **self.settings.values}
            )
        self._restore_environment = self.settings.export()
        if destination is not None:
            telemetry.configure(destination, service_name="devhost")
            self._exports_telemetry = True
        config = HostConfig.load(self.options.app_root, self.settings.values)
        self.functions = index_app(load_app(self.options.app, self.options.app_root), self.settings)
        self.options.data_dir.mkdir(parents=True, exist_ok=True)
        workers = self._workers = self._new_language_workers()
        if workers is not None:
            await workers.start()
        self.engine = DurableEngine(
            [f.function for f in self.functions if f.trigger_type in DURABLE_TRIGGERS],
            str(self.options.data_dir / "durable.sqlite"),
            clock=self.clock,
            max_concurrent_activities=config.durable_task.max_concurrent_activities,
            orchestrators=workers,
            activities=workers,
            versioning=config.durable_task.versioning,
        )
        self.management = ManagementApi(self.engine, task_hub=config.durable_task.hub_name)
        await self.management.start()
        self.scheduler = SchedulerApi(self.engine, config.durable_task.hub_name)
        await self.scheduler.start()
        management = self.management
        app_root = str(self.options.app_root.resolve())
        bindings = {"durableClient": management.client_binding_json}
        # HTTP requests cannot travel to a worker process: HTTP functions run here.
        self._http_invoker = FunctionInvoker(app_root, input_bindings=bindings)
        self._invoker = (
            self._http_invoker
            if workers is None
            else WorkerFunctionInvoker(app_root, workers, input_bindings=bindings)
        )
        self._monitor = ScheduleMonitor(self.options.data_dir / "schedules.sqlite")
        await self.engine.start()
        self.keys = FunctionKeys.load(self.options.data_dir, self.settings.values)
        self.http = HttpTriggerServer(
            self._of_type("httpTrigger"),
            self._http_invoker,
            keys=self.keys,
            route_prefix=config.route_prefix,
            extra_routes=management.webhook_routes(self.keys),
        )
        await self.http.start(port=self.options.http_port)
        management.serve_webhooks_at(
            f"http://127.0.0.1:{self.http.port}", self.keys.durable_extension
        )
        for function in self._of_type("timerTrigger"):
            timer = TimerTrigger(function, self._invoker, self.clock, self._monitor)
            self._timers.append(timer)
            self._timer_tasks.append(self._spawn(timer.run(), function.name))
        for function in self._of_type("serviceBusTrigger"):
            listener = ServiceBusTrigger(function, self._invoker, self.settings, config.service_bus)
            self._service_bus.append(listener)
            self._listener_tasks.append(self._spawn(listener.run(), function.name))
        await self._until_listening()
        log.info(
            "devhost started app=%s functions=%d http_port=%d function_keys=%s",
            self.options.app,
            len(self.functions),
            self.http.port,
            self.options.data_dir / KEYS_FILE,
        )

    @property
    def language_workers(self) -> LanguageWorkers | None:
        """The worker processes running the function code, if any (``worker_processes``)."""
        return self._workers

    def _new_language_workers(self) -> LanguageWorkers | None:
        if not self.options.worker_processes:
            return None
        # Workers settle messages over the host's gRPC service, so its address must exist
        # before the first worker starts; it goes on their command line.
        settlement = SettlementService.shared()
        return LanguageWorkers(
            self.options.app,
            self.options.app_root,
            self.options.worker_processes,
            settlement.worker_arguments,
        )

    def _of_type(self, trigger_type: str) -> Sequence[IndexedFunction]:
        """The functions with that trigger whose trigger runs: not disabled by the
        ``AzureWebJobs.<name>.Disabled`` setting (orchestrations and activities, which a
        durable client or an orchestration calls, are never disabled this way)."""
        return [
            f
            for f in self.functions
            if f.trigger_type == trigger_type and not self.settings.function_disabled(f.name)
        ]

    @staticmethod
    def _spawn(work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        async def supervised() -> None:
            # A listener that cannot start (e.g. its queue does not exist) is reported, not
            # hidden; Service Bus listeners restart by themselves after any other failure.
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("trigger listener stopped function=%s", name)
                raise

        return asyncio.create_task(supervised(), name=f"trigger:{name}")

    async def invoke(self, function_name: str, trigger_value: Any) -> Any:
        """Run a function now with ``trigger_value`` for its trigger parameter.

        What the Functions host's admin endpoint (``POST /admin/functions/{name}``) does for
        non-HTTP functions: a timer function runs outside its schedule, with its other input
        bindings (such as durableClient) filled in as usual.
        """
        if self._invoker is None:
            raise RuntimeError("the devhost is not started")
        function = next((f for f in self.functions if f.name == function_name), None)
        if function is None:
            raise LookupError(f"the app has no function named {function_name!r}")
        return await self._invoker.invoke(function, {str(function.trigger["name"]): trigger_value})

    async def _until_listening(self) -> None:
        """Wait until every Service Bus listener has its receiver open, as the Functions host
        reports started once its listeners started: a burst sent right after start would
        otherwise wait for the links to attach. A listener that cannot start (its task ends,
        with the error in ``listener_failures``) or is still retrying when the bound passes
        (the namespace is out of reach) is not waited for."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LISTENING_BOUND_SECONDS
        for listener, task in zip(self._service_bus, self._listener_tasks, strict=True):
            listening = asyncio.ensure_future(listener.listening.wait())
            await asyncio.wait(
                {listening, task},
                timeout=max(0.0, deadline - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            listening.cancel()

    @property
    def listening(self) -> bool:
        """Whether every Service Bus listener has its receiver open."""
        return all(listener.listening.is_set() for listener in self._service_bus)

    @property
    def listener_restarts(self) -> dict[str, int]:
        """How many times each Service Bus listener (by function name) replaced a receiver
        that failed: a lost connection, a link the broker closed, a receiver the SDK shut
        down. Each restart is also logged; a healthy run on a steady broker has none."""
        return {listener.name: listener.restarts for listener in self._service_bus}

    @property
    def listener_failures(self) -> list[BaseException]:
        """Exceptions of trigger listeners that stopped for good (a healthy host has none).

        A Service Bus listener stops only when it cannot start for a reason retrying cannot
        fix: its queue does not exist, its credentials are refused, its settings are wrong. A
        listener that loses its connection, at start-up or later, keeps restarting instead
        (``listener_restarts``), as the Functions host keeps its listeners running."""
        failures: list[BaseException] = []
        for task in [*self._timer_tasks, *self._listener_tasks]:
            if task.done() and not task.cancelled():
                error = task.exception()
                if error is not None:
                    failures.append(error)
        return failures

    def is_idle(self) -> bool:
        """No orchestration work runnable and no trigger invocation in flight."""
        return not self.has_runnable_orchestration_work() and self.invocations_in_flight() == 0

    def has_runnable_orchestration_work(self) -> bool:
        """An episode or an activity is ready to run or running."""
        return self.engine is not None and self.engine.has_runnable_work()

    def invocations_in_flight(self) -> int:
        """Service Bus messages received and not yet finished, plus timer functions running.

        A test on virtual time that knows why some of them wait (a call its fake service
        holds) can tell the host is otherwise idle and move time itself."""
        return sum(listener.in_flight for listener in self._service_bus) + sum(
            1 for timer in self._timers if timer.firing
        )

    def listened_queues(self) -> list[str]:
        """The queues the Service Bus triggers receive from: a message in one is an
        invocation about to start."""
        return [listener.queue for listener in self._service_bus]

    def next_wakeup(self) -> dt.datetime | None:
        moments = [
            self.clock.next_wakeup() if isinstance(self.clock, VirtualClock) else None,
            self.engine.next_timer_at() if self.engine is not None else None,
        ]
        return min((m for m in moments if m is not None), default=None)

    async def skip_time(self) -> dt.datetime | None:
        """Virtual time only: when idle, jump to the next wake-up; returns the new time.

        Woken waiters get one turn of the event loop before this returns, so a timer
        invocation that just started already counts as work for ``is_idle``.
        """
        if not isinstance(self.clock, VirtualClock):
            raise TypeError("time can only be skipped with a VirtualClock")
        if not self.is_idle():
            return None
        moment = self.next_wakeup()
        if moment is None:
            return None
        self.clock.advance_to(moment)
        await asyncio.sleep(0)
        return self.clock.now()

    async def stop(self) -> None:
        for listener in self._service_bus:
            await listener.stop()
        # Service Bus listeners end by themselves once their invocations settle; timers and
        # anything still running after the grace period are cancelled.
        if self._listener_tasks:
            await asyncio.wait(self._listener_tasks, timeout=STOP_GRACE_SECONDS)
        tasks = [*self._timer_tasks, *self._listener_tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._timer_tasks.clear()
        self._listener_tasks.clear()
        if self.http is not None:
            await self.http.stop()
        if self.engine is not None:
            await self.engine.close()
        if self.management is not None:
            await self.management.stop()
        if self.scheduler is not None:
            await self.scheduler.stop()
        # The Durable SDK keeps one aiohttp session per process; it belongs to this loop.
        await close_durable_http_session()
        self._restore_environment()
        if self._exports_telemetry:
            telemetry.shutdown()
            self._exports_telemetry = False
        if self._invoker is not None:
            self._invoker.close()
        if self._http_invoker is not None and self._http_invoker is not self._invoker:
            self._http_invoker.close()
        if self._monitor is not None:
            self._monitor.close()
        log.info("devhost stopped")
