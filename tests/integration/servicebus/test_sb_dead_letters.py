"""Dead-letter triage and the dead-letter watcher against the embedded broker, through the
real azure-servicebus SDK (S3, E8, DLQ with metadata for triage).

The adapter (`adapters.servicebus_dead_letters`) lists a queue's dead letters with their
reason and description, resubmits one to its source queue - past the queue's duplicate
detection - or discards it, each conditionally: of two operators racing on one dead letter
exactly one succeeds. The watcher (`services.dead_letters.watch_dead_letters`) alerts once
per dead letter across runs and restarts, a submission that exhausted its deliveries too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from devhost.servicebus.server import ServiceBusBroker
from devhost.testing import queue, running_broker
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from adapters import blocking_calls
from adapters.servicebus_dead_letters import ServiceBusDeadLetterQueues
from adapters.servicebus_publisher import ServiceBusPublisher
from adapters.sqlite_store import SqliteStateStore
from domain.dead_letters import MAX_DELIVERY_COUNT_EXCEEDED, RESUBMITTED_FROM_PROPERTY
from domain.ports import DeadLetterBusy
from observability.metrics import DEADLETTERS
from services.dead_letters import (
    UnknownQueue,
    WatchReport,
    discard_dead_letter,
    list_dead_letters,
    resubmit_dead_letter,
    watch_dead_letters,
)
from tests.support.metric_points import points, total

pytestmark = pytest.mark.asyncio

TIMEOUT_SECONDS = 10.0
ORDERS = "orders"
RESPONSES = "agent-responses"
ALERTS = "operator-alerts"
CONSUMED = (ORDERS, RESPONSES)
NOW = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)

# Not servicebus.config.json's settings: `orders` here detects duplicates (off in that file,
# as docs/architecture.md explains), so that the resubmit test shows a resubmitted dead
# letter getting past a queue's duplicate detection, as it must on the agent queues that do
# detect them; each message is delivered up to MaxDeliveryCount times, 2 here to exhaust them
# quickly.
QUEUES = [
    queue(
        ORDERS,
        LockDuration="PT30S",
        MaxDeliveryCount=2,
        RequiresDuplicateDetection=True,
        DuplicateDetectionHistoryTimeWindow="PT10M",
    ),
    queue(RESPONSES, LockDuration="PT30S", MaxDeliveryCount=2),
    queue(ALERTS, RequiresDuplicateDetection=True, DuplicateDetectionHistoryTimeWindow="PT10M"),
]


def order_body(order_id: str, customer: str = "customer-secret-42") -> str:
    return json.dumps(
        {
            "schemaVersion": 1,
            "orderId": order_id,
            "customerId": customer,
            "items": [{"sku": "sku-1", "quantity": 1}],
            "currency": "EUR",
        }
    )


@pytest.fixture
def broker() -> Iterator[ServiceBusBroker]:
    with running_broker(QUEUES) as running:
        yield running


@pytest.fixture
async def client(broker: ServiceBusBroker) -> AsyncIterator[ServiceBusClient]:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as sb_client:
        yield sb_client


def dead_letters_of(broker: ServiceBusBroker) -> ServiceBusDeadLetterQueues:
    return ServiceBusDeadLetterQueues(
        ServiceBusClient.from_connection_string(broker.connection_string),
        receive_wait_seconds=0.5,
        busy_wait_seconds=5.0,
    )


@pytest.fixture
async def triage(broker: ServiceBusBroker) -> AsyncIterator[ServiceBusDeadLetterQueues]:
    adapter = dead_letters_of(broker)
    yield adapter
    await adapter.close()


async def send(client: ServiceBusClient, queue_name: str, message: ServiceBusMessage) -> None:
    async with client.get_queue_sender(queue_name) as sender:
        await sender.send_messages(message, timeout=TIMEOUT_SECONDS)


async def receive_one(client: ServiceBusClient, queue_name: str, what: str) -> None:
    """Receive the next message of `queue_name` and settle it as `what` says."""
    async with client.get_queue_receiver(queue_name, prefetch_count=0) as receiver:
        received = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert received, f"nothing to receive on {queue_name}"
        message = received[0]
        if what == "abandon":
            await receiver.abandon_message(message)
        else:
            await receiver.dead_letter_message(
                message, reason="OrderConflict", error_description=what
            )


async def dead_letter(
    client: ServiceBusClient, queue_name: str, message_id: str, description: str
) -> None:
    """A message the consumer dead-letters with a reason, as submission does on S3."""
    await send(
        client,
        queue_name,
        ServiceBusMessage(
            order_body(message_id),
            message_id=message_id,
            application_properties={"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"},
        ),
    )
    await receive_one(client, queue_name, description)


async def exhaust(client: ServiceBusClient, queue_name: str, message_id: str) -> None:
    """A message whose every delivery fails: MaxDeliveryCount (2) abandons."""
    await send(client, queue_name, ServiceBusMessage(order_body(message_id), message_id=message_id))
    for _ in range(2):
        await receive_one(client, queue_name, "abandon")


async def peek_all(
    client: ServiceBusClient, queue_name: str, *, dead: bool = False
) -> list[ServiceBusReceivedMessage]:
    receiver = client.get_queue_receiver(
        queue_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER if dead else None
    )
    async with receiver:
        return list(
            await receiver.peek_messages(
                max_message_count=100, sequence_number=1, timeout=TIMEOUT_SECONDS
            )
        )


# -- triage ---------------------------------------------------------------------------------


async def test_the_list_shows_reason_and_description_and_no_personal_data(
    client: ServiceBusClient, triage: ServiceBusDeadLetterQueues
) -> None:
    await dead_letter(client, ORDERS, "order-1", "order 'order-1' already exists")
    await exhaust(client, ORDERS, "order-2")

    letters = await list_dead_letters(triage, ORDERS, consumed=CONSUMED)

    assert [(d.message_id, d.reason, d.description) for d in letters] == [
        ("order-1", "OrderConflict", "order 'order-1' already exists"),
        (
            "order-2",
            MAX_DELIVERY_COUNT_EXCEEDED,
            "Message could not be consumed after 2 delivery attempts.",
        ),
    ]
    first = letters[0]
    assert first.queue == ORDERS
    assert first.order_id == "order-1"
    assert first.application_properties == {"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
    assert first.body_preview == (
        "JSON object, keys: currency, customerId, items, orderId, schemaVersion; orderId=order-1"
    )
    assert all("customer-secret" not in repr(d) for d in letters)
    assert first.enqueued_at is not None
    assert letters[1].delivery_count == 2
    # A peek: nothing was consumed, and paging goes on after the last number.
    again = await list_dead_letters(triage, ORDERS, consumed=CONSUMED, max_count=1)
    assert [d.sequence_number for d in again] == [first.sequence_number]
    rest = await list_dead_letters(
        triage, ORDERS, consumed=CONSUMED, after_sequence=first.sequence_number
    )
    assert [d.message_id for d in rest] == ["order-2"]


async def test_a_queue_the_app_does_not_consume_is_refused(
    triage: ServiceBusDeadLetterQueues,
) -> None:
    with pytest.raises(UnknownQueue, match="orders, agent-responses"):
        await list_dead_letters(triage, ALERTS, consumed=CONSUMED)
    with pytest.raises(UnknownQueue):
        await resubmit_dead_letter(triage, ALERTS, 1, consumed=CONSUMED)
    with pytest.raises(UnknownQueue):
        await discard_dead_letter(triage, ALERTS, 1, consumed=CONSUMED)


async def test_a_resubmitted_dead_letter_is_back_in_its_queue_past_duplicate_detection(
    client: ServiceBusClient, triage: ServiceBusDeadLetterQueues
) -> None:
    """The original id is still in the queue's duplicate-detection history: a copy under it
    would vanish. The derived id arrives; the copy keeps the body and properties."""
    await dead_letter(client, ORDERS, "order-1", "conflict")
    [letter] = await list_dead_letters(triage, ORDERS, consumed=CONSUMED)

    assert await resubmit_dead_letter(triage, ORDERS, letter.sequence_number, consumed=CONSUMED)

    assert await list_dead_letters(triage, ORDERS, consumed=CONSUMED) == []
    async with client.get_queue_receiver(ORDERS, prefetch_count=0) as receiver:
        [copy] = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        await receiver.complete_message(copy)
    assert copy.message_id == f"order-1:resubmitted:{letter.sequence_number}"
    assert json.loads(b"".join(copy.body)) == json.loads(order_body("order-1"))
    properties = copy.application_properties or {}
    assert properties[RESUBMITTED_FROM_PROPERTY.encode()] == letter.sequence_number
    assert properties[b"traceparent"] == f"00-{'1' * 32}-{'2' * 16}-01".encode()
    assert b"DeadLetterReason" not in properties
    # It is gone: a second resubmit or a discard finds nothing.
    assert not await resubmit_dead_letter(triage, ORDERS, letter.sequence_number, consumed=CONSUMED)
    assert not await discard_dead_letter(triage, ORDERS, letter.sequence_number, consumed=CONSUMED)


async def test_a_discarded_dead_letter_is_gone_and_the_others_stay(
    client: ServiceBusClient, triage: ServiceBusDeadLetterQueues, caplog: pytest.LogCaptureFixture
) -> None:
    for order_id in ("order-1", "order-2", "order-3"):
        await dead_letter(client, ORDERS, order_id, "conflict")
    letters = await list_dead_letters(triage, ORDERS, consumed=CONSUMED)

    # The third: the two before it are locked on the way and handed back unchanged.
    with caplog.at_level(logging.INFO, logger="app.dead_letters"):
        assert await discard_dead_letter(
            triage, ORDERS, letters[2].sequence_number, consumed=CONSUMED
        )

    # C9: the operator's action is one structured record, its fields exportable as such.
    [removed] = [r for r in caplog.records if r.getMessage().startswith("dead letter removed")]
    assert {key: removed.__dict__[key] for key in ("action", "queue", "sequence")} == {
        "action": "discarded",
        "queue": ORDERS,
        "sequence": letters[2].sequence_number,
    }

    left = await list_dead_letters(triage, ORDERS, consumed=CONSUMED)
    assert [d.message_id for d in left] == ["order-1", "order-2"]
    assert await peek_all(client, ORDERS) == []
    assert not await discard_dead_letter(
        triage, ORDERS, letters[2].sequence_number, consumed=CONSUMED
    )
    assert await discard_dead_letter(triage, ORDERS, letters[0].sequence_number, consumed=CONSUMED)
    assert [d.message_id for d in await list_dead_letters(triage, ORDERS, consumed=CONSUMED)] == [
        "order-2"
    ]


@pytest.mark.parametrize("action", ["resubmit", "discard"])
async def test_two_operators_racing_on_one_dead_letter_succeed_exactly_once(
    broker: ServiceBusBroker, client: ServiceBusClient, action: str
) -> None:
    await dead_letter(client, ORDERS, "order-0", "conflict")
    await dead_letter(client, ORDERS, "order-1", "conflict")
    operators = [dead_letters_of(broker), dead_letters_of(broker)]
    try:
        [_, letter] = await list_dead_letters(operators[0], ORDERS, consumed=CONSUMED)
        act = resubmit_dead_letter if action == "resubmit" else discard_dead_letter
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(
                    act(each, ORDERS, letter.sequence_number, consumed=CONSUMED)
                    for each in operators
                )
            ),
            TIMEOUT_SECONDS * 2,
        )
    finally:
        for each in operators:
            await each.close()

    assert sorted(outcomes) == [False, True]
    assert len(await peek_all(client, ORDERS)) == (1 if action == "resubmit" else 0)
    assert [m.message_id for m in await peek_all(client, ORDERS, dead=True)] == ["order-0"]


# -- the watcher ----------------------------------------------------------------------------


class Watcher:
    """One instance of the watcher: its own clients, the store opened from its file."""

    def __init__(self, broker: ServiceBusBroker, store_path: Path) -> None:
        self.states = SqliteStateStore(store_path)
        self.triage = dead_letters_of(broker)
        self.publisher = ServiceBusPublisher(
            ServiceBusClient.from_connection_string(broker.connection_string)
        )

    async def run(
        self, *, peek_limit: int = 1000, consumed: tuple[str, ...] = CONSUMED
    ) -> WatchReport:
        return await asyncio.wait_for(
            watch_dead_letters(
                self.triage,
                self.states,
                self.publisher,
                consumed=consumed,
                alerts_queue=ALERTS,
                now=NOW,
                blocking=blocking_calls.run,
                peek_limit=peek_limit,
            ),
            TIMEOUT_SECONDS * 3,
        )

    async def close(self) -> None:
        await self.publisher.close()
        await self.triage.close()
        self.states.close()


async def watch(broker: ServiceBusBroker, store_path: Path) -> WatchReport:
    """One run of a watcher instance started for it (as after a restart)."""
    watcher = Watcher(broker, store_path)
    try:
        return await watcher.run()
    finally:
        await watcher.close()


@pytest.fixture
async def watcher(broker: ServiceBusBroker, tmp_path: Path) -> AsyncIterator[Watcher]:
    running = Watcher(broker, tmp_path / "state.sqlite3")
    yield running
    await running.close()


async def test_the_watcher_alerts_once_per_dead_letter_across_runs_and_restarts(
    broker: ServiceBusBroker,
    client: ServiceBusClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    reader: InMemoryMetricReader,
) -> None:
    store = tmp_path / "state.sqlite3"
    await dead_letter(client, ORDERS, "order-1", "order 'order-1' already exists")
    await exhaust(client, ORDERS, "order-2")
    await exhaust(client, RESPONSES, "response-1")

    with caplog.at_level(logging.WARNING, logger="app.dead_letters"):
        first = await watch(broker, store)
    assert [(d.queue, d.message_id, d.reason) for d in first.new] == [
        (ORDERS, "order-1", "OrderConflict"),
        (ORDERS, "order-2", MAX_DELIVERY_COUNT_EXCEEDED),
        (RESPONSES, "response-1", MAX_DELIVERY_COUNT_EXCEEDED),
    ]
    alert_lines = [r.getMessage() for r in caplog.records if "operator alert" in r.getMessage()]
    assert len(alert_lines) == 3
    assert alert_lines[1].startswith("operator alert: dead letter order.id=order-2 ")
    for field in (f"queue={ORDERS}", "sequence=2", f"reason={MAX_DELIVERY_COUNT_EXCEEDED}"):
        assert field in alert_lines[1].split()
    assert not any("customer-secret" in line for line in alert_lines)
    alerts = [json.loads(str(m)) for m in await peek_all(client, ALERTS)]
    assert [(a["kind"], a["queue"], a["orderId"], a["deadLetterReason"]) for a in alerts] == [
        ("dead-letter", ORDERS, "order-1", "OrderConflict"),
        ("dead-letter", ORDERS, "order-2", MAX_DELIVERY_COUNT_EXCEEDED),
        ("dead-letter", RESPONSES, "response-1", MAX_DELIVERY_COUNT_EXCEEDED),
    ]

    # Each run is a new instance: the marks come from the store, nothing is alerted twice.
    assert (await watch(broker, store)).new == ()
    assert (await watch(broker, store)).new == ()
    await dead_letter(client, RESPONSES, "response-2", "InvalidAgentResponse")
    assert [d.message_id for d in (await watch(broker, store)).new] == ["response-2"]
    assert len(await peek_all(client, ALERTS)) == 4
    # C9: the dead letters by queue and reason, each counted once across the runs.
    found = points(reader)
    assert total(found, DEADLETTERS, queue=ORDERS) == 2
    assert total(found, DEADLETTERS, queue=ORDERS, reason=MAX_DELIVERY_COUNT_EXCEEDED) == 1
    assert total(found, DEADLETTERS, queue=RESPONSES) == 2
    assert total(found, DEADLETTERS, queue=RESPONSES, reason=MAX_DELIVERY_COUNT_EXCEEDED) == 1


async def test_a_message_dead_lettered_after_newer_ones_is_still_alerted(
    client: ServiceBusClient, watcher: Watcher
) -> None:
    """Dead letters keep their source queue's sequence numbers: an early message that
    exhausts its deliveries late is numbered below a dead letter already reported."""
    for order_id in ("slow", "fast"):
        await send(client, ORDERS, ServiceBusMessage(order_body(order_id), message_id=order_id))
    async with client.get_queue_receiver(ORDERS, prefetch_count=0) as receiver:
        slow, fast = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
        await receiver.dead_letter_message(fast, reason="OrderConflict", error_description="x")
        await receiver.abandon_message(slow)  # its first failed delivery of two
    assert [d.message_id for d in (await watcher.run()).new] == ["fast"]

    await receive_one(client, ORDERS, "abandon")  # the second: "slow" is dead-lettered

    [late] = (await watcher.run()).new
    assert (late.message_id, late.reason) == ("slow", MAX_DELIVERY_COUNT_EXCEEDED)
    assert late.sequence_number < (fast.sequence_number or 0)
    assert (await watcher.run()).new == ()


async def test_a_watch_past_its_peek_limit_goes_on_where_it_stopped(
    client: ServiceBusClient, watcher: Watcher
) -> None:
    for index in range(5):
        await dead_letter(client, ORDERS, f"order-{index}", "conflict")
    reported: list[str | None] = []
    for _ in range(4):
        reported += [d.message_id for d in (await watcher.run(peek_limit=2)).new]
    assert reported == [f"order-{index}" for index in range(5)]


async def test_a_queue_that_cannot_be_read_is_retried_and_the_others_are_still_watched(
    client: ServiceBusClient, watcher: Watcher
) -> None:
    await dead_letter(client, RESPONSES, "response-1", "InvalidAgentResponse")

    report = await watcher.run(consumed=("no-such-queue", RESPONSES))

    assert report.failed == ("no-such-queue",)
    assert [d.message_id for d in report.new] == ["response-1"]
    assert (await watcher.run(consumed=CONSUMED)).new == ()


async def test_a_dead_letter_behind_more_than_the_scan_limit_is_refused_and_nothing_is_lost(
    broker: ServiceBusBroker, client: ServiceBusClient
) -> None:
    for order_id in ("order-1", "order-2"):
        await dead_letter(client, ORDERS, order_id, "conflict")
    narrow = ServiceBusDeadLetterQueues(
        ServiceBusClient.from_connection_string(broker.connection_string),
        receive_wait_seconds=0.5,
        scan_limit=1,
    )
    try:
        letters = await narrow.list(ORDERS)
        with pytest.raises(DeadLetterBusy, match="behind more than 1 others"):
            await narrow.discard(ORDERS, letters[1].sequence_number)
        assert [d.message_id for d in await narrow.list(ORDERS)] == ["order-1", "order-2"]
        assert await narrow.discard(ORDERS, letters[0].sequence_number)
        assert await narrow.discard(ORDERS, letters[1].sequence_number)
    finally:
        await narrow.close()


# -- hostile bodies -------------------------------------------------------------------------

NESTED = b"[" * 5_000 + b"]" * 5_000
"""About 10 KB of brackets: more nesting than a JSON parser recurses through."""


async def dead_letter_amqp(
    client: ServiceBusClient, queue_name: str, message: AmqpAnnotatedMessage
) -> None:
    """A message of any AMQP body section, dead-lettered by its consumer."""
    await send(client, queue_name, message)  # type: ignore[arg-type]
    await receive_one(client, queue_name, "unreadable")


async def poison(client: ServiceBusClient) -> None:
    """Three dead letters no body parser can take: nested brackets, an AMQP value body and
    an AMQP sequence body; then an ordinary one after them."""
    await dead_letter_amqp(
        client, ORDERS, AmqpAnnotatedMessage(data_body=NESTED, properties={"message_id": "p-1"})
    )
    await dead_letter_amqp(
        client,
        ORDERS,
        AmqpAnnotatedMessage(value_body={"orderId": "o-v"}, properties={"message_id": "p-2"}),
    )
    await dead_letter_amqp(
        client,
        ORDERS,
        AmqpAnnotatedMessage(sequence_body=[[1, 2], [3]], properties={"message_id": "p-3"}),
    )
    await dead_letter(client, ORDERS, "order-9", "conflict")


async def test_a_body_no_parser_can_take_is_an_unreadable_row_and_the_queue_still_works_s3(
    client: ServiceBusClient, triage: ServiceBusDeadLetterQueues
) -> None:
    await poison(client)

    letters = await list_dead_letters(triage, ORDERS, consumed=CONSUMED)

    assert [(d.message_id, d.body_preview) for d in letters] == [
        ("p-1", f"{len(NESTED)} bytes, unreadable: nested too deep to parse"),
        ("p-2", "an AMQP value body, unreadable: the app reads data bodies only"),
        ("p-3", "an AMQP sequence body, unreadable: the app reads data bodies only"),
        ("order-9", letters[3].body_preview),
    ]
    assert letters[3].order_id == "order-9"
    # Each can still be resubmitted or discarded: an operator is never stuck with one.
    assert await resubmit_dead_letter(triage, ORDERS, letters[1].sequence_number, consumed=CONSUMED)
    assert await discard_dead_letter(triage, ORDERS, letters[0].sequence_number, consumed=CONSUMED)
    async with client.get_queue_receiver(ORDERS, prefetch_count=0) as receiver:
        [copy] = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        await receiver.complete_message(copy)
    assert copy.body_type is AmqpMessageBodyType.VALUE
    assert copy.body == {b"orderId": b"o-v"}  # the SDK reads AMQP strings as bytes


async def test_a_poison_dead_letter_does_not_blind_the_watcher_s3(
    client: ServiceBusClient, watcher: Watcher
) -> None:
    await poison(client)

    report = await watcher.run()

    assert [d.message_id for d in report.new] == ["p-1", "p-2", "p-3", "order-9"]
    await dead_letter(client, ORDERS, "order-10", "conflict")
    assert [d.message_id for d in (await watcher.run()).new] == ["order-10"]
