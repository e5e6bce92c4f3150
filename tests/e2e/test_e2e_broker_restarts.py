"""The whole order pipeline while its broker crashes: killed with SIGKILL and restarted on
the same port with its journal, three times while orders are being worked on.

The pieces run as the demo runs them: the broker as a process of its own with its SQLite
journal (``--data``), the devhost with one language worker process, the simulated stock,
payment and shipping services with the ``none`` fault mix. Each order runs the step workflow:
reserve stock, charge payment, ship, each step's request and answer crossing the broker.
Without kills such a run ends with every order Processed and no supervisor give-up; the
restarts must not change that. The devhost's listeners replace their receivers
(``listener_restarts``), the app's publisher replaces its senders, and messages in flight at
a kill come back from the journal: every order reaches a final state, none is given up
(Error) or compensated, no side effect happens twice at any step's service, and every
submitting app hears ``completed`` on its reply queue.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient
from devhost.host import DevHost, HostOptions
from devhost.servicebus.process import BrokerProcess
from devhost.settings import AppSettings
from devhost.testing import eventually, eventually_true

import bootstrap
from config import Settings
from domain.ports import StateStore, StoreMetrics
from tests.e2e.e2e_helpers import STEP_SERVICES, record_summary, submit_orders
from tools.demo.pipeline import (
    BROKER_CONFIG,
    DEMO_REPLY_QUEUE,
    LOCAL_SETTINGS,
    REPOSITORY,
    Pipeline,
    sample_settings,
)
from tools.demo.report import FINAL_STATES
from tools.simulators.services import SimulatedServices

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ORDERS = 300
KILLS = 3
SDK_TIMEOUT_SECONDS = 10.0
# A broker start takes about a second; the listeners' backoff is capped at a few seconds.
RECOVERY_BOUND_SECONDS = 30.0
# Orders hit by a kill may need one supervisor retry (STEP_TIMEOUT_SECONDS is 10 locally).
SETTLE_BOUND_SECONDS = 90.0
RECEIVE_SLICE_SECONDS = 1.0
FINAL_STATUSES = ("completed", "failed", "compensated", "compensation-failed")
# A kill costs an order in flight at most one attempt (its step's deadline passes and the
# supervisor retries it, U4), so with more attempts allowed than kills no order can be given
# up because of the kills alone, however they fall on a slow machine.
RESTART_SETTINGS = {"MAX_FAILURES": str(KILLS + 1)}


@contextlib.asynccontextmanager
async def pipeline_with_a_crashing_broker(
    work_dir: Path,
) -> AsyncIterator[tuple[Pipeline, BrokerProcess, Settings]]:
    """What ``demo.pipeline.local_pipeline`` starts with ``broker_process``, the broker
    with a journal so that it can be killed and started again without losing messages."""
    broker = BrokerProcess(BROKER_CONFIG, data=work_dir / "broker.sqlite")
    await asyncio.to_thread(broker.start)
    services = SimulatedServices(seed=3)
    host: DevHost | None = None
    try:
        await services.start()
        values = {
            **sample_settings(),
            **LOCAL_SETTINGS,
            "STATE_STORE": "sqlite",
            "ServiceBusConnection": broker.connection_string,
            **{
                f"{service.upper()}_SERVICE_URL": services.url(service) for service in STEP_SERVICES
            },
            "SQLITE_DIRECTORY": str(work_dir / "stores"),
            **RESTART_SETTINGS,
        }
        options = HostOptions(
            app="function_app:app",
            app_root=REPOSITORY,
            data_dir=work_dir / "devhost",
            http_port=0,
            worker_processes=1,
        )
        host = DevHost(options, AppSettings(values))
        await host.start()
        yield Pipeline(broker, services, host), broker, Settings.from_environ(values)
    finally:
        if host is not None:
            await host.stop()
        await bootstrap.shutdown()
        await services.stop()
        await asyncio.to_thread(broker.stop)


def not_processed(states: StateStore, finished: dict[str, str]) -> list[str]:
    """What an operator would read of each order that did not end Processed."""
    return [
        record_summary(order_id, states.get(order_id))
        for order_id, state in sorted(finished.items())
        if state != "Processed"
    ]


async def final_states(states: StateStore, order_ids: list[str]) -> dict[str, str]:
    def read() -> dict[str, str]:
        found = {order_id: states.get(order_id) for order_id in order_ids}
        return {
            order_id: record.process_state.value
            for order_id, record in found.items()
            if record is not None and record.process_state.value in FINAL_STATES
        }

    return await asyncio.to_thread(read)


async def final_replies(connection_string: str, order_ids: set[str]) -> dict[str, set[str]]:
    """The final statuses on the reply queue, per order, once every order in ``order_ids``
    has one (``in-progress`` statuses are taken and passed over)."""
    seen: dict[str, set[str]] = collections.defaultdict(set)
    client = ServiceBusClient.from_connection_string(connection_string)
    async with (
        client,
        client.get_queue_receiver(
            DEMO_REPLY_QUEUE, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver,
    ):

        async def all_heard() -> bool:
            batch = await receiver.receive_messages(
                max_message_count=250, max_wait_time=RECEIVE_SLICE_SECONDS
            )
            for message in batch:
                body = json.loads(b"".join(message.body))
                if body["status"] in FINAL_STATUSES:
                    seen[body["orderId"]].add(body["status"])
            return order_ids <= set(seen)

        await eventually_true(all_heard, "a final status for every order", RECOVERY_BOUND_SECONDS)
    return seen


async def kill_and_restart(pipeline: Pipeline, broker: BrokerProcess) -> None:
    host = pipeline.host
    before = dict(host.listener_restarts)
    await asyncio.to_thread(broker.kill)
    await eventually(
        lambda: all(host.listener_restarts[name] > count for name, count in before.items()),
        "every Service Bus listener noticed that the broker is gone",
        RECOVERY_BOUND_SECONDS,
    )
    await asyncio.to_thread(broker.start)
    await eventually(lambda: host.listening, "every listener reopened", RECOVERY_BOUND_SECONDS)


async def test_orders_finish_as_without_kills_when_the_broker_crashes_three_times(
    tmp_path: Path,
) -> None:
    order_ids = [f"crash-{index:04d}" for index in range(ORDERS)]
    started = time.monotonic()
    async with pipeline_with_a_crashing_broker(tmp_path) as (pipeline, broker, settings):
        states, orders = bootstrap.open_stores(settings, StoreMetrics())
        try:
            await submit_orders(broker.connection_string, order_ids, bound=SDK_TIMEOUT_SECONDS)
            for kill in range(1, KILLS + 1):
                # Each kill lands while orders are in every stage of the pipeline.
                async def progressed(threshold: int = kill * ORDERS // (KILLS + 2)) -> bool:
                    return len(await final_states(states, order_ids)) >= threshold

                await eventually_true(progressed, f"progress before kill {kill}", 60.0)
                await kill_and_restart(pipeline, broker)

            async def all_final() -> bool:
                return len(await final_states(states, order_ids)) == ORDERS

            await eventually_true(all_final, "every order in a final state", SETTLE_BOUND_SECONDS)
            finished = await final_states(states, order_ids)
            given_up = await asyncio.to_thread(not_processed, states, finished)
            replies = await final_replies(broker.connection_string, set(order_ids))
        finally:
            states.close()
            orders.close()
        restarts = dict(pipeline.host.listener_restarts)
        failures = pipeline.host.listener_failures
        side_effects = {
            service: pipeline.services.stats(service)["double_side_effects"]
            for service in STEP_SERVICES
        }
    duration = time.monotonic() - started

    # As without kills: every order Processed, none given up by the supervisor.
    assert collections.Counter(finished.values()) == {"Processed": ORDERS}, (duration, given_up)
    assert all(statuses == {"completed"} for statuses in replies.values()), replies
    assert side_effects == dict.fromkeys(STEP_SERVICES, 0)
    # The listeners restarted, at least once per kill each, and none stopped for good.
    assert failures == []
    assert set(restarts) == {
        "receive_order",
        "stock_agent",
        "payment_agent",
        "shipping_agent",
        "receive_agent_response",
    }
    assert all(count >= KILLS for count in restarts.values()), restarts
