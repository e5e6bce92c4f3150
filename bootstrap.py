"""Composition root: the one place that builds adapters and wires settings, stores, messaging
and time (`services`, `publisher`, `dead_letter_queues`, `http_session`, `now`).

Everything is created once per worker process, on first use. `check_settings`, run when
function_app is imported, stops start-up on a setting that cannot work (C4); `use_clock`
lets tests and the devhost run timer-driven code on virtual time.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from adapters import blocking_calls, cosmos_connection, servicebus_publisher
from adapters.cosmos_connection import CosmosOptions
from adapters.cosmos_store import open_cosmos_stores
from adapters.identity_connection import ConnectionSettingsError, identity_choice
from adapters.servicebus_dead_letters import ServiceBusDeadLetterQueues
from adapters.servicebus_publisher import ServiceBusPublisher, client_from_environment
from adapters.sqlite_store import open_sqlite_stores
from config import Settings, SettingsError
from domain.policies import CircuitBreaker
from domain.ports import (
    DeadLetterQueues,
    MessagePublisher,
    OperationCost,
    OrderStore,
    StateStore,
    StoreMetrics,
)
from observability import logs
from services.admission import BacklogGate


@dataclass
class AppServices:
    settings: Settings
    states: StateStore
    orders: OrderStore
    metrics: StoreMetrics
    admission: BacklogGate
    """This process's view of the backlog against MAX_BACKLOG_ORDERS (C5)."""
    running: BacklogGate
    """This process's view of the running orders against MAX_RUNNING_ORDERS, which a
    submission checks before it starts the order it accepted (C5)."""
    breakers: dict[str, CircuitBreaker] = field(default_factory=dict)
    """One circuit breaker per remote service, shared by the agents of this process (E9)."""

    def breaker(self, service: str) -> CircuitBreaker:
        with _lock:
            guard = self.breakers.get(service)
            if guard is None:
                guard = self.breakers[service] = CircuitBreaker(
                    failure_threshold=self.settings.breaker_failure_threshold,
                    reset_seconds=self.settings.breaker_reset_seconds,
                    clock=time.monotonic,
                )
            return guard


_lock = threading.Lock()
_services: AppServices | None = None
_publishers: dict[asyncio.AbstractEventLoop, ServiceBusPublisher] = {}
_dead_letter_queues: dict[asyncio.AbstractEventLoop, ServiceBusDeadLetterQueues] = {}
_http_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)  # noqa: E731


AZURE_HOSTING_SETTINGS = (
    "WEBSITE_SKU",
    "WEBSITE_INSTANCE_ID",
    "CONTAINER_NAME",
    "WEBSITE_SITE_NAME",
)
"""What the Functions host itself reads to tell its Azure plans apart, all set by the
platform: WEBSITE_SKU is FlexConsumption on Flex Consumption, WEBSITE_INSTANCE_ID is set on
App Service plans (Dedicated, Premium, Windows Consumption), CONTAINER_NAME on Linux
Consumption, where the site's WEBSITE_SITE_NAME goes with it (CONTAINER_NAME alone is too
common a name: other container platforms set it too). The devhost sets none of them, and
Core Tools (FUNCTIONS_CORETOOLS_ENVIRONMENT) counts as local whatever else is set."""


def azure_hosting(environ: Mapping[str, str]) -> str | None:
    """The platform settings that show the app runs on Azure Functions, or None locally."""

    def value(name: str) -> str:
        return environ.get(name, "").strip()

    if value("FUNCTIONS_CORETOOLS_ENVIRONMENT"):
        return None
    if value("WEBSITE_SKU").lower() == "flexconsumption":
        return f"WEBSITE_SKU={value('WEBSITE_SKU')}"
    if value("WEBSITE_INSTANCE_ID"):
        return f"WEBSITE_INSTANCE_ID={value('WEBSITE_INSTANCE_ID')}"
    if value("CONTAINER_NAME") and value("WEBSITE_SITE_NAME"):
        site = value("WEBSITE_SITE_NAME")
        return f"CONTAINER_NAME={value('CONTAINER_NAME')}, WEBSITE_SITE_NAME={site}"
    return None


def check_hosting(settings: Settings, environ: Mapping[str, str]) -> None:
    """Refuse a state store that cannot work where the app runs: SQLite on Azure."""
    hosting = azure_hosting(environ)
    if hosting is None or settings.state_store != "sqlite":
        return
    cosmos = cosmos_connection.CONNECTION_SETTING
    raise SettingsError(
        f"STATE_STORE=sqlite cannot run on Azure Functions ({hosting}): the deployed package "
        "is read-only and every instance would keep a database of its own. Set STATE_STORE=cosmos "
        f"and {cosmos_connection.ENDPOINT_SETTING} (with {cosmos}__credential=managedidentity "
        f"and {cosmos}__clientId for a user-assigned identity) or {cosmos} (a connection "
        "string), and COSMOS_DATABASE, COSMOS_STATE_CONTAINER, COSMOS_ORDERS_CONTAINER and "
        "COSMOS_DEADLINE_INDEX_CONTAINER if they differ from their defaults"
    )


def check_settings(environ: Mapping[str, str] = os.environ) -> Settings:
    """Read the app settings at start-up, so a bad one stops the app from loading instead of
    failing its first invocation: the retry budget's arithmetic is checked and logged (C4),
    the state store must suit where the app runs, and the identity of each identity-based
    connection is chosen and logged. The pool for blocking calls gets its size here, before
    any function runs."""
    settings = Settings.from_environ(environ)
    check_hosting(settings, environ)
    blocking_calls.use_threads(settings.blocking_call_threads)
    log = logs.get_logger("app.settings")
    for connection in _identity_connections(settings, environ):
        try:
            identity = identity_choice(environ, connection).describe()
        except ConnectionSettingsError as error:
            raise SettingsError(str(error)) from None
        log.info("connection identity", connection=connection, identity=identity)
    # RETRY_BUDGET is what a new order may spend in its whole life; each request draws its
    # tries from it, and the agent splits them over the request's deliveries (C4).
    budget = settings.budget
    log.info(
        "retry budget",
        retry_budget=budget.total,
        order_steps=len(settings.order_steps),
        max_failures=settings.max_failures,
        tries_per_request=settings.tries_per_request,
        undo_reserve=budget.undo_reserve,
        agent_delivery_attempts=settings.agent_delivery_attempts,
    )
    return settings


def _identity_connections(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The connections that authenticate with an identity rather than a connection string."""
    connections = []
    bus = servicebus_publisher.CONNECTION_SETTING
    if not environ.get(bus) and environ.get(f"{bus}__fullyQualifiedNamespace"):
        connections.append(bus)
    cosmos = cosmos_connection.CONNECTION_SETTING
    if (
        settings.state_store == "cosmos"
        and not environ.get(cosmos, "").strip()
        and environ.get(cosmos_connection.ENDPOINT_SETTING, "").strip()
    ):
        connections.append(cosmos)
    return connections


def services() -> AppServices:
    global _services
    with _lock:
        if _services is None:
            _services = _build(Settings.from_environ(os.environ))
        return _services


def _build(settings: Settings) -> AppServices:
    metrics = StoreMetrics()
    states, orders = open_stores(settings, metrics)
    return AppServices(
        settings,
        states,
        orders,
        metrics,
        backlog_gate(settings, states),
        running_gate(settings, states),
    )


def backlog_gate(settings: Settings, states: StateStore) -> BacklogGate:
    """The admission check of submissions over `states`, with the C5 settings."""
    return BacklogGate(
        lambda at_most: states.count_backlog(at_most=at_most),
        bound=settings.max_backlog_orders,
        recount_seconds=settings.backlog_recount_seconds,
    )


def running_gate(settings: Settings, states: StateStore) -> BacklogGate:
    """The running cap a submission checks before it starts its order (C5): counted like
    the backlog, at most once per BACKLOG_RECOUNT_SECONDS, so a submission costs no query;
    the starter counts for itself and sets the gauges."""
    return BacklogGate(
        lambda at_most: states.count_running(at_most=at_most),
        bound=settings.max_running_orders,
        recount_seconds=settings.backlog_recount_seconds,
        observe=lambda running: None,
    )


def open_stores(
    settings: Settings, metrics: StoreMetrics, environ: Mapping[str, str] = os.environ
) -> tuple[StateStore, OrderStore]:
    """The state store and orders database that STATE_STORE names, counting into metrics.

    `environ` holds the Cosmos connection settings, which the adapter reads itself.
    """
    check_hosting(settings, environ)
    if settings.state_store == "sqlite":
        return open_sqlite_stores(settings.sqlite_directory, metrics)
    return open_cosmos_stores(cosmos_options(settings), environ, metrics)


def cosmos_options(settings: Settings) -> CosmosOptions:
    """The Cosmos DB adapter's options, from the COSMOS_* settings."""
    return CosmosOptions(
        database=settings.cosmos_database,
        state_container=settings.cosmos_state_container,
        orders_container=settings.cosmos_orders_container,
        deadline_index_container=settings.cosmos_deadline_index_container,
        retry_total=settings.cosmos_retry_total,
        retry_backoff_max_seconds=settings.cosmos_retry_backoff_max_seconds,
        connection_timeout_seconds=settings.cosmos_connection_timeout_seconds,
        read_timeout_seconds=settings.cosmos_read_timeout_seconds,
        operation_timeout_seconds=settings.cosmos_operation_timeout_seconds,
    )


def publisher() -> MessagePublisher:
    """The publisher of the running event loop (async SDK clients belong to one loop)."""
    loop = asyncio.get_running_loop()
    with _lock:
        if loop not in _publishers:
            _publishers[loop] = ServiceBusPublisher(client_from_environment())
        return _publishers[loop]


def dead_letter_queues() -> DeadLetterQueues:
    """The dead-letter queues of the running event loop's Service Bus client (S3, E8)."""
    loop = asyncio.get_running_loop()
    with _lock:
        if loop not in _dead_letter_queues:
            _dead_letter_queues[loop] = ServiceBusDeadLetterQueues(client_from_environment())
        return _dead_letter_queues[loop]


def http_session() -> aiohttp.ClientSession:
    """The HTTP client session of the running event loop (agents call remote services)."""
    loop = asyncio.get_running_loop()
    with _lock:
        session = _http_sessions.get(loop)
        if session is None or session.closed:
            session = _http_sessions[loop] = aiohttp.ClientSession()
        return session


@dataclass(frozen=True)
class Usage:
    """What this process's function code spent: store operations, messages sent per queue."""

    store: OperationCost
    messages_sent: dict[str, int]

    def __add__(self, other: Usage) -> Usage:
        sent = collections.Counter(self.messages_sent)
        sent.update(other.messages_sent)
        return Usage(self.store + other.store, dict(sent))


def usage() -> Usage:
    """This process's counters; a host with several worker processes adds theirs up."""
    with _lock:
        built = _services
        publishers = list(_publishers.values())
    sent: collections.Counter[str] = collections.Counter()
    for each in publishers:
        sent.update(each.sent)
    return Usage(built.metrics.total() if built else OperationCost(), dict(sent))


def now() -> dt.datetime:
    return _clock()


def use_clock(clock: Callable[[], dt.datetime]) -> Callable[[], dt.datetime]:
    """Make `clock` the app's time in this process; returns the clock it replaces."""
    global _clock
    previous, _clock = _clock, clock
    return previous


async def shutdown() -> None:
    """Close what this process opened; the next use builds everything anew."""
    global _services
    loop = asyncio.get_running_loop()
    with _lock:
        publisher_of_loop = _publishers.pop(loop, None)
        dead_letters_of_loop = _dead_letter_queues.pop(loop, None)
        session = _http_sessions.pop(loop, None)
        built, _services = _services, None
    if session is not None:
        await session.close()
    if publisher_of_loop is not None:
        await publisher_of_loop.close()
    if dead_letters_of_loop is not None:
        await dead_letters_of_loop.close()
    if built is not None:
        built.states.close()
        built.orders.close()
