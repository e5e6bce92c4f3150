"""serviceBusTrigger through the real SDK and the embedded broker (S1, S3 settlement).

Plain bindings get an azure.functions.ServiceBusMessage; SDK-type bindings get the
extension's ServiceBusReceivedMessage and settle it through ServiceBusMessageActions, which
the devhost serves over gRPC as the host does.
"""

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import azure.functions as func
import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

from devhost.host_config import ServiceBusOptions
from devhost.indexing import IndexedFunction, index_app
from devhost.invocation import FunctionInvoker
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from devhost.testing import eventually, eventually_true, queue, running_broker
from devhost.triggers.servicebus import ServiceBusTrigger

TIMEOUT = 15


@pytest.fixture(scope="module")
def broker() -> Iterator[ServiceBusBroker]:
    queues = [
        queue(name, LockDuration="PT30S", MaxDeliveryCount=2)
        for name in ("plain", "failing", "slow", "sdk", "sdk-failing", "traced")
    ]
    with running_broker(queues) as running:
        yield running


@pytest.fixture
async def invoker(tmp_path: Path) -> AsyncIterator[FunctionInvoker]:
    running = FunctionInvoker(str(tmp_path), max_threads=4)
    yield running
    running.close()


def only(app: func.FunctionApp, broker: ServiceBusBroker) -> tuple[IndexedFunction, AppSettings]:
    settings = AppSettings({"SB": broker.connection_string})
    (function,) = index_app(app, settings)
    return function, settings


async def send(broker: ServiceBusBroker, queue_name: str, *messages: ServiceBusMessage) -> None:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        sender = client.get_queue_sender(queue_name)
        async with sender:
            await sender.send_messages(list(messages), timeout=TIMEOUT)


async def dead_letters(broker: ServiceBusBroker, queue_name: str, count: int) -> list[object]:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        receiver = client.get_queue_receiver(queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        async with receiver:
            received: list[object] = []
            for _ in range(20):
                batch = await receiver.receive_messages(max_message_count=count, max_wait_time=1)
                for message in batch:
                    await receiver.complete_message(message)
                received.extend(batch)
                if len(received) >= count:
                    break
            return received


async def peek_count(broker: ServiceBusBroker, queue_name: str) -> int:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        receiver = client.get_queue_receiver(queue_name)
        async with receiver:
            return len(await receiver.peek_messages(max_message_count=50, timeout=TIMEOUT))


async def _is_empty(broker: ServiceBusBroker, queue_name: str) -> bool:
    return await peek_count(broker, queue_name) == 0


async def running(trigger: ServiceBusTrigger) -> tuple[ServiceBusTrigger, asyncio.Task[None]]:
    return trigger, asyncio.create_task(trigger.run())


async def stop(listener: tuple[ServiceBusTrigger, asyncio.Task[None]]) -> None:
    trigger, task = listener
    await trigger.stop()
    await asyncio.wait_for(task, timeout=TIMEOUT)


async def test_plain_binding_gets_every_property_and_success_completes(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    received: list[func.ServiceBusMessage] = []
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="plain", connection="SB")
    def handle(msg: func.ServiceBusMessage) -> None:
        received.append(msg)

    function, settings = only(app, broker)
    listener = await running(ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(4)))
    await send(
        broker,
        "plain",
        ServiceBusMessage(
            b'{"x": 1}',
            message_id="m-1",
            correlation_id="c-1",
            reply_to="replies",
            subject="greeting",
            content_type="application/json",
            application_properties={"k": "v"},
        ),
    )
    await eventually(lambda: len(received) == 1, "the function ran")
    message = received[0]
    assert message.get_body() == b'{"x": 1}'
    assert (message.message_id, message.correlation_id, message.reply_to) == (
        "m-1",
        "c-1",
        "replies",
    )
    assert (message.subject, message.content_type) == ("greeting", "application/json")
    assert message.application_properties == {"k": "v"}
    assert message.delivery_count == 0
    assert message.sequence_number is not None
    assert message.enqueued_time_utc is not None
    assert message.lock_token is not None
    await eventually_true(
        lambda: _is_empty(broker, "plain"), "the completed message left the queue"
    )
    await stop(listener)


async def test_the_invocation_continues_the_trace_of_the_message_diagnostic_id(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    """C9: as the host's Service Bus extension, the message's Diagnostic-Id is the parent of
    the invocation, whose trace context the function gets in ``context.trace_context``."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    seen: list[tuple[str, str]] = []
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="traced", connection="SB")
    def handle(msg: func.ServiceBusMessage, context: func.Context) -> None:
        seen.append((context.trace_context.trace_parent, context.trace_context.trace_state))

    function, settings = only(app, broker)
    listener = await running(ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(4)))
    await send(
        broker,
        "traced",
        ServiceBusMessage(
            b"{}", application_properties={"Diagnostic-Id": parent, "tracestate": "v=1"}
        ),
    )
    await eventually(lambda: len(seen) == 1, "the function ran")
    trace_parent, trace_state = seen[0]
    assert trace_parent.split("-")[1] == parent.split("-")[1]  # the message's trace
    assert trace_state == "v=1"
    await stop(listener)


async def test_exception_abandons_until_the_broker_dead_letters(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    deliveries: list[int | None] = []
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="failing", connection="SB")
    def handle(msg: func.ServiceBusMessage) -> None:
        deliveries.append(msg.delivery_count)
        raise RuntimeError("cannot process")

    function, settings = only(app, broker)
    listener = await running(ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(1)))
    await send(broker, "failing", ServiceBusMessage(b"poison", message_id="p-1"))
    (dead,) = await dead_letters(broker, "failing", 1)
    assert deliveries == [0, 1]
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"  # type: ignore[attr-defined]
    await stop(listener)


async def test_max_concurrent_calls_bounds_invocations_in_flight(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    release = threading.Event()
    lock = threading.Lock()
    state = {"running": 0, "peak": 0, "done": 0}
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="slow", connection="SB")
    def handle(msg: func.ServiceBusMessage) -> None:
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
        release.wait(TIMEOUT)
        with lock:
            state["running"] -= 1
            state["done"] += 1

    function, settings = only(app, broker)
    trigger = ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(2, prefetch_count=5))
    listener = await running(trigger)
    await send(broker, "slow", *(ServiceBusMessage(b"x", message_id=f"s-{i}") for i in range(6)))
    await eventually(lambda: state["running"] == 2, "two invocations run")
    assert trigger.in_flight == 2
    release.set()
    await eventually(lambda: state["done"] == 6, "all six processed")
    assert state["peak"] == 2
    await stop(listener)


async def test_sdk_binding_dead_letters_with_a_reason_through_message_actions(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    seen: list[ServiceBusReceivedMessage] = []
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(
        arg_name="message", queue_name="sdk", connection="SB", auto_complete_messages=False
    )
    async def handle(
        message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
    ) -> None:
        seen.append(message)
        body = b"".join(message.body)
        if body == b"bad":
            await asyncio.to_thread(
                message_actions.deadletter,
                message,
                deadletter_reason="InvalidMessage",
                deadletter_error_description="body is not an order",
            )
        else:
            await asyncio.to_thread(message_actions.complete, message)

    function, settings = only(app, broker)
    listener = await running(ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(4)))
    await send(
        broker,
        "sdk",
        ServiceBusMessage(b"good", message_id="g-1", reply_to="replies"),
        ServiceBusMessage(b"bad", message_id="b-1"),
    )
    (dead,) = await dead_letters(broker, "sdk", 1)
    assert dead.message_id == "b-1"  # type: ignore[attr-defined]
    assert dead.dead_letter_reason == "InvalidMessage"  # type: ignore[attr-defined]
    assert dead.dead_letter_error_description == "body is not an order"  # type: ignore[attr-defined]
    await eventually(lambda: len(seen) == 2, "both messages seen")
    good = next(m for m in seen if m.message_id == "g-1")
    assert good.reply_to == "replies"
    await eventually_true(lambda: _is_empty(broker, "sdk"), "the good message was completed")
    await stop(listener)


async def test_sdk_binding_exception_without_settlement_abandons(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    deliveries: list[int] = []
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(
        arg_name="message", queue_name="sdk-failing", connection="SB", auto_complete_messages=False
    )
    async def handle(
        message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
    ) -> None:
        deliveries.append(message.delivery_count or 0)
        if len(deliveries) == 1:
            raise RuntimeError("transient")
        await asyncio.to_thread(message_actions.complete, message)

    function, settings = only(app, broker)
    listener = await running(ServiceBusTrigger(function, invoker, settings, ServiceBusOptions(1)))
    await send(broker, "sdk-failing", ServiceBusMessage(b"once", message_id="t-1"))
    await eventually(lambda: len(deliveries) == 2, "redelivered after the abandon")
    assert deliveries == [0, 1]
    await stop(listener)
