"""The demo's client app: submits orders and listens on its own reply queue (S1, R1, R2).

It behaves like a real submitting app, including the mistakes real apps make: besides the
valid orders it sends exact resends (which must be accepted idempotently), conflicting
duplicates (same OrderID, other items: dead-lettered, S3) and malformed messages
(dead-lettered with a reason). Which order gets which treatment follows the seed. A
conflicting copy goes out once its original was acknowledged (``received``), as an app that
changes an order it already placed would: sent together, the copy could be processed first
and the original would be the one refused, which S3 allows but the demo would not show.

Each submission is sent inside a span of its own (C9): the Service Bus SDK stamps the message
with that span's ``Diagnostic-Id`` / ``traceparent`` (once azure-core tracing is on), so the
order's whole trace starts at the client. Without a tracer provider the spans are no-ops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver, ServiceBusSender
from azure.servicebus.exceptions import MessageLockLostError
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

SEND_TIMEOUT_SECONDS = 30.0
SEND_BATCH = 50
# How long conflicting copies wait for their originals' `received` before going out anyway.
ACKNOWLEDGED_BOUND_SECONDS = 60.0
# A receive holds its first message until its wait ends or 0.2 s pass (the SDK's further-pull
# time): a short wait keeps that from adding to the latency the client measures.
LISTEN_WAIT_SECONDS = 0.05
IN_PROGRESS = "in-progress"
REJECTED = "rejected"
TERMINAL_STATUSES = frozenset({"completed", "failed", "compensated", "compensation-failed"})
MALFORMED_BODIES = (
    b"this is not JSON",
    b'{"schemaVersion": 1, "orderId": "no items", "customerId": "c", "items": [], '
    b'"currency": "EUR"}',
    b'{"schemaVersion": 99, "orderId": "future", "customerId": "c", '
    b'"items": [{"sku": "a", "quantity": 1}], "currency": "EUR"}',
    b'{"schemaVersion": 1, "orderId": "bad-currency", "customerId": "c", '
    b'"items": [{"sku": "a", "quantity": 1}], "currency": "euro"}',
)


def order_body(order_id: str, rng: random.Random, *, sku_prefix: str = "sku") -> dict[str, Any]:
    items = [
        {"sku": f"{sku_prefix}-{rng.randrange(1, 500)}", "quantity": rng.randrange(1, 5)}
        for _ in range(rng.randrange(1, 4))
    ]
    return {
        "schemaVersion": 1,
        "orderId": order_id,
        "customerId": f"customer-{rng.randrange(1, 50)}",
        "items": items,
        "currency": rng.choice(["EUR", "USD", "GBP"]),
    }


@dataclass(frozen=True)
class Outgoing:
    body: bytes
    message_id: str
    kind: str  # "order", "resend", "conflict" or "malformed"
    order_id: str | None


@dataclass
class Workload:
    """Everything the client will send, decided up front from the seed."""

    order_ids: list[str]
    messages: list[Outgoing]

    @classmethod
    def generate(
        cls,
        orders: int,
        seed: int,
        *,
        resend_rate: float = 0.03,
        conflict_rate: float = 0.02,
        malformed_rate: float = 0.02,
    ) -> Workload:
        rng = random.Random(seed)
        order_ids = [f"order-{seed}-{index:05d}" for index in range(orders)]
        messages: list[Outgoing] = []
        for order_id in order_ids:
            body = json.dumps(order_body(order_id, rng)).encode()
            messages.append(Outgoing(body, order_id, "order", order_id))
            if rng.random() < resend_rate:
                messages.append(Outgoing(body, f"{order_id}:resend", "resend", order_id))
            if rng.random() < conflict_rate:
                other = json.dumps(order_body(order_id, rng, sku_prefix="other")).encode()
                messages.append(Outgoing(other, f"{order_id}:conflict", "conflict", order_id))
        for index in range(max(1, round(orders * malformed_rate)) if malformed_rate else 0):
            body = MALFORMED_BODIES[index % len(MALFORMED_BODIES)]
            messages.append(Outgoing(body, f"malformed-{seed}-{index}", "malformed", None))
        return cls(order_ids, messages)

    def count(self, kind: str) -> int:
        return sum(1 for message in self.messages if message.kind == kind)


@dataclass
class ClientLog:
    """What the client saw: when each order went out and which statuses came back."""

    submitted_at: dict[str, float] = field(default_factory=dict)
    finished_at: dict[str, float] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    steps: Counter[str] = field(default_factory=Counter)
    """`in-progress` statuses by the step they name."""
    rejected: list[str] = field(default_factory=list)
    """Orders answered `rejected` (admission control, C5): never stored, so never lost."""

    @property
    def answered(self) -> int:
        """Orders that heard their last word: a final status, or `rejected`."""
        return len(set(self.finished_at) | set(self.rejected))

    def to_document(self) -> dict[str, Any]:
        """The log as JSON-ready data (the client process hands it to the demo this way)."""
        return {
            "submitted_at": self.submitted_at,
            "finished_at": self.finished_at,
            "statuses": dict(self.statuses),
            "steps": dict(self.steps),
            "rejected": self.rejected,
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> ClientLog:
        return cls(
            submitted_at={str(k): float(v) for k, v in document["submitted_at"].items()},
            finished_at={str(k): float(v) for k, v in document["finished_at"].items()},
            statuses=Counter({str(k): int(v) for k, v in document["statuses"].items()}),
            steps=Counter({str(k): int(v) for k, v in document.get("steps", {}).items()}),
            rejected=[str(order_id) for order_id in document.get("rejected", [])],
        )

    def latencies_ms(self) -> list[float]:
        return [
            (self.finished_at[order] - self.submitted_at[order]) * 1000
            for order in self.finished_at
            if order in self.submitted_at
        ]


def _submission_span(message: Outgoing) -> Span:
    """The client's span of one submission, the root of that order's trace."""
    attributes: dict[str, str] = {"submission.kind": message.kind}
    if message.order_id is not None:
        attributes["order.id"] = message.order_id
    return trace.get_tracer("demo.client").start_span(
        "order.submit", kind=SpanKind.PRODUCER, attributes=attributes
    )


class DemoClient:
    """The client app: ``open``, then ``listen`` and ``submit`` together, then ``close``."""

    def __init__(self, connection_string: str, orders_queue: str, reply_queue: str) -> None:
        self._client = ServiceBusClient.from_connection_string(connection_string)
        self._orders_queue = orders_queue
        self._reply_queue = reply_queue
        self.log = ClientLog()
        self.sent = 0
        self._seen: set[str] = set()
        self._received: set[str] = set()
        self._heard = asyncio.Event()
        self._links = contextlib.AsyncExitStack()
        self._sender: ServiceBusSender | None = None
        self._receiver: ServiceBusReceiver | None = None

    async def open(self) -> None:
        """Connect and attach both links, so that the first send measures the pipeline and
        not the client's own connection set-up."""
        self._sender = await self._links.enter_async_context(
            self._client.get_queue_sender(self._orders_queue)
        )
        self._receiver = await self._links.enter_async_context(
            self._client.get_queue_receiver(self._reply_queue, prefetch_count=100)
        )

    async def submit(self, workload: Workload) -> None:
        """Send the workload; conflicting copies once their originals were acknowledged."""
        later = [message for message in workload.messages if message.kind == "conflict"]
        await self._send([message for message in workload.messages if message.kind != "conflict"])
        if later:
            originals = {message.order_id for message in later if message.order_id is not None}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._acknowledged(originals), ACKNOWLEDGED_BOUND_SECONDS)
            await self._send(later)

    async def _acknowledged(self, order_ids: set[str]) -> None:
        while not order_ids <= self._received:
            self._heard.clear()
            await self._heard.wait()

    async def _send(self, messages: list[Outgoing]) -> None:
        sender = self._sender
        if sender is None:
            raise RuntimeError("open() the demo client first")
        for start in range(0, len(messages), SEND_BATCH):
            chunk = messages[start : start + SEND_BATCH]
            now = time.monotonic()
            for message in chunk:
                if message.kind == "order" and message.order_id is not None:
                    self.log.submitted_at[message.order_id] = now
            batch = await sender.create_message_batch()
            spans: list[Span] = []
            try:
                for message in chunk:
                    span = _submission_span(message)
                    spans.append(span)
                    with trace.use_span(span, end_on_exit=False):
                        batch.add_message(
                            ServiceBusMessage(
                                message.body,
                                message_id=message.message_id,
                                reply_to=self._reply_queue,
                            )
                        )
                await sender.send_messages(batch, timeout=SEND_TIMEOUT_SECONDS)
            finally:
                for span in spans:
                    span.end()
            self.sent += len(chunk)

    async def listen(self, stop: asyncio.Event) -> None:
        """Collect status messages until ``stop`` is set."""
        receiver = self._receiver
        if receiver is None:
            raise RuntimeError("open() the demo client first")
        while not stop.is_set():
            batch = await receiver.receive_messages(
                max_message_count=100, max_wait_time=LISTEN_WAIT_SECONDS
            )
            for message in batch:
                # Status messages have stable ids (R2): a redelivery is counted once.
                message_id = message.message_id
                if message_id is None or message_id not in self._seen:
                    if message_id is not None:
                        self._seen.add(message_id)
                    self._record(json.loads(b"".join(message.body)))
                # A lock that expired under load: the message comes back and is seen already.
                with contextlib.suppress(MessageLockLostError):
                    await receiver.complete_message(message)

    def _record(self, status: dict[str, Any]) -> None:
        name = str(status.get("status"))
        self.log.statuses[name] += 1
        if name == IN_PROGRESS:
            self.log.steps[str(status.get("step"))] += 1
        order_id = str(status.get("orderId"))
        if name == "received":
            self._received.add(order_id)
            self._heard.set()
        if name == REJECTED and order_id not in self.log.rejected:
            self.log.rejected.append(order_id)
        if name in TERMINAL_STATUSES and order_id not in self.log.finished_at:
            self.log.finished_at[order_id] = time.monotonic()

    async def close(self) -> None:
        await self._links.aclose()
        await self._client.close()
