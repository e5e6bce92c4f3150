"""The whole pipeline on one machine: embedded broker, fulfilment service, devhost + app.

The broker gets the app's entities from ``servicebus.config.json``; the devhost runs
``function_app:app`` from the repository root with settings that point it at the broker, the
simulated fulfilment service and a SQLite directory of the run's own. Tests and the demo use
this one harness, so what the demo shows is what the tests check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import bootstrap
from devhost.clock import Clock, RealClock
from devhost.host import DevHost, HostOptions
from devhost.servicebus.config import load_config
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from simulators.fulfilment import FaultPlan, FulfilmentService

REPOSITORY = Path(__file__).resolve().parent.parent
BROKER_CONFIG = REPOSITORY / "servicebus.config.json"
SAMPLE_SETTINGS = REPOSITORY / "local.settings.sample.json"
DEMO_REPLY_QUEUE = "demo-replies"

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
}


def sample_settings() -> dict[str, str]:
    """The Values of local.settings.sample.json: every setting with its local default."""
    document = json.loads(SAMPLE_SETTINGS.read_text(encoding="utf-8"))
    return {name: str(value) for name, value in document["Values"].items()}


@dataclass
class Pipeline:
    broker: ServiceBusBroker
    fulfilment: FulfilmentService
    host: DevHost

    @property
    def connection_string(self) -> str:
        return self.broker.connection_string


@contextlib.asynccontextmanager
async def local_pipeline(
    work_dir: Path,
    *,
    faults: FaultPlan | None = None,
    seed: int = 0,
    settings: Mapping[str, str] | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Pipeline]:
    """Start broker, fulfilment service and devhost; stop them all on exit."""
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    broker = ServiceBusBroker(load_config(BROKER_CONFIG))
    broker.start()
    fulfilment = FulfilmentService(faults or FaultPlan.preset("none"), seed=seed)
    host: DevHost | None = None
    try:
        await fulfilment.start()
        values = {
            **sample_settings(),
            **LOCAL_SETTINGS,
            "ServiceBusConnection": broker.connection_string,
            "FULFILMENT_SERVICE_URL": fulfilment.base_url,
            "SQLITE_DIRECTORY": str(work_dir / "stores"),
            **(settings or {}),
        }
        options = HostOptions(
            app="function_app:app",
            app_root=REPOSITORY,
            data_dir=work_dir / "devhost",
            http_port=0,
            clock=clock or RealClock(),
        )
        host = DevHost(options, AppSettings(values))
        await host.start()
        yield Pipeline(broker, fulfilment, host)
    finally:
        if host is not None:
            await host.stop()
        await bootstrap.shutdown()
        await fulfilment.stop()
        broker.stop()
