"""Service Bus listeners outlive their broker: killed with SIGKILL and restarted on the same
port with its journal, the broker comes back and every listener with it.

The broker runs as a process of its own (``BrokerProcess`` with ``--data``), as the demo runs
it, so a kill loses its connections the way an outage does and keeps the accepted messages.
Each listener replaces its failed receiver with bounded backoff and counts the restart; the
invocations in flight when the link died fail to settle and the broker redelivers their
messages, so every message sent is processed at least once. A listener that cannot reach
the namespace keeps retrying (at start-up too) and stops promptly while it waits.
"""

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import azure.functions as func
import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from devhost import sdk_compat
from devhost.host import DevHost, HostOptions
from devhost.host_config import ServiceBusOptions
from devhost.indexing import index_app
from devhost.invocation import FunctionInvoker
from devhost.servicebus.process import BrokerProcess
from devhost.settings import AppSettings
from devhost.testing import eventually
from devhost.triggers.servicebus import ServiceBusTrigger

APP_ROOT = Path(__file__).parent / "apps" / "restarts"
QUEUES = ("plain-jobs", "sdk-jobs", "single")
SDK_TIMEOUT_SECONDS = 10.0
KILLS = 3
PER_ROUND = 60
# Reconnecting takes a broker start (about a second) plus the backoff.
RECOVERY_BOUND_SECONDS = 30.0
STOP_BOUND_SECONDS = 3.0

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    config = tmp_path / "servicebus.config.json"
    queues = [
        {"Name": name, "Properties": {"LockDuration": "PT30S", "MaxDeliveryCount": 20}}
        for name in QUEUES
    ]
    document = {"UserConfig": {"Namespaces": [{"Name": "restarts", "Queues": queues}]}}
    config.write_text(json.dumps(document), encoding="utf-8")
    process = BrokerProcess(config, data=tmp_path / "broker.sqlite")
    process.start()
    try:
        yield process
    finally:
        process.stop()


async def send(broker: BrokerProcess, queue: str, message_ids: list[str]) -> None:
    client = ServiceBusClient.from_connection_string(broker.connection_string)
    async with client, client.get_queue_sender(queue) as sender:
        await sender.send_messages(
            [ServiceBusMessage(i, message_id=i) for i in message_ids], timeout=SDK_TIMEOUT_SECONDS
        )


async def restart(broker: BrokerProcess) -> None:
    await asyncio.to_thread(broker.start)


@pytest.fixture
async def host(tmp_path: Path, broker: BrokerProcess) -> AsyncIterator[DevHost]:
    options = HostOptions(
        app="restart_app:app", app_root=APP_ROOT, data_dir=tmp_path / "devhost", http_port=0
    )
    running = DevHost(options, AppSettings({"SB": broker.connection_string}))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def test_listeners_keep_receiving_across_broker_kills(
    host: DevHost, broker: BrokerProcess
) -> None:
    processed: dict[str, list[str]] = sys.modules["restart_app"].processed
    assert host.listening
    sent: dict[str, set[str]] = {"plain": set(), "sdk": set()}
    for kill in range(KILLS):
        for function, queue in (("plain", "plain-jobs"), ("sdk", "sdk-jobs")):
            ids = [f"{function}-{kill}-{i}" for i in range(PER_ROUND)]
            await send(broker, queue, ids)
            sent[function].update(ids)
        # Kill while the burst is being worked on: invocations are in flight.
        await eventually(
            lambda: all(
                len(set(processed[f]) & sent[f]) >= len(sent[f]) - PER_ROUND // 2 for f in sent
            ),
            f"part of burst {kill} processed",
        )
        before = dict(host.listener_restarts)
        await asyncio.to_thread(broker.kill)
        await eventually(
            lambda before=before: all(host.listener_restarts[f] > before[f] for f in before),
            "every listener noticed that the broker is gone",
            RECOVERY_BOUND_SECONDS,
        )
        await restart(broker)
        await eventually(lambda: host.listening, "every listener reopened", RECOVERY_BOUND_SECONDS)

    await eventually(
        lambda: all(sent[f] <= set(processed[f]) for f in sent),
        "every message sent processed at least once",
        RECOVERY_BOUND_SECONDS,
    )
    assert host.listener_failures == []
    assert all(count >= KILLS for count in host.listener_restarts.values())


@pytest.fixture
async def invoker(tmp_path: Path) -> AsyncIterator[FunctionInvoker]:
    running = FunctionInvoker(str(tmp_path), max_threads=4)
    yield running
    running.close()


def single_queue_trigger(
    broker: BrokerProcess, invoker: FunctionInvoker, received: list[bytes]
) -> ServiceBusTrigger:
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="single", connection="SB")
    def handle(msg: func.ServiceBusMessage) -> None:
        received.append(msg.get_body())

    settings = AppSettings({"SB": broker.connection_string})
    (function,) = index_app(app, settings)
    return ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(4))


async def test_a_listener_retries_an_unreachable_broker_and_stops_promptly_while_waiting(
    broker: BrokerProcess, invoker: FunctionInvoker
) -> None:
    received: list[bytes] = []
    trigger = single_queue_trigger(broker, invoker, received)
    await asyncio.to_thread(broker.kill)
    task = asyncio.create_task(trigger.run())
    try:
        # Out of reach at start-up is a transient failure: retried, not a dead listener.
        await eventually(lambda: trigger.restarts >= 2, "the listener retried")
        assert not task.done()
        assert not trigger.listening.is_set()
        await restart(broker)
        await eventually(trigger.listening.is_set, "the listener opened", RECOVERY_BOUND_SECONDS)
        await send(broker, "single", ["after-start"])
        await eventually(lambda: received == [b"after-start"], "the message was processed")

        await asyncio.to_thread(broker.kill)
        restarts = trigger.restarts
        await eventually(lambda: trigger.restarts > restarts + 2, "the listener backs off")
    finally:
        await trigger.stop()
        await asyncio.wait_for(task, STOP_BOUND_SECONDS)
    assert trigger.last_error is not None


async def test_a_receiver_the_sdk_shut_down_silently_is_replaced(
    broker: BrokerProcess, invoker: FunctionInvoker
) -> None:
    received: list[bytes] = []
    trigger = single_queue_trigger(broker, invoker, received)
    task = asyncio.create_task(trigger.run())
    try:
        await eventually(trigger.listening.is_set, "the listener opened")
        # The state an SDK receiver is left in when a concurrent operation closes its AMQP
        # client under it: ``_running`` stays set and every receive returns an empty batch at
        # once, with no error. A listener that did not look would never receive again.
        link = trigger._link
        assert link is not None
        handler = sdk_compat.receiver_handler(link.receiver)
        assert handler is not None
        await handler.close_async()
        await eventually(lambda: trigger.restarts == 1, "the listener replaced the receiver")
        await eventually(trigger.listening.is_set, "the listener reopened")
        await send(broker, "single", ["after-restart"])
        await eventually(lambda: received == [b"after-restart"], "the message was processed")
    finally:
        await trigger.stop()
        await asyncio.wait_for(task, STOP_BOUND_SECONDS)
