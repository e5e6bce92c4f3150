"""Shared helpers of the end-to-end tests: the real local pipeline seen by a client app.

`running_pipeline` starts what `tools.demo.pipeline.local_pipeline` starts (embedded broker,
the simulated services, devhost running ``function_app:app``) and hands the test an
`E2E`: a Service Bus client that sends orders like an app and reads what an app or an operator
would read (status replies, operator alerts, dead letters), plus the app's own stores through
``bootstrap.services()`` (the devhost runs the app in this process) and the Durable engine's
instance statuses. Every wait is bounded and every SDK call carries a timeout.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus import ServiceBusSubQueue as SubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver, ServiceBusSender
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from devhost.clock import SkippingClock
from devhost.durable.history import EventType
from devhost.durable.status import OrchestrationStatus
from devhost.testing import eventually_true

import bootstrap
from domain.contracts import Order
from domain.records import StateRecord, parse_utc
from tools.demo.pipeline import DEMO_REPLY_QUEUE, Pipeline, local_pipeline
from tools.simulators.services import FaultPlan, Role, SimulatedServices

ORDERS = "orders"
AGENT_RESPONSES = "agent-responses"
ALERTS = "operator-alerts"
REPLIES = DEMO_REPLY_QUEUE

SDK_TIMEOUT_SECONDS = 10.0
WAIT_BOUND_SECONDS = 45.0
SEND_BATCH = 100
_RECEIVE_SLICE_SECONDS = 0.5

NEVER = "0 0 0 1 1 *"
"""An NCRONTAB schedule that does not fire during a test (midnight of January 1st)."""
QUIET_TIMERS = {"DEADLETTER_WATCH_SCHEDULE": NEVER}
"""Timers the tests run themselves (`DevHost.invoke`) when they want them: the dead-letter
watcher's alerts would otherwise join the operator alerts a test counts at a moment of the
clock's choosing."""
_WATCH_INTERVAL_SECONDS = 0.01

QUICK_RECOVERY = {
    "STEP_TIMEOUT_SECONDS": "10",
    "CLAIM_TIMEOUT_SECONDS": "20",
    "RETRY_DELAY_SECONDS": "0",
    "MAX_FAILURES": "3",
    "LONG_WAIT_AFTER_FAILURES": "3",
}
"""Settings of the tests whose attempts expire (``virtual_time``): an expired attempt is
retried at once and the supervisor gives up at the third, without U5's longer wait (which
would start at the same count). On skipping time a deadline passes as soon as nothing is
left to happen before it, so a step's 10 s (the local pipeline's) cost no real time and are
more than a healthy step takes on a loaded machine."""


def order_body(
    order_id: str,
    *,
    items: Sequence[tuple[str, int]] = (("sku-1", 2),),
    customer_id: str = "c-1",
    currency: str = "EUR",
    schema_version: object = 1,
) -> str:
    """A submission message body (contracts.md), valid unless the arguments break it."""
    return json.dumps(
        {
            "schemaVersion": schema_version,
            "orderId": order_id,
            "customerId": customer_id,
            "items": [{"sku": sku, "quantity": quantity} for sku, quantity in items],
            "currency": currency,
        }
    )


T = TypeVar("T")


async def within(work: Awaitable[T], stage: str, bound: float) -> T:
    """`work`'s result, or a failure that names the stage that did not finish in time."""
    try:
        return await asyncio.wait_for(work, bound)
    except TimeoutError:
        pytest.fail(f"{stage} did not finish within {bound:.0f}s")


async def submit_orders(
    connection_string: str, order_ids: Sequence[str], *, bound: float = SDK_TIMEOUT_SECONDS
) -> None:
    """Send an order per id to ORDERS_QUEUE as a client app does (S1): the id as MessageId,
    replies to the demo's queue. Opening, each batch and the close are bounded by `bound`."""
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        sender = client.get_queue_sender(ORDERS)
        await within(sender.__aenter__(), "opening the orders sender", bound)
        try:
            for start in range(0, len(order_ids), SEND_BATCH):
                batch = [
                    ServiceBusMessage(order_body(i), message_id=i, reply_to=DEMO_REPLY_QUEUE)
                    for i in order_ids[start : start + SEND_BATCH]
                ]
                await sender.send_messages(batch, timeout=bound)
        finally:
            await within(sender.close(), "closing the orders sender", bound)


def record_summary(order_id: str, record: StateRecord | None) -> str:
    """What an operator would read of one order's record, for a failure message."""
    if record is None:
        return f"{order_id}: no record"
    return (
        f"{order_id}: {record.process_state.value} after {record.failure_count} failed attempts,"
        f" last error {record.last_error!r}"
    )


@dataclass(frozen=True)
class Delivered:
    """A message as a receiving app or operator sees it."""

    message_id: str | None
    subject: str | None
    correlation_id: str | None
    raw: bytes
    """The data body; empty for a body in an AMQP value or sequence section."""
    dead_letter_reason: str | None
    dead_letter_description: str | None

    @property
    def body(self) -> dict[str, Any]:
        decoded = json.loads(self.raw)
        assert isinstance(decoded, dict), f"expected a JSON object, got {self.raw!r}"
        return decoded

    @classmethod
    def of(cls, message: ServiceBusReceivedMessage) -> Delivered:
        body = message.body
        if message.body_type is not AmqpMessageBodyType.DATA:
            raw = b""
        else:
            raw = body if isinstance(body, bytes) else b"".join(body)
        return cls(
            message_id=None if message.message_id is None else str(message.message_id),
            subject=message.subject,
            correlation_id=message.correlation_id,
            raw=raw,
            dead_letter_reason=message.dead_letter_reason,
            dead_letter_description=message.dead_letter_error_description,
        )


@dataclass(frozen=True)
class Backlog:
    """One sample of the state store's backlog (C5): the unfinished records (Pending,
    Processing, Compensating) and the running ones among them (Processing, Compensating)."""

    unfinished: int
    running: int


class E2E:
    """One running pipeline and a client of it.

    Links are opened once per queue and kept, as a long-running app would: opening and
    closing an AMQP link per call would make every step of a test pay a round of attaches.
    """

    def __init__(self, pipeline: Pipeline, client: ServiceBusClient) -> None:
        self.pipeline = pipeline
        self._client = client
        self._senders: dict[str, ServiceBusSender] = {}
        self._receivers: dict[tuple[str, bool, ServiceBusReceiveMode], ServiceBusReceiver] = {}
        self.sent_by_client: collections.Counter[str] = collections.Counter()

    async def _sender(self, queue: str) -> ServiceBusSender:
        if queue not in self._senders:
            sender = self._client.get_queue_sender(queue)
            await asyncio.wait_for(sender.__aenter__(), SDK_TIMEOUT_SECONDS)
            self._senders[queue] = sender
        return self._senders[queue]

    async def _receiver(
        self, queue: str, dead_letters: bool, mode: ServiceBusReceiveMode
    ) -> ServiceBusReceiver:
        """An open receiver: a link first opened by a short receive would share its budget."""
        key = (queue, dead_letters, mode)
        if key not in self._receivers:
            receiver = self._client.get_queue_receiver(
                queue, sub_queue=SubQueue.DEAD_LETTER if dead_letters else None, receive_mode=mode
            )
            await asyncio.wait_for(receiver.__aenter__(), SDK_TIMEOUT_SECONDS)
            self._receivers[key] = receiver
        return self._receivers[key]

    async def close(self) -> None:
        links = [*self._senders.values(), *self._receivers.values()]
        await asyncio.wait_for(
            asyncio.gather(*(link.close() for link in links)), SDK_TIMEOUT_SECONDS
        )

    # -- a client app ---------------------------------------------------------------------

    async def submit(
        self, body: str | bytes, *, message_id: str, reply_to: str | None = REPLIES
    ) -> None:
        """Send a submission to ORDERS_QUEUE the way a client app does (S1)."""
        await self.send(ORDERS, body, message_id=message_id, reply_to=reply_to)

    async def send(
        self,
        queue: str,
        body: str | bytes,
        *,
        message_id: str,
        reply_to: str | None = None,
        correlation_id: str | None = None,
    ) -> None:
        message = ServiceBusMessage(
            body, message_id=message_id, reply_to=reply_to, correlation_id=correlation_id
        )
        await self.send_amqp(queue, message)

    async def send_amqp(
        self, queue: str, message: ServiceBusMessage | AmqpAnnotatedMessage
    ) -> None:
        """Send `message` as a client app would, whatever AMQP body section it has."""
        await (await self._sender(queue)).send_messages(message, timeout=SDK_TIMEOUT_SECONDS)
        self.sent_by_client[queue] += 1

    async def receive(
        self,
        queue: str,
        *,
        until: Callable[[list[Delivered]], bool],
        what: str,
        dead_letters: bool = False,
        bound: float = WAIT_BOUND_SECONDS,
    ) -> list[Delivered]:
        """Take messages off `queue` (or its dead-letter queue) until `until(taken)` holds."""
        taken: list[Delivered] = []
        deadline = time.monotonic() + bound
        receiver = await self._receiver(
            queue, dead_letters, ServiceBusReceiveMode.RECEIVE_AND_DELETE
        )
        while not until(taken):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {bound:.0f}s waiting for {what}; got {[m.raw for m in taken]}"
                )
            batch = await receiver.receive_messages(
                max_message_count=50, max_wait_time=_RECEIVE_SLICE_SECONDS
            )
            taken.extend(Delivered.of(message) for message in batch)
        return taken

    async def statuses(
        self, order_id: str, until_status: str, *, bound: float = WAIT_BOUND_SECONDS
    ) -> list[Delivered]:
        """Status replies for `order_id` on the reply queue, up to the first `until_status`
        (for tests with one order on the queue: replies about others are taken and dropped)."""
        replies = await self.receive(
            REPLIES,
            until=lambda taken: any(
                m.body["orderId"] == order_id and m.body["status"] == until_status for m in taken
            ),
            what=f"status {until_status!r} of order {order_id!r} on {REPLIES}",
            bound=bound,
        )
        return [m for m in replies if m.body["orderId"] == order_id]

    async def count_of(
        self, queue: str, count: int, *, dead_letters: bool = False
    ) -> list[Delivered]:
        """The messages of a queue once at least `count` arrived (a test that expects exactly
        `count` sees any extra one taken in the same batch)."""
        where = f"the dead-letter queue of {queue}" if dead_letters else queue
        return await self.receive(
            queue,
            until=lambda taken: len(taken) >= count,
            what=f"{count} message(s) on {where}",
            dead_letters=dead_letters,
        )

    @contextlib.asynccontextmanager
    async def held_dead_letter(self, queue: str) -> AsyncIterator[int]:
        """The first dead letter of `queue`, locked by another operator's receiver for the
        block: its sequence number; then it is abandoned, back as it was."""
        receiver = self._client.get_queue_receiver(
            queue, sub_queue=SubQueue.DEAD_LETTER, prefetch_count=0
        )
        async with receiver:
            taken = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert taken, f"no dead letter of {queue} to hold"
            try:
                yield int(taken[0].sequence_number or 0)
            finally:
                await receiver.abandon_message(taken[0])

    async def peek(self, queue: str, *, dead_letters: bool = False) -> list[Delivered]:
        """What a queue holds now, without taking it."""
        receiver = await self._receiver(queue, dead_letters, ServiceBusReceiveMode.PEEK_LOCK)
        peeked = await receiver.peek_messages(
            max_message_count=100, sequence_number=1, timeout=SDK_TIMEOUT_SECONDS
        )
        return [Delivered.of(message) for message in peeked]

    async def pending(self, queue: str, *, dead_letters: bool = False) -> list[Delivered]:
        """Everything on a queue not yet taken: what it holds, plus what an open receiving
        link of this client may already have been handed (a pre-settled link can be)."""
        held = await self.peek(queue, dead_letters=dead_letters)
        key = (queue, dead_letters, ServiceBusReceiveMode.RECEIVE_AND_DELETE)
        if key in self._receivers:
            handed = await self._receivers[key].receive_messages(
                max_message_count=50, max_wait_time=_RECEIVE_SLICE_SECONDS
            )
            held.extend(Delivered.of(message) for message in handed)
        return held

    async def drained(self, queue: str, what: str, *, bound: float = WAIT_BOUND_SECONDS) -> None:
        """Wait until the app's trigger has settled every message of `queue`."""

        async def empty() -> bool:
            return await self.peek(queue) == []

        await eventually_true(empty, f"{queue} drained: {what}", bound)

    # -- the app's side, as an operator would inspect it --------------------------------

    async def record(self, order_id: str) -> StateRecord | None:
        return await asyncio.to_thread(bootstrap.services().states.get, order_id)

    async def stored_order(self, order_id: str) -> Order | None:
        return await asyncio.to_thread(bootstrap.services().orders.get, order_id)

    async def wait_for_record(
        self,
        order_id: str,
        condition: Callable[[StateRecord], bool],
        what: str,
        *,
        bound: float = WAIT_BOUND_SECONDS,
    ) -> StateRecord:
        found: list[StateRecord] = []

        async def holds() -> bool:
            record = await self.record(order_id)
            if record is not None and condition(record):
                found.append(record)
                return True
            return False

        await eventually_true(holds, f"state record of {order_id!r}: {what}", bound)
        return found[-1]

    @contextlib.asynccontextmanager
    async def watching(self, order_id: str) -> AsyncIterator[list[StateRecord]]:
        """Every distinct version of a state record while the block runs (polled every 50 ms;
        the states these tests look for last seconds)."""
        seen: list[StateRecord] = []

        async def watch() -> None:
            while True:
                record = await self.record(order_id)
                if record is not None and (not seen or seen[-1].etag != record.etag):
                    seen.append(record)
                await asyncio.sleep(_WATCH_INTERVAL_SECONDS)

        watcher = asyncio.create_task(watch())
        try:
            yield seen
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    @contextlib.asynccontextmanager
    async def watching_backlog(self) -> AsyncIterator[list[Backlog]]:
        """The state store's backlog (Pending, Processing, Compensating records, C5) and its
        running part while the block runs, each change in order (polled every 50 ms, counted
        up to 10,000)."""
        seen: list[Backlog] = []
        states = bootstrap.services().states

        def count() -> Backlog:
            return Backlog(
                unfinished=states.count_backlog(at_most=10_000),
                running=states.count_running(at_most=10_000),
            )

        async def watch() -> None:
            while True:
                counted = await asyncio.to_thread(count)
                if not seen or seen[-1] != counted:
                    seen.append(counted)
                await asyncio.sleep(_WATCH_INTERVAL_SECONDS)

        watcher = asyncio.create_task(watch())
        try:
            yield seen
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def instance(self, instance_id: str) -> OrchestrationStatus | None:
        engine = self.pipeline.host.engine
        assert engine is not None, "the devhost's Durable engine is not running"
        return await engine.get_status(instance_id, show_history=True)

    async def finished_instance(
        self, instance_id: str, *, bound: float = WAIT_BOUND_SECONDS
    ) -> OrchestrationStatus:
        found: list[OrchestrationStatus] = []

        async def finished() -> bool:
            status = await self.instance(instance_id)
            if status is not None and status.runtime_status.is_terminal:
                found.append(status)
                return True
            return False

        await eventually_true(finished, f"orchestration {instance_id} finished", bound)
        return found[-1]

    def app_sent(self) -> collections.Counter[str]:
        """Messages the app sent per queue, in this process's event loop (the devhost's)."""
        return collections.Counter(bootstrap.publisher().sent)


def scheduled_activities(status: OrchestrationStatus) -> list[str]:
    """Names of the activities an orchestration instance scheduled, in order."""
    return [
        str(event["Name"])
        for event in status.history or []
        if event["EventType"] == EventType.TASK_SCHEDULED
    ]


def episodes(status: OrchestrationStatus) -> int:
    """How many episodes (replays that took new events) an orchestration instance ran."""
    history = status.history or []
    return sum(1 for event in history if event["EventType"] == EventType.ORCHESTRATOR_STARTED)


def timer_deadlines(status: OrchestrationStatus) -> list[datetime]:
    """When each durable timer an orchestration instance created was due, in order (E2)."""
    return [
        parse_utc(str(event["FireAt"]))
        for event in status.history or []
        if event["EventType"] == EventType.TIMER_CREATED
    ]


def raised_events(status: OrchestrationStatus) -> list[dict[str, Any]]:
    """The external events (agent responses) an orchestration instance received."""
    return [
        json.loads(event["Input"])
        for event in status.history or []
        if event["EventType"] == EventType.EVENT_RAISED and event.get("Input")
    ]


@contextlib.asynccontextmanager
async def _running(
    work_dir: Path,
    settings: Mapping[str, str] | None,
    virtual_time: bool,
    **pipeline_options: Any,
) -> AsyncIterator[E2E]:
    """`local_pipeline` with `pipeline_options`, the tests' quiet timers and a client."""
    chosen = {**QUIET_TIMERS, **(settings or {})}
    # The machine's time at its pace, which `_moving` makes jump.
    clock = SkippingClock() if virtual_time else None
    async with local_pipeline(
        work_dir, settings=chosen, clock=clock, **pipeline_options
    ) as pipeline:
        client = ServiceBusClient.from_connection_string(pipeline.connection_string)
        async with client, _moving(pipeline, clock):
            e2e = E2E(pipeline, client)
            try:
                yield e2e
            finally:
                await e2e.close()
        assert pipeline.host.listener_failures == []


STOCK_REQUESTS = "stock-requests"
PAYMENT_REQUESTS = "payment-requests"
SHIPPING_REQUESTS = "shipping-requests"
AGENT_REQUESTS = (STOCK_REQUESTS, PAYMENT_REQUESTS, SHIPPING_REQUESTS)
STEP_SERVICES = ("stock", "payment", "shipping")


def running_pipeline(
    work_dir: Path,
    *,
    service_faults: Mapping[str, FaultPlan] | None = None,
    settings: Mapping[str, str] | None = None,
    worker_processes: int = 0,
    virtual_time: bool = False,
) -> contextlib.AbstractAsyncContextManager[E2E]:
    """The pipeline with a client, and fault plans for the services by name (``stock``,
    ``payment``, ``shipping``); on a clean exit, no trigger listener may have died.

    ``worker_processes`` > 0 runs the app in that many language worker processes, each with
    this process's log level, logging to its standard error and exporting telemetry as the
    settings say (the app's counters and metrics are then in the workers).

    ``virtual_time``: the host, the app and the services run on a SkippingClock, which jumps
    to the next wake-up (a durable timer, the starter's or the supervisor's tick) as soon as
    the pipeline has settled (`settled`): the waits for step deadlines cost no real time, and
    the deadlines can be long enough that no healthy step outlives one on a slow machine."""
    return _running(
        work_dir,
        settings,
        virtual_time,
        service_faults=service_faults,
        worker_processes=worker_processes,
    )


VIRTUAL_STEP_REAL_SECONDS = 0.05
"""Real time between two moves of virtual time: each state the pipeline settles in lasts at
least this long, so the tests' watchers (which read every 0.01 s) see it."""
_SETTLED_RECHECK_SECONDS = 0.02


async def settled(pipeline: Pipeline) -> bool:
    """Nothing can happen in the pipeline before virtual time moves: no orchestration work
    runnable, no message waiting in a queue the app listens to, and each invocation in
    flight waiting on a call a simulated service holds (a hang or a latency fault), whose
    end the app's own timeout decides."""
    host = pipeline.host
    if host.has_runnable_orchestration_work():
        return False
    if host.invocations_in_flight() > pipeline.services.held_requests():
        return False
    counts = await pipeline.active_counts()
    return all(counts.get(queue, 0) == 0 for queue in host.listened_queues())


@contextlib.asynccontextmanager
async def _moving(pipeline: Pipeline, clock: SkippingClock | None) -> AsyncIterator[None]:
    """While the block runs, move `clock` to the host's next wake-up each time the pipeline
    has settled, twice in a row a moment apart (a message between two functions is either in
    a queue or in an invocation; the second look covers a call being released)."""
    if clock is None:
        yield
        return

    async def move() -> None:
        host = pipeline.host
        while True:
            await asyncio.sleep(VIRTUAL_STEP_REAL_SECONDS)
            if not await settled(pipeline):
                continue
            await asyncio.sleep(_SETTLED_RECHECK_SECONDS)
            moment = host.next_wakeup()
            if moment is not None and await settled(pipeline):
                clock.advance_to(moment)

    mover = asyncio.create_task(move())
    try:
        yield
    finally:
        mover.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await mover


async def compensation_began_at(e2e: E2E, order_id: str) -> datetime:
    """When the order began compensating (C1, C2): its state record's CompensationStartedAt,
    set by the write that moved it to Compensating (a step failing for good, or the
    supervisor giving up) and kept after the compensation ends. Before it no undo may start;
    at or after it no action may (`side_effects_against_compensation`)."""
    record = await e2e.record(order_id)
    assert record is not None, f"no state record of {order_id!r}"
    assert record.compensation_started_at is not None, (
        f"the state record of {order_id!r} ({record.process_state.value}) has no "
        "CompensationStartedAt: it never began compensating"
    )
    return record.compensation_started_at


def side_effects_against_compensation(
    services: SimulatedServices, order_id: str, began_at: datetime
) -> list[str]:
    """What each step service's ledger shows against C1 and E7 for `order_id`, as sentences:
    an action (reservation, payment, shipment) performed at or after `began_at`, when the
    order had begun compensating, and an undo (a compensation, or a tombstone of a key
    undone with nothing to undo) before it. Empty when every side effect kept its turn."""
    problems: list[str] = []
    for service in STEP_SERVICES:
        for entry in services.ledger_entries(service, order_id):
            at = datetime.fromisoformat(entry.at)
            if entry.role is Role.ACTION and at >= began_at:
                problems.append(
                    f"{service}: {entry.kind.value} {entry.resource_id} of attempt "
                    f"{entry.attempt} performed at {entry.at}, after compensation began at "
                    f"{began_at.isoformat()}"
                )
            if entry.role is Role.COMPENSATION and at < began_at:
                problems.append(
                    f"{service}: {entry.kind.value} of {entry.resource_id} at {entry.at}, "
                    f"before compensation began at {began_at.isoformat()}"
                )
        for tombstone in services.tombstones(service, order_id):
            if datetime.fromisoformat(tombstone.at) < began_at:
                problems.append(
                    f"{service}: key {tombstone.idempotency_key} undone at {tombstone.at}, "
                    f"before compensation began at {began_at.isoformat()}"
                )
    return problems
