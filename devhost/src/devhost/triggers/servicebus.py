"""serviceBusTrigger: consume a queue through the real azure-servicebus SDK, as the host does.

The connection comes from the binding's ``connection`` setting prefix, resolved like the host:
a connection string in ``<prefix>`` (or ``AzureWebJobs<prefix>``), or the identity form
``<prefix>__fullyQualifiedNamespace`` with DefaultAzureCredential. The embedded broker and a
real namespace are used the same way.

Each message becomes an ``azure.functions.ServiceBusMessage`` with every property the worker
fills, or, for a parameter typed with the SDK-type binding, the extension's
``ServiceBusReceivedMessage`` plus a ``ServiceBusMessageActions`` client
(``devhost.triggers.settlement``). A message the function did not settle itself is
completed on success (unless autoCompleteMessages is off) and abandoned on an exception, so
redelivery and max-delivery dead-lettering come from the broker (S1: PeekLock). host.json's
``maxConcurrentCalls`` bounds invocations in flight and ``prefetchCount`` the receiver's
prefetch; locks of running invocations are renewed up to ``maxAutoLockRenewalDuration``.
The invocation's trace parent is the message's ``Diagnostic-Id`` (else ``traceparent``)
application property, as in the host's Service Bus extension (C9).

A listener is supervised as the Functions host supervises its listeners: when its receiver
fails, it is replaced, not left deaf. A failure is any exception from a receive, the open or a
settlement phase that shut the SDK's handler down, or the silent case: the SDK keeps
returning empty batches from a receiver whose AMQP client or link is gone (``receiver_fault``
reads that state). The failed receiver, its client (its connection) and its lock renewer are
closed, and new ones are opened after an exponential backoff with jitter, capped at a few
seconds; every restart is logged with the function, queue, attempt and error, and counted in
``restarts``. The SDK's own retries are off for the listener's client (``retry_total=0``), so
the SDK never reopens a handler behind the listener: reopening from several concurrent
operations is what leaves a receiver half-closed.

Invocations in flight when their receiver fails keep running; their settlements, queued or
made later, fail at once with ``MessageLockLostError`` (the message's lock went with its link,
and settling by delivery id on another link would settle a different message), and the broker
redelivers the message (at-least-once). A listener that cannot start for a reason a retry
cannot fix (its queue does not exist, its credentials are refused, its settings are wrong)
ends with that error, which the host reports in ``listener_failures``; a listener that cannot
reach the namespace keeps retrying, at start-up as later.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import random
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from azure.functions.servicebus import ServiceBusMessage as FunctionMessage
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient, ServiceBusReceiver
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

from devhost.host_config import ServiceBusOptions
from devhost.indexing import IndexedFunction
from devhost.invocation import FunctionInvoker
from devhost.sdk_compat import receiver_fault, receiver_handler
from devhost.settings import AppSettings, SettingsError
from devhost.telemetry import carrier_of_message
from devhost.triggers.settlement import (
    MessageActionsArgument,
    SdkBinding,
    SdkMessageArgument,
    SettlementService,
)

log = logging.getLogger("devhost.servicebus_trigger")

T = TypeVar("T")

RECEIVE_WAIT_SECONDS = 1.0
BUSY_RECEIVE_WAIT_SECONDS = 0.02
STOP_GRACE_SECONDS = 30.0
# pyamqp waits for a settlement's outcome by reading the connection, each read blocking up to
# the socket timeout (0.2 s by default) when another waiter took the frame it needed. A short
# timeout keeps settlements near one round trip when many complete at once.
SOCKET_TIMEOUT_SECONDS = 0.02
# Restarts: the first waits about RESTART_BASE_SECONDS, each further one twice as long, up to
# RESTART_CAP_SECONDS; the wait is drawn from its upper half (jitter), so the listeners of
# one host do not reconnect in step. A receiver that received (even an empty batch) or
# stayed open for RESTART_CAP_SECONDS before it failed starts the count again.
RESTART_BASE_SECONDS = 0.1
RESTART_CAP_SECONDS = 5.0
# Bounds on the SDK calls that wait on the network beyond a receive's own wait: a call that
# outlasts its bound counts as a failed receiver.
OPEN_BOUND_SECONDS = 30.0
RECEIVE_STALL_SECONDS = 30.0
SETTLE_BOUND_SECONDS = 15.0
CLOSE_BOUND_SECONDS = 5.0
# The SDK errors after which no retry can open the receiver (see _cannot_start).
_CANNOT_START = (
    MessagingEntityNotFoundError,
    MessagingEntityDisabledError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)


def service_bus_client(settings: AppSettings, prefix: str, **options: Any) -> ServiceBusClient:
    """The client for a binding's ``connection`` prefix, resolved the way the host does;
    ``options`` go to the client (e.g. ``retry_total``)."""
    connection_string = settings.get(prefix) or settings.get(f"AzureWebJobs{prefix}")
    if connection_string:
        return ServiceBusClient.from_connection_string(connection_string, **options)
    namespace = settings.get(f"{prefix}__fullyQualifiedNamespace")
    if namespace:
        from azure.identity.aio import DefaultAzureCredential

        return ServiceBusClient(namespace, DefaultAzureCredential(), **options)
    raise SettingsError(
        f"Service Bus connection {prefix!r}: set {prefix} to a connection string, or "
        f"{prefix}__fullyQualifiedNamespace for an identity-based connection"
    )


def to_function_message(message: ServiceBusReceivedMessage) -> FunctionMessage:
    """The worker's view of a received message, field for field."""
    raw = message.raw_amqp_message
    if raw.body_type == AmqpMessageBodyType.DATA:
        body = b"".join(message.body)
    elif raw.body_type == AmqpMessageBodyType.VALUE:
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
    else:
        body = str(list(message.body)).encode()
    properties = {
        _text(k): _text(v) if isinstance(v, bytes) else v
        for k, v in (message.application_properties or {}).items()
    }
    expires = (
        message.enqueued_time_utc + message.time_to_live
        if message.enqueued_time_utc and message.time_to_live
        else None
    )
    metadata: dict[str, Any] = {
        "MessageId": message.message_id,
        "DeliveryCount": message.delivery_count,
        "SequenceNumber": message.sequence_number,
        "EnqueuedTimeUtc": _iso(message.enqueued_time_utc),
        "LockToken": str(message.lock_token) if message.lock_token else None,
        "CorrelationId": message.correlation_id,
        "ReplyTo": message.reply_to,
        "ContentType": message.content_type,
        "Label": message.subject,
        "To": message.to,
        "UserProperties": properties,
        "ApplicationProperties": properties,
    }
    return FunctionMessage(
        body=body,
        trigger_metadata=metadata,
        application_properties=properties,
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        dead_letter_error_description=message.dead_letter_error_description,
        dead_letter_reason=message.dead_letter_reason,
        dead_letter_source=message.dead_letter_source,
        delivery_count=message.delivery_count,
        enqueued_sequence_number=message.enqueued_sequence_number,
        enqueued_time_utc=message.enqueued_time_utc,
        expires_at_utc=expires,
        label=message.subject,
        locked_until=message.locked_until_utc,
        lock_token=str(message.lock_token) if message.lock_token else None,
        message_id=message.message_id or "",
        partition_key=message.partition_key,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
        scheduled_enqueue_time_utc=message.scheduled_enqueue_time_utc,
        sequence_number=message.sequence_number,
        session_id=message.session_id,
        state=int(message.state),
        subject=message.subject,
        time_to_live=message.time_to_live,
        to=message.to,
        user_properties=properties,
    )


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def restart_delay(attempt: int) -> float:
    """The wait before restart number ``attempt`` (1, 2, ...) of a run of failures."""
    ceiling = min(RESTART_CAP_SECONDS, RESTART_BASE_SECONDS * 2.0 ** min(attempt - 1, 16))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def _cannot_start(error: BaseException) -> bool:
    """Whether a listener that never opened should stop instead of retrying: the entity is
    missing or disabled, the credentials are refused, or the error is not a Service Bus or
    network one at all (bad settings, a bug). A namespace out of reach is retried."""
    if isinstance(error, _CANNOT_START):
        return True
    return not isinstance(error, ServiceBusError | OSError | TimeoutError | ReceiverLost)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".replace("\n", " ")


class ReceiverLost(Exception):
    """The receiver failed without an exception of its own (see ``receiver_fault``)."""


@dataclass(eq=False)
class _Link:
    """One open receiver of a listener, with the client (connection) and lock renewer that
    belong to it; a restart replaces all three."""

    client: ServiceBusClient
    receiver: ServiceBusReceiver
    renewer: AutoLockRenewer
    handler: object
    opened_at: float
    lost: str | None = None
    worked: bool = False
    """Whether a receive on it succeeded."""
    settlements: list[_Settlement] = field(default_factory=list)

    def fault(self) -> str | None:
        if self.lost is None:
            self.lost = receiver_fault(self.receiver, self.handler)
        return self.lost

    def check(self) -> None:
        fault = self.fault()
        if fault is not None:
            raise ReceiverLost(fault)


@dataclass(frozen=True, eq=False)
class _Settlement:
    operation: str
    message: ServiceBusReceivedMessage
    options: dict[str, Any]
    done: asyncio.Future[None]


def _lock_lost(message: ServiceBusReceivedMessage, why: str) -> MessageLockLostError:
    return MessageLockLostError(
        message=(
            f"cannot settle message sequence={message.sequence_number}: {why}; its lock went "
            "with the receiver's link and the broker redelivers it"
        )
    )


class ServiceBusTrigger:
    def __init__(
        self,
        function: IndexedFunction,
        invoker: FunctionInvoker,
        settings: AppSettings,
        options: ServiceBusOptions,
    ) -> None:
        if str(function.trigger.get("cardinality", "one")).lower() == "many":
            raise ValueError(
                f"function {function.name!r}: batch (cardinality many) Service Bus triggers "
                "are not supported by the devhost"
            )
        if function.trigger.get("isSessionsEnabled"):
            raise ValueError(f"function {function.name!r}: session triggers are not supported")
        self._function = function
        self._invoker = invoker
        self._settings = settings
        self._options = options
        self._queue = str(function.trigger["queueName"])
        self._sdk = SdkBinding.of(function)
        self._tasks: set[asyncio.Task[None]] = set()
        self._link: _Link | None = None
        self._opened_once = False
        # Wakes the receive loop when it is full of invocations and one finishes or settles.
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.listening = asyncio.Event()
        """Set while a receiver's link is open: messages sent from then on reach it."""
        self.restarts = 0
        """How many times a failed receiver was replaced (or a replacement attempted)."""
        self.last_error: BaseException | None = None
        """The failure behind the latest restart."""

    @property
    def name(self) -> str:
        return self._function.name

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def in_flight(self) -> int:
        """Invocations running now (the host's idle check reads it)."""
        return len(self._tasks)

    async def run(self) -> None:
        """Receive until ``stop``, replacing the receiver whenever it fails."""
        try:
            await self._supervise()
            await self._finish_in_flight()
        finally:
            if self._link is not None:
                await self._retire(self._link)
            await self._drain()

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            link: _Link | None = None
            try:
                link = await self._open()
                if link is None:
                    return  # stopped while opening
                await self._consume(link)
                return  # stopped
            except Exception as error:
                if not self._opened_once and _cannot_start(error):
                    raise
                recovered = link is not None and (
                    link.worked or self._now() - link.opened_at >= RESTART_CAP_SECONDS
                )
                failures = 1 if recovered else failures + 1
                if link is not None:
                    await self._retire(link)
                if self._stopping.is_set():
                    return
                self.restarts += 1
                self.last_error = error
                delay = restart_delay(failures)
                log.warning(
                    "service bus listener restarting function=%s queue=%s attempt=%d "
                    "restarts=%d delay_s=%.2f error=%s",
                    self.name,
                    self._queue,
                    failures,
                    self.restarts,
                    delay,
                    _describe(error),
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)

    async def _open(self) -> _Link | None:
        """A new client, receiver and lock renewer, or None if ``stop`` came first."""
        connection = str(self._function.trigger["connection"])
        # No SDK retries: after an error the SDK would reopen the handler from whichever
        # operation comes next, several at once; the supervisor replaces it instead.
        client = service_bus_client(self._settings, connection, retry_total=0)
        receiver = client.get_queue_receiver(
            self._queue,
            receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
            prefetch_count=self._options.prefetch_count,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
        )
        try:
            opened = await self._unless_stopped(receiver.__aenter__(), OPEN_BOUND_SECONDS)
        except BaseException:
            await _close_quietly(receiver.close(), client.close())
            raise
        if opened is None:
            await _close_quietly(receiver.close(), client.close())
            return None
        renewer = AutoLockRenewer(
            max_lock_renewal_duration=self._options.max_auto_lock_renewal.total_seconds()
        )
        link = _Link(client, receiver, renewer, receiver_handler(receiver), self._now())
        self._link = link
        if self._opened_once:
            log.info(
                "service bus listener reopened function=%s queue=%s restarts=%d",
                self.name,
                self._queue,
                self.restarts,
            )
        self._opened_once = True
        self.listening.set()
        return link

    async def _unless_stopped(self, work: Awaitable[T], bound: float) -> T | None:
        """``work``'s result; None (``work`` cancelled) if ``stop`` comes first; TimeoutError
        if it takes longer than ``bound`` seconds."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopping}, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if not task.cancelled():
            return task.result()
        if self._stopping.is_set():
            return None
        raise TimeoutError(f"opening the receiver of {self._queue!r} took over {bound:.0f}s")

    async def _consume(self, link: _Link) -> None:
        # This task is the receiver's only user besides the lock renewer. pyamqp waits for each
        # settlement's outcome by reading the connection, and a receive in flight holds those
        # reads for its whole wait: a settlement beside it takes 100-200 ms instead of a
        # fraction of a millisecond. So handlers queue their settlements here, and the loop
        # applies them between receives, which stay short while invocations are running.
        receiver = link.receiver
        while not self._stopping.is_set():
            await self._apply_settlements(link)
            link.check()
            free = self._options.max_concurrent_calls - len(self._tasks)
            if free <= 0:
                self._wake.clear()
                if not link.settlements:
                    await self._wake.wait()
                continue
            if self._tasks:
                wait, wanted = BUSY_RECEIVE_WAIT_SECONDS, free
            else:
                # Idle, a receive for a batch holds the first message that arrives while it
                # waits up to 0.2 s more for others (the SDK's further-pull time). The host's
                # message pump dispatches each message as it arrives; asking for one does that,
                # and the busy receives that follow collect the rest of a burst.
                wait, wanted = RECEIVE_WAIT_SECONDS, 1
            async with asyncio.timeout(wait + RECEIVE_STALL_SECONDS):
                messages = await receiver.receive_messages(
                    max_message_count=wanted, max_wait_time=wait
                )
            # Messages from a receiver that failed are not handed out: their locks went with
            # the link, and the broker delivers them again to the next receiver.
            link.check()
            link.worked = True
            for message in messages:
                link.renewer.register(receiver, message)
                task = asyncio.create_task(self._handle(message, link))
                self._tasks.add(task)
                task.add_done_callback(self._finished)

    async def stop(self) -> None:
        """Stop receiving; invocations in flight finish and settle, then the receiver closes.

        Cancelling the listener instead would interrupt a receive mid-read, after which
        closing the link waits on frames that were already consumed. A listener waiting to
        restart stops at once.
        """
        self._stopping.set()
        self._wake.set()

    async def _finish_in_flight(self) -> None:
        deadline = self._now() + STOP_GRACE_SECONDS
        while self._tasks and self._now() < deadline:
            await self._settle_queued()
            self._wake.clear()
            if self._link is None or not self._link.settlements:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), BUSY_RECEIVE_WAIT_SECONDS * 10)
        await self._settle_queued()

    async def _settle_queued(self) -> None:
        link = self._link
        if link is None:
            return
        try:
            await self._apply_settlements(link)
            link.check()
        except ReceiverLost:
            await self._retire(link)

    async def _apply_settlements(self, link: _Link) -> None:
        # No receive is in flight here, so the settlements may await their outcomes together:
        # one after another, each would wait a full turn of a busy event loop.
        while link.settlements:
            link.check()
            pending, link.settlements = link.settlements, []
            applying = [asyncio.ensure_future(self._apply(link, s)) for s in pending]
            _, late = await asyncio.wait(applying, timeout=SETTLE_BOUND_SECONDS)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
                for settlement in pending:
                    if not settlement.done.done():
                        settlement.done.set_exception(
                            _lock_lost(settlement.message, "the settlement did not finish")
                        )
                link.lost = f"settlements took over {SETTLE_BOUND_SECONDS:.0f}s"
                link.check()

    @staticmethod
    async def _apply(link: _Link, settlement: _Settlement) -> None:
        operation, message = settlement.operation, settlement.message
        method = "renew_message_lock" if operation == "renew" else f"{operation}_message"
        try:
            await getattr(link.receiver, method)(message, **settlement.options)
        except Exception as error:
            fault = link.fault()
            if fault is not None and not isinstance(error, ServiceBusError):
                # The SDK refuses a settlement on a handler it shut down with a ValueError;
                # the caller learns that the lock is gone, as from any other failed link.
                lost = _lock_lost(message, fault)
                lost.__cause__ = error
                error = lost
            if not settlement.done.done():
                settlement.done.set_exception(error)
        else:
            if not settlement.done.done():
                settlement.done.set_result(None)

    async def _settle_on(
        self, link: _Link, operation: str, message: ServiceBusReceivedMessage, **options: Any
    ) -> None:
        """Settle (or renew) a message through the receive loop of the receiver that received
        it; raises what the SDK raised, or MessageLockLostError once that receiver failed."""
        if link is not self._link or link.lost is not None:
            raise _lock_lost(message, link.lost or "the receiver that received it was replaced")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        link.settlements.append(_Settlement(operation, message, options, done))
        self._wake.set()
        await done

    async def _retire(self, link: _Link) -> None:
        """Close a failed (or stopping) receiver with its client and lock renewer; settlements
        still queued on it fail."""
        if link.lost is None:
            link.lost = "the receiver was closed"
        if self._link is link:
            self._link = None
            self.listening.clear()
        pending, link.settlements = link.settlements, []
        for settlement in pending:
            if not settlement.done.done():
                settlement.done.set_exception(_lock_lost(settlement.message, link.lost))
        await _close_quietly(link.renewer.close(), link.receiver.close(), link.client.close())

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    async def _handle(self, message: ServiceBusReceivedMessage, link: _Link) -> None:
        settle = functools.partial(self._settle_on, link)
        arguments, token = self._arguments(message, settle)
        try:
            await self._invoker.invoke(
                self._function, arguments, carrier_of_message(message.application_properties)
            )
        except Exception:
            if not self._settled_by_function(token):
                await self._settle_quietly(settle, "abandon", message)
            return
        if self._settled_by_function(token):
            return
        if self._options.auto_complete_messages and self._function.trigger.get(
            "autoCompleteMessages", True
        ):
            await self._settle_quietly(settle, "complete", message)

    def _arguments(
        self, message: ServiceBusReceivedMessage, settle: Any
    ) -> tuple[dict[str, Any], str | None]:
        trigger = str(self._function.trigger["name"])
        if self._sdk.message_parameter is None and not self._sdk.actions_parameters:
            return {trigger: to_function_message(message)}, None
        token = SettlementService.shared().hold(message, asyncio.get_running_loop(), settle)
        arguments: dict[str, Any] = {
            trigger: SdkMessageArgument.of(message)
            if self._sdk.message_parameter
            else to_function_message(message)
        }
        for name in self._sdk.actions_parameters:
            arguments[name] = MessageActionsArgument()
        return arguments, token

    @staticmethod
    def _settled_by_function(token: str | None) -> bool:
        if token is None:
            return False
        held = SettlementService.shared().release(token)
        return held is not None and held.settled

    async def _settle_quietly(
        self, settle: Any, operation: str, message: ServiceBusReceivedMessage
    ) -> None:
        try:
            await settle(operation, message)
        except ServiceBusError as error:
            # The lock is gone (expired or the link dropped): the broker redelivers the message,
            # which is what at-least-once delivery promises; the function must be idempotent.
            log.warning(
                "could not %s message function=%s sequence=%s: %s",
                operation,
                self.name,
                message.sequence_number,
                error,
            )

    async def _drain(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()


async def _close_quietly(*closing: Awaitable[None]) -> None:
    """Close SDK objects of a failed receiver, each bounded: closing a link on a dead
    connection may wait for frames that never come, or raise."""
    for close in closing:
        try:
            async with asyncio.timeout(CLOSE_BOUND_SECONDS):
                await close
        except Exception as error:
            log.debug("closing a failed receiver: %s", _describe(error))
