"""The agents' responses on their way to the scheduler, lost, duplicated, late and reordered
(E3, E4, E6): at-least-once delivery is the norm, never exactly-once.

In a chaos run the agents answer on a queue of their own (``AGENT_RESPONSES_QUEUE`` of the
devhost that runs them); this relay moves each response to the app's agent-responses queue
and, for some, decides otherwise, by a draw seeded with the run's seed and the message id
(the same message meets the same fate in every run with that seed):
- ``lost``: never forwarded (the orchestrator's timer wins, E6; the supervisor retries, U4);
- ``duplicated``: forwarded twice, once under its own id (Service Bus duplicate detection,
  E4) and once under a new id (the scheduler takes the same event twice);
- ``late``: forwarded after a draw over ``LATE_SECONDS``, often past the step's deadline
  (E6); its event says how long the relay held it (``held_seconds``, from its receipt to its
  forwarding). The first late answer of a run whose operation has a hold in
  ``past_deadline`` is held that long instead, so every run with a late answer has one that
  came after its deadline for sure, not by the draw;
- ``reordered``: a batch forwarded in reverse order.
Each event names the operation of the request answered (``do`` or ``undo``, from the
response's message id), except a reordered batch's, which may hold both.
A response is completed on the agents' queue only after it was forwarded, so a relay that
loses its broker forwards again rather than dropping anything it did not choose to drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender

from domain.agent_messages import RESPONSE_SUFFIX, UNDO_SUFFIX, AgentOperation

LOST = 0.02
DUPLICATED = 0.03
LATE = 0.03
REORDERED_BATCH = 0.2
LATE_SECONDS = (3.0, 15.0)
RECEIVE_BATCH = 50
RECEIVE_WAIT_SECONDS = 0.2
SEND_TIMEOUT_SECONDS = 10.0
RECONNECT_PAUSE_SECONDS = 1.0


@dataclass
class RelayEvent:
    t: float
    kind: str
    message_id: str | None
    operation: str | None = None
    """``do`` or ``undo``: what the response answers; None for a reordered batch."""
    held_seconds: float | None = None
    """For a late response, from its receipt to its forwarding (None until forwarded)."""


@dataclass(frozen=True, eq=False)
class Held:
    """A late response, held until ``due`` (monotonic seconds); each is itself alone."""

    due: float
    received: float
    event: RelayEvent
    message: ServiceBusMessage


@dataclass
class ResponseRelay:
    connection_string: Callable[[], str]
    source: str
    target: str
    seed: int
    clock: Callable[[], float]
    past_deadline: Mapping[str, float] = field(default_factory=dict)
    """By operation (``do``, ``undo``), a hold longer than that operation's deadline."""
    forwarded: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    events: list[RelayEvent] = field(default_factory=list)
    _late: list[Held] = field(default_factory=list)
    _held_past_deadline: bool = False

    def _fate(self, message_id: str | None) -> str:
        draw = random.Random(f"chaos-relay-{self.seed}-{message_id}").random()
        if draw < LOST:
            return "lost"
        if draw < LOST + DUPLICATED:
            return "duplicated"
        if draw < LOST + DUPLICATED + LATE:
            return "late"
        return "forwarded"

    def _note(self, kind: str, message_id: str | None, *, batch: bool = False) -> RelayEvent:
        self.counts[kind] += 1
        operation = None if batch else answered_operation(message_id)
        event = RelayEvent(
            round(self.clock(), 2), kind, message_id, None if operation is None else operation.value
        )
        self.events.append(event)
        return event

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._relay(stop)
            except Exception:
                await asyncio.sleep(RECONNECT_PAUSE_SECONDS)

    async def _relay(self, stop: asyncio.Event) -> None:
        client = ServiceBusClient.from_connection_string(self.connection_string())
        async with (
            client,
            client.get_queue_receiver(self.source) as receiver,
            client.get_queue_sender(self.target) as sender,
        ):
            while not stop.is_set():
                await self._send_due(sender)
                batch = await receiver.receive_messages(
                    max_message_count=RECEIVE_BATCH, max_wait_time=RECEIVE_WAIT_SECONDS
                )
                if not batch:
                    continue
                outgoing: list[ServiceBusMessage] = []
                for message in batch:
                    outgoing += self._decide(message)
                if (
                    len(outgoing) > 1
                    and random.Random(
                        f"chaos-relay-order-{self.seed}-{batch[0].message_id}"
                    ).random()
                    < REORDERED_BATCH
                ):
                    outgoing.reverse()
                    self._note("reordered", batch[0].message_id, batch=True)
                if outgoing:
                    await sender.send_messages(outgoing, timeout=SEND_TIMEOUT_SECONDS)
                    self.forwarded += len(outgoing)
                for message in batch:
                    await receiver.complete_message(message)

    def _decide(self, message: ServiceBusReceivedMessage) -> list[ServiceBusMessage]:
        copy = _copy(message, message.message_id)
        fate = self._fate(message.message_id)
        if fate == "lost":
            self._note("lost", message.message_id)
            return []
        if fate == "duplicated":
            self._note("duplicated", message.message_id)
            return [copy, _copy(message, message.message_id), _copy(message, None)]
        if fate == "late":
            event = self._note("late", message.message_id)
            now = time.monotonic()
            self._late.append(Held(now + self._hold(event), now, event, copy))
            return []
        return [copy]

    def _hold(self, event: RelayEvent) -> float:
        past = self.past_deadline.get(event.operation or "")
        if past is not None and not self._held_past_deadline:
            self._held_past_deadline = True
            return past
        return random.Random(f"chaos-relay-late-{event.message_id}").uniform(*LATE_SECONDS)

    async def _send_due(self, sender: ServiceBusSender) -> None:
        now = time.monotonic()
        due = [held for held in self._late if held.due <= now]
        if due:
            await self._forward(sender, due)

    async def _forward(self, sender: ServiceBusSender, held: list[Held]) -> None:
        await sender.send_messages([h.message for h in held], timeout=SEND_TIMEOUT_SECONDS)
        sent = time.monotonic()
        for h in held:
            h.event.held_seconds = round(sent - h.received, 2)
        self.forwarded += len(held)
        self._late = [h for h in self._late if h not in held]

    async def drain(self) -> None:
        """Forward the late responses still held (at the end of a run)."""
        if not self._late:
            return
        client = ServiceBusClient.from_connection_string(self.connection_string())
        with contextlib.suppress(Exception):
            async with client, client.get_queue_sender(self.target) as sender:
                await self._forward(sender, list(self._late))


def _copy(message: ServiceBusReceivedMessage, message_id: str | None) -> ServiceBusMessage:
    """The response as sent again; ``message_id`` None gives the copy an id of its own."""
    return ServiceBusMessage(
        b"".join(message.body),
        message_id=message_id if message_id is not None else f"{message.message_id}:copy",
        correlation_id=message.correlation_id,
        subject=message.subject,
        application_properties=message.application_properties,
    )


def answered_operation(message_id: str | None) -> AgentOperation | None:
    """The operation of the request an agent response answers, from the response's message
    id (`AgentResponse.message_id`); None for an id of another shape."""
    if message_id is None or not message_id.endswith(RESPONSE_SUFFIX):
        return None
    request_id = message_id.removesuffix(RESPONSE_SUFFIX)
    return AgentOperation.UNDO if request_id.endswith(UNDO_SUFFIX) else AgentOperation.DO
