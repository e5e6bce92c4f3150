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
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import inspect
import logging
from typing import Any

from azure.functions.servicebus import ServiceBusMessage as FunctionMessage
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiveMode
from azure.servicebus.aio import AutoLockRenewer, ServiceBusClient, ServiceBusReceiver
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import ServiceBusError

from devhost.host_config import ServiceBusOptions
from devhost.indexing import IndexedFunction
from devhost.invocation import FunctionInvoker
from devhost.settings import AppSettings, SettingsError
from devhost.triggers.settlement import (
    MessageActionsArgument,
    SdkBinding,
    SdkMessageArgument,
    SettlementService,
)

log = logging.getLogger("devhost.servicebus_trigger")

RECEIVE_WAIT_SECONDS = 1.0
BUSY_RECEIVE_WAIT_SECONDS = 0.02
STOP_GRACE_SECONDS = 30.0
# pyamqp waits for a settlement's outcome by reading the connection, each read blocking up to
# the socket timeout (0.2 s by default) when another waiter took the frame it needed. A short
# timeout keeps settlements near one round trip when many complete at once.
SOCKET_TIMEOUT_SECONDS = 0.02


def service_bus_client(settings: AppSettings, prefix: str) -> ServiceBusClient:
    """The client for a binding's ``connection`` prefix, resolved the way the host does."""
    connection_string = settings.get(prefix) or settings.get(f"AzureWebJobs{prefix}")
    if connection_string:
        return ServiceBusClient.from_connection_string(connection_string)
    namespace = settings.get(f"{prefix}__fullyQualifiedNamespace")
    if namespace:
        from azure.identity.aio import DefaultAzureCredential

        return ServiceBusClient(namespace, DefaultAzureCredential())
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


def _check_parameters_are_bound(function: IndexedFunction, sdk: SdkBinding) -> None:
    """Refuse at start-up a parameter nothing fills, instead of failing every message."""
    bound = {str(binding["name"]) for binding in function.bindings}
    bound.update(sdk.actions_parameters)
    bound.add("context")
    signature = inspect.signature(function.user_function)
    for name, parameter in signature.parameters.items():
        if parameter.default is inspect.Parameter.empty and name not in bound:
            raise ValueError(
                f"function {function.name!r}: parameter {name!r} is not filled by any binding "
                "(annotate it as ServiceBusMessageActions, or declare a binding for it)"
            )


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


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
        _check_parameters_are_bound(function, self._sdk)
        self._tasks: set[asyncio.Task[None]] = set()
        self._settlements: list[
            tuple[str, ServiceBusReceivedMessage, dict[str, Any], asyncio.Future[None]]
        ] = []
        # Wakes the receive loop when it is full of invocations and one finishes or settles.
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.listening = asyncio.Event()
        """Set once the receiver's link is open: messages sent from then on reach it."""

    @property
    def name(self) -> str:
        return self._function.name

    @property
    def in_flight(self) -> int:
        """Invocations running now (the host's idle check reads it)."""
        return len(self._tasks)

    async def run(self) -> None:
        connection = str(self._function.trigger["connection"])
        async with (
            service_bus_client(self._settings, connection) as client,
            client.get_queue_receiver(
                self._queue,
                receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                prefetch_count=self._options.prefetch_count,
                socket_timeout=SOCKET_TIMEOUT_SECONDS,
            ) as receiver,
            AutoLockRenewer(
                max_lock_renewal_duration=self._options.max_auto_lock_renewal.total_seconds()
            ) as renewer,
        ):
            self.listening.set()
            try:
                await self._consume(receiver, renewer)
                await self._finish_in_flight(receiver)
            finally:
                await self._drain()

    async def _consume(self, receiver: ServiceBusReceiver, renewer: AutoLockRenewer) -> None:
        # This task is the receiver's only user. pyamqp waits for each settlement's outcome by
        # reading the connection, and a receive in flight holds those reads for its whole wait:
        # a settlement beside it takes 100-200 ms instead of a fraction of a millisecond. So
        # handlers queue their settlements here, and the loop applies them between receives,
        # which stay short while invocations are running.
        while not self._stopping.is_set():
            await self._apply_settlements(receiver)
            free = self._options.max_concurrent_calls - len(self._tasks)
            if free <= 0:
                self._wake.clear()
                if not self._settlements:
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
            messages = await receiver.receive_messages(max_message_count=wanted, max_wait_time=wait)
            for message in messages:
                renewer.register(receiver, message)
                task = asyncio.create_task(self._handle(message))
                self._tasks.add(task)
                task.add_done_callback(self._finished)

    async def stop(self) -> None:
        """Stop receiving; invocations in flight finish and settle, then the receiver closes.

        Cancelling the listener instead would interrupt a receive mid-read, after which
        closing the link waits on frames that were already consumed.
        """
        self._stopping.set()
        self._wake.set()

    async def _finish_in_flight(self, receiver: ServiceBusReceiver) -> None:
        deadline = asyncio.get_running_loop().time() + STOP_GRACE_SECONDS
        while self._tasks and asyncio.get_running_loop().time() < deadline:
            await self._apply_settlements(receiver)
            self._wake.clear()
            if not self._settlements:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), BUSY_RECEIVE_WAIT_SECONDS * 10)
        await self._apply_settlements(receiver)

    async def _apply_settlements(self, receiver: ServiceBusReceiver) -> None:
        # No receive is in flight here, so the settlements may await their outcomes together:
        # one after another, each would wait a full turn of a busy event loop.
        while self._settlements:
            pending, self._settlements = self._settlements, []
            await asyncio.gather(*(self._apply(receiver, *settlement) for settlement in pending))

    @staticmethod
    async def _apply(
        receiver: ServiceBusReceiver,
        operation: str,
        message: ServiceBusReceivedMessage,
        options: dict[str, Any],
        done: asyncio.Future[None],
    ) -> None:
        method = "renew_message_lock" if operation == "renew" else f"{operation}_message"
        try:
            await getattr(receiver, method)(message, **options)
        except Exception as error:
            done.set_exception(error)
        else:
            done.set_result(None)

    async def settle(
        self, operation: str, message: ServiceBusReceivedMessage, **options: Any
    ) -> None:
        """Settle (or renew) a message through the receive loop; raises what the SDK raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settlements.append((operation, message, options, done))
        self._wake.set()
        await done

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    async def _handle(self, message: ServiceBusReceivedMessage) -> None:
        arguments, token = self._arguments(message)
        try:
            await self._invoker.invoke(self._function, arguments)
        except Exception:
            if not self._settled_by_function(token):
                await self._settle_quietly("abandon", message)
            return
        if self._settled_by_function(token):
            return
        if self._options.auto_complete_messages and self._function.trigger.get(
            "autoCompleteMessages", True
        ):
            await self._settle_quietly("complete", message)

    def _arguments(self, message: ServiceBusReceivedMessage) -> tuple[dict[str, Any], str | None]:
        trigger = str(self._function.trigger["name"])
        if self._sdk.message_parameter is None and not self._sdk.actions_parameters:
            return {trigger: to_function_message(message)}, None
        token = SettlementService.shared().hold(message, asyncio.get_running_loop(), self.settle)
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

    async def _settle_quietly(self, operation: str, message: ServiceBusReceivedMessage) -> None:
        try:
            await self.settle(operation, message)
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
