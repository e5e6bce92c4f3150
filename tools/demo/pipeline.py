"""The whole pipeline on one machine: embedded broker, simulated services, devhost + app.

The broker gets the app's entities from ``servicebus.config.json``; the devhost runs
``function_app:app`` from the repository root with settings that point it at the broker, the
simulated stock, payment and shipping services and a SQLite directory of the run's own. Tests
and the demo use this one harness, so what the demo shows is what the tests check.

The settings a run takes from the process environment (``pipeline_settings_from``) win over
the local defaults: the store's (STATE_STORE, CosmosConnection,
CosmosConnection__accountEndpoint and COSMOS_*), so one environment points a run at the
official Cosmos DB emulator, an account or a running Cosmos API server, and the workflow's
(ORDER_STEPS, the steps a new order runs, and AGENT_TRANSPORT, how its agents are reached).
The ``settings`` argument wins over both. On Cosmos with an account key, a run gets a fresh
database unless COSMOS_DATABASE is set, so it never sees an earlier run's orders, and drops
it when it stops (with an identity the app cannot create databases: it uses COSMOS_DATABASE).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from azure.core.exceptions import AzureError
from azure.cosmos.exceptions import CosmosResourceNotFoundError
from devhost.clock import Clock, RealClock
from devhost.cosmos_server import CosmosServer
from devhost.host import DevHost, HostOptions
from devhost.servicebus.config import load_config
from devhost.servicebus.process import BrokerProcess
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings

import bootstrap
from adapters.cosmos_connection import CONNECTION_SETTING, connect
from config import Settings, SettingsError
from domain.ports import StoreError
from tools.console_keys import local_keys
from tools.simulators.services import FaultPlan, SimulatedServices

REPOSITORY = Path(__file__).resolve().parents[2]
BROKER_CONFIG = REPOSITORY / "servicebus.config.json"
SAMPLE_SETTINGS = REPOSITORY / "local.settings.sample.json"
DEMO_REPLY_QUEUE = "demo-replies"
DROP_DATABASE_TIMEOUT_SECONDS = 30
# A run's work directory: the SQLite stores, the devhost's data (histories, function keys).
STORES_DIR = "stores"
HOST_DATA_DIR = "devhost"

logger = logging.getLogger(__name__)

# Fast cadences so a local run settles in seconds; Azure uses the sample settings' values.
LOCAL_SETTINGS: dict[str, str] = {
    "REPLY_QUEUES": DEMO_REPLY_QUEUE,
    "STARTER_SCHEDULE": "* * * * * *",
    "SUPERVISOR_SCHEDULE": "* * * * * *",
    "STEP_TIMEOUT_SECONDS": "10",
    "CLAIM_TIMEOUT_SECONDS": "10",
    "RETRY_DELAY_SECONDS": "0",
    "LONG_WAIT_AFTER_FAILURES": "2",
    "LONG_RETRY_DELAY_SECONDS": "2",
    "MAX_FAILURES": "3",
    "RETRY_BUDGET": "24",
    "AGENT_DELIVERY_ATTEMPTS": "2",
    "AGENT_BACKOFF_BASE_SECONDS": "0.05",
    "AGENT_BACKOFF_MAX_SECONDS": "1",
    "BREAKER_FAILURE_THRESHOLD": "20",
    "BREAKER_RESET_SECONDS": "2",
    "OUTBOX_GRACE_SECONDS": "10",
}


def sample_settings() -> dict[str, str]:
    """The Values of local.settings.sample.json: every setting with its local default."""
    document = json.loads(SAMPLE_SETTINGS.read_text(encoding="utf-8"))
    return {name: str(value) for name, value in document["Values"].items()}


# The settings a local run takes from the environment by name, besides the Cosmos DB ones.
ENVIRONMENT_SETTINGS = frozenset({"STATE_STORE", "ORDER_STEPS", "AGENT_TRANSPORT"})


@contextlib.contextmanager
def local_store_settings(backend: str | None) -> Iterator[dict[str, str]]:
    """The settings that point a local run's app at ``backend`` (one of
    `config.STATE_STORES`): STATE_STORE and, for ``cosmos``, the CosmosConnection of a local
    Cosmos DB API server started for the block and stopped after it. With None, none: the
    environment's STATE_STORE and Cosmos settings decide. RuntimeError when the server
    cannot start."""
    if backend != "cosmos":
        yield {} if backend is None else {"STATE_STORE": backend}
        return
    with CosmosServer() as server:
        yield {"STATE_STORE": "cosmos", CONNECTION_SETTING: server.connection_string}


def pipeline_settings_from(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings of `environ` a local run takes: state store, Cosmos DB, steps, transport."""
    return {
        name: value
        for name, value in environ.items()
        if name in ENVIRONMENT_SETTINGS or name.startswith(("COSMOS_", CONNECTION_SETTING))
    }


def _scratch_database(values: Mapping[str, str]) -> str | None:
    """A fresh database name for a Cosmos run with an account key, else None."""
    if values.get("STATE_STORE") != "cosmos" or not values.get(CONNECTION_SETTING, "").strip():
        return None
    return f"pipeline-{uuid.uuid4().hex[:12]}"


def _drop_database(values: Mapping[str, str], name: str) -> None:
    try:
        client, _ = connect(values, bootstrap.cosmos_options(Settings.from_environ(values)))
        with client:
            client.delete_database(name, timeout=DROP_DATABASE_TIMEOUT_SECONDS)
    except CosmosResourceNotFoundError:
        pass  # the run stopped before the app first opened its stores
    except (AzureError, SettingsError, StoreError) as error:
        # The run's result stands, but a leftover database costs money: say which one it is.
        logger.error(
            "could not drop the run's Cosmos DB database %r, drop it by hand: %s", name, error
        )


@dataclass
class Pipeline:
    broker: ServiceBusBroker | BrokerProcess
    services: SimulatedServices
    """Every simulated remote service: stock, payment, shipping."""
    host: DevHost

    @property
    def connection_string(self) -> str:
        return self.broker.connection_string

    async def active_counts(self) -> dict[str, int]:
        """Messages available to receive now in each of the broker's queues (consumer lag)."""
        return await asyncio.to_thread(self.broker.active_counts)

    async def app_usage(self) -> bootstrap.Usage:
        """The app's counters in this process plus those of every language worker process."""
        total = bootstrap.usage()
        workers = self.host.language_workers
        if workers is not None:
            for usage in await workers.call_everywhere("bootstrap:usage"):
                total = total + usage
        return total


@contextlib.asynccontextmanager
async def local_pipeline(
    work_dir: Path,
    *,
    service_faults: Mapping[str, FaultPlan] | None = None,
    seed: int = 0,
    settings: Mapping[str, str] | None = None,
    clock: Clock | None = None,
    worker_processes: int = 0,
    broker_process: bool = False,
    broker_data: Path | None = None,
) -> AsyncIterator[Pipeline]:
    """Start broker, the simulated remote services and devhost; stop them all on exit.

    ``service_faults`` are the fault plans of the simulated services by name (``stock``,
    ``payment``, ``shipping``; the others have none).

    ``worker_processes`` > 0 runs the app's functions in language worker processes, as on
    Azure where Python workers run the code and the host keeps triggers and histories (the
    app's counters are then in the workers: ``app_usage``). ``broker_process``
    runs the broker as a child process (Service Bus is a service apart) instead of a thread.
    ``broker_data`` is the broker's SQLite journal: its messages (dead letters among them)
    outlive the run there; without it they live in memory. ``clock`` (a VirtualClock in
    tests) is the time of the host, of the app (``bootstrap.now``) and of the services'
    ledgers, so it needs the app in this process.
    """
    if clock is not None and worker_processes:
        raise ValueError("a clock of the pipeline's own needs the app in this process")
    clock = clock or RealClock()
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    chosen = {**pipeline_settings_from(os.environ), **(settings or {})}
    scratch_database = None if "COSMOS_DATABASE" in chosen else _scratch_database(chosen)
    broker: ServiceBusBroker | BrokerProcess = (
        BrokerProcess(BROKER_CONFIG, data=broker_data)
        if broker_process
        else ServiceBusBroker(load_config(BROKER_CONFIG), data_path=broker_data)
    )
    await asyncio.to_thread(broker.start)
    services = SimulatedServices(service_faults, seed=seed, now=clock.now)
    host: DevHost | None = None
    # One time for the host, the app and the services: deadlines the app writes, the durable
    # timers that race them and the ledgers' timestamps all follow `clock`.
    app_clock = bootstrap.use_clock(clock.now)
    try:
        await services.start()
        values = {
            **sample_settings(),
            **LOCAL_SETTINGS,
            "ServiceBusConnection": broker.connection_string,
            "STOCK_SERVICE_URL": services.url("stock"),
            "PAYMENT_SERVICE_URL": services.url("payment"),
            "SHIPPING_SERVICE_URL": services.url("shipping"),
            "SQLITE_DIRECTORY": str(work_dir / STORES_DIR),
            # The operator console's read and act keys of this run, next to its function keys.
            "CONSOLE_KEYS": local_keys(work_dir / HOST_DATA_DIR).setting,
            **chosen,
        }
        if scratch_database is not None:
            values["COSMOS_DATABASE"] = scratch_database
        options = HostOptions(
            app="function_app:app",
            app_root=REPOSITORY,
            data_dir=work_dir / HOST_DATA_DIR,
            http_port=0,
            clock=clock,
            worker_processes=worker_processes,
        )
        host = DevHost(options, AppSettings(values))
        await host.start()
        yield Pipeline(broker, services, host)
    finally:
        # Calls a fault holds would keep their functions running, and the host's stop waiting
        # for them, until the agents' own timeouts: they are answered first.
        services.release_held()
        if host is not None:
            await host.stop()
        await bootstrap.shutdown()
        bootstrap.use_clock(app_clock)
        await services.stop()
        await asyncio.to_thread(broker.stop)
        if scratch_database is not None:
            await asyncio.to_thread(_drop_database, chosen, scratch_database)
