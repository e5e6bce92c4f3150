"""What the devhost counts as work in flight, and why virtual time waits for it.

``skip_time`` jumps the clock only when the host is idle. A Service Bus message being
handled and a timer function running are work: time must not jump under them, or a test
on virtual time would see deadlines pass while a function is still mid-flight.
"""

import datetime as dt
import importlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from devhost.clock import VirtualClock
from devhost.host import DevHost, HostOptions
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from devhost.testing import eventually, queue, running_broker

APPS = Path(__file__).parent / "apps"
START = dt.datetime(2030, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
NEXT_TICK = dt.datetime(2030, 1, 1, 1, 0, 0, tzinfo=dt.UTC)  # the hourly timer's first occurrence
SEND_TIMEOUT = 10


@pytest.fixture(scope="module")
def broker() -> Iterator[ServiceBusBroker]:
    with running_broker([queue("held", LockDuration="PT30S")]) as running:
        yield running


@pytest.fixture
async def host(tmp_path: Path, broker: ServiceBusBroker) -> AsyncIterator[DevHost]:
    options = HostOptions(
        app="held_work_app:app",
        app_root=APPS,
        data_dir=tmp_path,
        http_port=0,
        clock=VirtualClock(START),
    )
    settings = AppSettings({"SB": broker.connection_string, "HELD_QUEUE": "held"})
    running = DevHost(options, settings)
    await running.start()
    yield running
    await running.stop()
    assert running.listener_failures == []


@pytest.fixture
def held(host: DevHost) -> Iterator[ModuleType]:
    """The app module the host imported from its app root: the test reads and releases it."""
    app_module = importlib.import_module("held_work_app")
    app_module.release.clear()
    app_module.started.clear()
    yield app_module
    # Torn down before the host stops: whatever a failed assertion left holding ends first.
    app_module.release.set()


async def test_time_does_not_jump_while_a_queue_or_timer_function_is_running(
    host: DevHost, held: ModuleType, broker: ServiceBusBroker
) -> None:
    client = ServiceBusClient.from_connection_string(broker.connection_string)
    async with client, client.get_queue_sender("held") as sender:
        await sender.send_messages(
            [ServiceBusMessage("m-1"), ServiceBusMessage("m-2")], timeout=SEND_TIMEOUT
        )
    await eventually(lambda: sorted(held.started) == ["m-1", "m-2"], "both messages run")
    assert host.invocations_in_flight() == 2
    assert not host.is_idle()
    assert await host.skip_time() is None
    assert host.clock.now() == START

    held.release.set()
    await eventually(host.is_idle, "the two messages finish")
    assert host.invocations_in_flight() == 0

    # Idle now: the clock jumps to the timer's next occurrence, and the timer function runs.
    held.release.clear()
    assert await host.skip_time() == NEXT_TICK
    await eventually(lambda: "tick" in held.started, "the hourly timer fires")
    assert host.invocations_in_flight() == 1
    assert await host.skip_time() is None
    assert host.clock.now() == NEXT_TICK

    held.release.set()
    await eventually(host.is_idle, "the timer function finishes")
