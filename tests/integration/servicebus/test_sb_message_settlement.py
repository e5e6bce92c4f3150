"""The app's settlement helpers against the devhost's gRPC settlement service (S1, S3, C8).

Real pieces throughout: the embedded broker, the devhost's serviceBusTrigger and its
``Settlement`` gRPC service, the extension's ``ServiceBusMessageActions`` client and
``adapters.message_settlement``. A settlement that fails (lost lock, no answer before the
deadline) must end in a logged outcome and a redelivery, never a hang or a lost message.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.servicebus import ServiceBusMessage
from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusReceivedMessage as SdkMessage,
)
from devhost.invocation import FunctionInvoker
from devhost.servicebus.server import ServiceBusBroker
from devhost.testing import eventually, running_broker
from devhost.triggers.servicebus import ServiceBusTrigger
from devhost.triggers.settlement import SettlementService
from devhost_tests_support.settlement_harness import (
    SETTLEMENT_QUEUES,
    TEST_DEADLINE,
    TIMEOUT,
    dead_letters,
    is_empty,
    send,
    trigger_for,
)

from adapters import message_settlement
from adapters.message_settlement import Outcome

pytestmark = pytest.mark.timeout(60)

SETTLEMENT_LOGGER = "app.settlement"


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
    and ``hold``, with that function behind the stall.
    """

    def __init__(self, operations: frozenset[str]) -> None:
        self.operations = operations
        self.release = asyncio.Event()
        self.calls = 0
        self.calls_done = 0

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
            try:
                await self.release.wait()
                await apply(operation, received, **options)
            finally:
                self.calls_done += 1

        service.hold(held.message, held.loop, stalled)


def settling_app(
    queue_name: str,
    outcomes: list[tuple[int, Outcome, float]],
    *,
    operation: str = "complete",
    description: str = "body is not an order",
    before_first: Callable[[SdkMessage], Awaitable[None]] | None = None,
    stall: Stall | None = None,
) -> func.FunctionApp:
    """An SDK-type trigger that settles through the app's helpers and records what became of
    each delivery: (delivery_count, outcome, seconds the helper took)."""
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(
        arg_name="message", queue_name=queue_name, connection="SB", auto_complete_messages=False
    )
    async def handle(message: SdkMessage, message_actions: ServiceBusMessageActions) -> None:
        delivery = message.delivery_count or 0
        if delivery == 0 and before_first is not None:
            await before_first(message)
        if delivery == 0 and stall is not None:
            stall.delay(message)
        started = time.monotonic()
        if operation == "complete":
            outcome = await message_settlement.complete(
                message_actions, message, deadline=TEST_DEADLINE
            )
        else:
            outcome = await message_settlement.dead_letter(
                message_actions,
                message,
                reason="InvalidMessage",
                description=description,
                deadline=TEST_DEADLINE,
            )
        outcomes.append((delivery, outcome, time.monotonic() - started))

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
                lambda: stall.calls_done == stall.calls,
                "the stalled settlements were applied (and refused) once released",
            )
        await trigger.stop()
        await asyncio.wait_for(task, timeout=TIMEOUT)


def settlement_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SETTLEMENT_LOGGER]


async def wait_for_lock_expiry(message: SdkMessage) -> None:
    locked_until = message.locked_until_utc
    assert locked_until is not None
    await eventually(
        lambda: dt.datetime.now(dt.UTC) > locked_until, "the message's lock expired", bound=10
    )


async def test_a_lost_lock_is_logged_and_the_broker_redelivers_the_message(
    broker: ServiceBusBroker, invoker: FunctionInvoker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SETTLEMENT_LOGGER)
    outcomes: list[tuple[int, Outcome, float]] = []
    app = settling_app("lost-lock", outcomes, before_first=wait_for_lock_expiry)
    trigger = trigger_for(app, broker, invoker)
    await send(broker, "lost-lock", ServiceBusMessage(b"order", message_id="lost-1"))

    await run_until(trigger, lambda: len(outcomes) == 2, "the redelivered message was settled")

    assert [(delivery, outcome) for delivery, outcome, _ in outcomes] == [
        (0, Outcome.LOCK_EXPIRES),
        (1, Outcome.SETTLED),
    ]
    failed, lock_expires = settlement_lines(caplog)
    assert "operation=complete message_id=lost-1" in failed
    assert "delivery_count=0" in failed
    assert "status=FAILED_PRECONDITION" in failed
    assert "next=abandon" in failed
    assert "message_id=lost-1" in lock_expires
    assert "outcome=lock-expires" in lock_expires
    assert await is_empty(broker, "lost-lock")


async def test_a_description_too_long_for_service_bus_is_cut_to_its_4096_characters_s3(
    broker: ServiceBusBroker, invoker: FunctionInvoker
) -> None:
    """The host refuses a dead-letter description past 4,096 characters: the message would be
    abandoned for ever. The helper cuts it, and the message is dead-lettered on its first
    delivery."""
    outcomes: list[tuple[int, Outcome, float]] = []
    app = settling_app(
        "long-description", outcomes, operation="dead_letter", description="d" * 60_000
    )
    trigger = trigger_for(app, broker, invoker)
    await send(broker, "long-description", ServiceBusMessage(b"order", message_id="long-2"))

    await run_until(trigger, lambda: len(outcomes) == 1, "the message was dead-lettered")

    assert [(delivery, outcome) for delivery, outcome, _ in outcomes] == [(0, Outcome.SETTLED)]
    [dead] = await dead_letters(broker, "long-description")
    assert dead.dead_letter_reason == "InvalidMessage"
    description = dead.dead_letter_error_description or ""
    assert len(description) == 4096
    assert description.endswith("...")


@pytest.mark.parametrize(
    ("operation", "queue_name"),
    [("complete", "stalled-complete"), ("dead_letter", "stalled-dead-letter")],
)
async def test_a_settlement_without_an_answer_ends_at_its_deadline_and_abandons(
    broker: ServiceBusBroker,
    invoker: FunctionInvoker,
    caplog: pytest.LogCaptureFixture,
    operation: str,
    queue_name: str,
) -> None:
    caplog.set_level(logging.INFO, logger=SETTLEMENT_LOGGER)
    outcomes: list[tuple[int, Outcome, float]] = []
    stall = Stall(frozenset({operation}))
    app = settling_app(queue_name, outcomes, operation=operation, stall=stall)
    trigger = trigger_for(app, broker, invoker)
    await send(broker, queue_name, ServiceBusMessage(b"order", message_id=f"{operation}-1"))

    # The lock lasts 30 s: a redelivery within the wait's bound can only come from the abandon.
    await run_until(trigger, lambda: len(outcomes) == 2, "the abandoned message came back", stall)

    (first_delivery, first, first_seconds), (second_delivery, second, _) = outcomes
    assert (first_delivery, first) == (0, Outcome.ABANDONED)
    assert TEST_DEADLINE <= first_seconds < TEST_DEADLINE + 5
    assert (second_delivery, second) == (1, Outcome.SETTLED)
    failed, abandoned = settlement_lines(caplog)
    assert f"operation={operation} message_id={operation}-1" in failed
    assert "status=DEADLINE_EXCEEDED" in failed
    assert "outcome=abandoned" in abandoned
    assert await is_empty(broker, queue_name)
    if operation == "dead_letter":
        (dead,) = await dead_letters(broker, queue_name)
        assert dead.message_id == f"{operation}-1"
        assert dead.dead_letter_reason == "InvalidMessage"
        assert dead.delivery_count == 1


async def test_when_the_abandon_gets_no_answer_either_the_lock_expiry_redelivers(
    broker: ServiceBusBroker, invoker: FunctionInvoker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=SETTLEMENT_LOGGER)
    outcomes: list[tuple[int, Outcome, float]] = []
    stall = Stall(frozenset({"complete", "abandon"}))
    app = settling_app("stalled-both", outcomes, stall=stall)
    trigger = trigger_for(app, broker, invoker)
    await send(broker, "stalled-both", ServiceBusMessage(b"order", message_id="both-1"))

    await run_until(
        trigger, lambda: len(outcomes) == 2, "the message came back after its lock", stall
    )

    (first_delivery, first, first_seconds), (second_delivery, second, _) = outcomes
    assert (first_delivery, first) == (0, Outcome.LOCK_EXPIRES)
    assert 2 * TEST_DEADLINE <= first_seconds < 2 * TEST_DEADLINE + 5
    assert (second_delivery, second) == (1, Outcome.SETTLED)
    failed, lock_expires = settlement_lines(caplog)
    assert "operation=complete message_id=both-1" in failed
    assert "status=DEADLINE_EXCEEDED" in failed
    assert "status=DEADLINE_EXCEEDED" in lock_expires
    assert "outcome=lock-expires" in lock_expires
    assert await is_empty(broker, "stalled-both")
