"""Settlement that fails through the devhost's gRPC ``Settlement`` service, and what follows.

Real pieces throughout: the embedded broker, the devhost's serviceBusTrigger and its
``Settlement`` service, the Service Bus extension's ``ServiceBusMessageActions`` client and,
where a call needs a deadline, a client sending the extension's own requests with one
(``devhost_tests_support.settlement_client``). A function whose settlement fails (lost lock,
no answer before its deadline) sees the gRPC status that says why and can abandon the
message; the message comes back, at once after an abandon and after its lock otherwise,
never hanging or lost. A settlement the service applies after its caller gave up is refused.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func
import grpc
import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessageAlreadySettled, MessageLockLostError
from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusReceivedMessage as SdkMessage,
)
from azurefunctions.extensions.bindings.servicebus.serviceBusMessageActions import (
    SettlementError,
)
from devhost_tests_support.settlement_client import DeadlineSettlement
from devhost_tests_support.settlement_harness import (
    SETTLEMENT_QUEUES,
    TEST_DEADLINE,
    TIMEOUT,
    dead_letters,
    is_empty,
    send,
    trigger_for,
)

from devhost.invocation import FunctionInvoker
from devhost.servicebus.server import ServiceBusBroker
from devhost.testing import eventually, running_broker
from devhost.triggers.servicebus import ServiceBusTrigger
from devhost.triggers.settlement import SettlementService

pytestmark = pytest.mark.timeout(60)

OK = "OK"


@pytest.fixture(scope="module")
def broker() -> Iterator[ServiceBusBroker]:
    with running_broker(SETTLEMENT_QUEUES) as running:
        yield running


@pytest.fixture
async def invoker(tmp_path: Path) -> AsyncIterator[FunctionInvoker]:
    running = FunctionInvoker(str(tmp_path), max_threads=4)
    yield running
    running.close()


class Stall:
    """A host that does not answer: the settlements named in ``operations`` of the message
    passed to ``delay`` are not applied until ``release`` is set.

    The trigger holds each message in the devhost's settlement service with the function that
    applies its settlements; ``delay`` holds it again, through the service's own ``release``
    and ``hold``, with that function behind the stall. ``late`` is what became of each
    stalled settlement once applied: the error it was refused with, or None.
    """

    def __init__(self, operations: frozenset[str]) -> None:
        self.operations = operations
        self.release = asyncio.Event()
        self.calls = 0
        self.late: list[tuple[str, Exception | None]] = []

    def delay(self, message: SdkMessage) -> None:
        service = SettlementService.shared()
        held = service.release(str(message.lock_token))
        assert held is not None, "the trigger holds the message in the settlement service"
        apply = held.settle

        async def stalled(operation: str, received: Any, **options: Any) -> None:
            if operation not in self.operations:
                await apply(operation, received, **options)
                return
            self.calls += 1
            await self.release.wait()
            try:
                await apply(operation, received, **options)
            except Exception as error:
                self.late.append((operation, error))
                raise
            self.late.append((operation, None))

        service.hold(held.message, held.loop, stalled)


@dataclass(frozen=True)
class Call:
    """One settlement call a function made, and the gRPC status it ended with."""

    operation: str
    status: str
    detail: str = ""


@dataclass(frozen=True)
class Delivery:
    """What one delivery's function saw: the delivery count, its settlement calls in order
    (an abandon after a settlement that failed), and the seconds those calls took."""

    count: int
    calls: tuple[Call, ...]
    seconds: float

    @property
    def statuses(self) -> list[tuple[str, str]]:
        return [(call.operation, call.status) for call in self.calls]


async def _call(operation: str, settle: Callable[[], None]) -> Call:
    try:
        await asyncio.to_thread(settle)
    except (SettlementError, grpc.RpcError) as error:
        # The extension's client wraps the call's error; the deadline client raises it.
        failed = error.original if isinstance(error, SettlementError) else error
        assert isinstance(failed, grpc.Call), f"not a gRPC call's error: {failed!r}"
        return Call(operation, failed.code().name, str(failed.details() or ""))
    return Call(operation, OK)


def settling_app(
    queue_name: str,
    deliveries: list[Delivery],
    *,
    operation: str = "complete",
    description: str = "body is not an order",
    deadline: float | None = None,
    before_first: Callable[[SdkMessage], Awaitable[None]] | None = None,
    stall: Stall | None = None,
) -> func.FunctionApp:
    """An SDK-type trigger that settles its message itself and, when that fails, abandons it,
    recording each delivery; through the extension's client, or with ``deadline`` on each
    call."""
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(
        arg_name="message", queue_name=queue_name, connection="SB", auto_complete_messages=False
    )
    async def handle(message: SdkMessage, message_actions: ServiceBusMessageActions) -> None:
        count = message.delivery_count or 0
        if count == 0 and before_first is not None:
            await before_first(message)
        if count == 0 and stall is not None:
            stall.delay(message)
        client: Any = message_actions if deadline is None else DeadlineSettlement(deadline)
        if operation == "complete":
            settle = functools.partial(client.complete, message)
        else:
            settle = functools.partial(
                client.deadletter,
                message,
                deadletter_reason="InvalidMessage",
                deadletter_error_description=description,
            )
        started = time.monotonic()
        try:
            calls = [await _call(operation, settle)]
            if calls[0].status != OK:
                calls.append(await _call("abandon", functools.partial(client.abandon, message)))
        finally:
            if isinstance(client, DeadlineSettlement):
                client.close()
        deliveries.append(Delivery(count, tuple(calls), time.monotonic() - started))

    return app


async def run_until(
    trigger: ServiceBusTrigger, done: Callable[[], bool], what: str, stall: Stall | None = None
) -> None:
    """Run the trigger until ``done()`` holds, then let stalled settlements finish and stop."""
    task = asyncio.create_task(trigger.run())
    try:
        await eventually(done, what)
    finally:
        if stall is not None:
            stall.release.set()
            await eventually(
                lambda: len(stall.late) == stall.calls,
                "the stalled settlements were applied (and refused) once released",
            )
        await trigger.stop()
        await asyncio.wait_for(task, timeout=TIMEOUT)


async def wait_for_lock_expiry(message: SdkMessage) -> None:
    locked_until = message.locked_until_utc
    assert locked_until is not None
    await eventually(
        lambda: dt.datetime.now(dt.UTC) > locked_until, "the message's lock expired", bound=10
    )


def refusals(late: list[tuple[str, Exception | None]]) -> list[tuple[str, type[Exception] | None]]:
    """Each stalled settlement with the type of the error it was refused with (None: applied)."""
    return [(operation, None if error is None else type(error)) for operation, error in late]


async def test_a_lost_lock_fails_the_settlement_and_the_broker_redelivers_the_message(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    deliveries: list[Delivery] = []
    app = settling_app("lost-lock", deliveries, before_first=wait_for_lock_expiry)
    trigger = trigger_for(app, broker, invoker)
    await send(broker, "lost-lock", ServiceBusMessage(b"order", message_id="lost-1"))

    await run_until(trigger, lambda: len(deliveries) == 2, "the redelivered message was settled")

    first, second = deliveries
    # Through the extension's client: the lock is gone, so neither settling nor abandoning
    # the message can succeed, and the function is told so rather than left waiting.
    assert (first.count, first.statuses) == (
        0,
        [("complete", "FAILED_PRECONDITION"), ("abandon", "FAILED_PRECONDITION")],
    )
    assert all("lock" in call.detail.lower() for call in first.calls), first.calls
    assert (second.count, second.statuses) == (1, [("complete", OK)])
    assert await is_empty(broker, "lost-lock")


async def test_a_dead_letter_description_past_4096_characters_is_refused_as_on_azure(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    """The Functions host's Service Bus client refuses a dead-letter reason or description
    longer than 4,096 characters; so does the devhost, and the message is not dead-lettered
    with it."""
    deliveries: list[Delivery] = []
    app = settling_app(
        "long-description", deliveries, operation="dead_letter", description="x" * 4_097
    )
    trigger = trigger_for(app, broker, invoker)
    await send(broker, "long-description", ServiceBusMessage(b"order", message_id="long-1"))

    await run_until(trigger, lambda: len(deliveries) == 1, "the dead-letter call was answered")

    first = deliveries[0]
    assert first.statuses == [("dead_letter", "INVALID_ARGUMENT"), ("abandon", OK)]
    assert "4096" in first.calls[0].detail
    # Abandoned, it comes back; what ends in the dead-letter queue is the broker's doing.
    assert all(
        m.dead_letter_reason != "InvalidMessage"
        for m in await dead_letters(broker, "long-description")
    )


@pytest.mark.parametrize(
    ("operation", "queue_name"),
    [("complete", "stalled-complete"), ("dead_letter", "stalled-dead-letter")],
)
async def test_a_settlement_without_an_answer_ends_at_its_deadline_and_the_abandon_redelivers(
    broker: ServiceBusBroker, invoker: FunctionInvoker, operation: str, queue_name: str
) -> None:
    deliveries: list[Delivery] = []
    stall = Stall(frozenset({operation}))
    app = settling_app(
        queue_name, deliveries, operation=operation, deadline=TEST_DEADLINE, stall=stall
    )
    trigger = trigger_for(app, broker, invoker)
    await send(broker, queue_name, ServiceBusMessage(b"order", message_id=f"{operation}-1"))

    # The lock lasts 30 s: a redelivery within the wait's bound can only come from the abandon.
    await run_until(trigger, lambda: len(deliveries) == 2, "the abandoned message came back", stall)

    first, second = deliveries
    assert (first.count, first.statuses) == (
        0,
        [(operation, "DEADLINE_EXCEEDED"), ("abandon", OK)],
    )
    assert TEST_DEADLINE <= first.seconds < TEST_DEADLINE + 5
    assert (second.count, second.statuses) == (1, [(operation, OK)])
    # Applied once released, the stalled settlement finds that delivery abandoned already.
    assert refusals(stall.late) == [(operation, MessageAlreadySettled)]
    assert await is_empty(broker, queue_name)
    if operation == "dead_letter":
        (dead,) = await dead_letters(broker, queue_name)
        assert dead.message_id == f"{operation}-1"
        assert dead.dead_letter_reason == "InvalidMessage"
        assert dead.dead_letter_error_description == "body is not an order"
        assert dead.delivery_count == 1


async def test_when_the_abandon_gets_no_answer_either_the_lock_expiry_redelivers(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    deliveries: list[Delivery] = []
    stall = Stall(frozenset({"complete", "abandon"}))
    app = settling_app("stalled-both", deliveries, deadline=TEST_DEADLINE, stall=stall)
    trigger = trigger_for(app, broker, invoker)
    await send(broker, "stalled-both", ServiceBusMessage(b"order", message_id="both-1"))

    await run_until(
        trigger, lambda: len(deliveries) == 2, "the message came back after its lock", stall
    )

    first, second = deliveries
    assert (first.count, first.statuses) == (
        0,
        [("complete", "DEADLINE_EXCEEDED"), ("abandon", "DEADLINE_EXCEEDED")],
    )
    assert 2 * TEST_DEADLINE <= first.seconds < 2 * TEST_DEADLINE + 5
    assert (second.count, second.statuses) == (1, [("complete", OK)])
    assert refusals(stall.late) == [
        ("complete", MessageLockLostError),
        ("abandon", MessageLockLostError),
    ]
    assert await is_empty(broker, "stalled-both")
