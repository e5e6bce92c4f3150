"""Service Bus SDK-type bindings: the received message and the host's settlement service.

On Azure, ``azurefunctions-extensions-bindings-servicebus`` lets a Python function take an
``azure.servicebus.ServiceBusReceivedMessage`` and a ``ServiceBusMessageActions`` client, and
settle the message itself (complete, abandon, dead-letter with a reason, defer). The host
hands the worker the message as "model binding data" (the lock token in .NET Guid byte
order, a marker, then the AMQP-encoded message), and the actions client calls the host's
gRPC ``Settlement`` service, whose address the worker receives on its command line.

The devhost does the same: it encodes the message it received the way the host does, lets
the extension's own converter decode it, and serves ``Settlement`` over gRPC on loopback. One
service per process, since the extension's actions client is a process-wide singleton that
reads the address once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import threading
import types
import uuid
from collections.abc import Callable, Coroutine
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.exceptions import ServiceBusError
from azurefunctions.extensions.base import Datum
from azurefunctions.extensions.bindings.protos import settlement_pb2_grpc
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusConverter,
    ServiceBusMessageActions,
)
from google.protobuf import empty_pb2

from devhost.indexing import IndexedFunction
from devhost.invocation import DeferredArgument
from devhost.sdk_compat import TYPE, VALUE, AMQPTypes, encode_payload, received_amqp_message

LOCK_TOKEN_MARKER = b"x-opt-lock-token"
SETTLE_TIMEOUT_SECONDS = 60.0
MAX_GRPC_MESSAGE = 2**31 - 1
SETTLE_THREADS = 128


@dataclass(frozen=True)
class SdkBinding:
    """Which parameters of a function take the SDK-type message and the actions client."""

    message_parameter: str | None
    actions_parameters: tuple[str, ...]

    @classmethod
    def of(cls, function: IndexedFunction) -> SdkBinding:
        """As the worker indexed the function: the host sends the trigger's message as model
        binding data when the trigger supports deferred binding (an SDK-type parameter), and
        the worker fills its settlement client argument."""
        properties = function.trigger.get("properties") or {}
        deferred = bool(properties.get("SupportsDeferredBinding"))
        return cls(
            message_parameter=str(function.trigger["name"]) if deferred else None,
            actions_parameters=(function.settlement_parameter,)
            if function.settlement_parameter
            else (),
        )


@dataclass(frozen=True)
class SdkMessageArgument(DeferredArgument):
    """The SDK-type message as the host hands it to the worker: model binding data."""

    content: bytes

    @classmethod
    def of(cls, message: ServiceBusReceivedMessage) -> SdkMessageArgument:
        """Encode a received message as the host does: the lock token in .NET Guid byte
        order, a marker, then the AMQP-encoded message."""
        if message.lock_token is None:
            raise ValueError("SDK-type bindings need messages received in PEEK_LOCK mode")
        token = uuid.UUID(str(message.lock_token))
        raw = received_amqp_message(message)
        typed = raw._replace(message_annotations=_typed_annotations(raw.message_annotations or {}))
        encoded = bytes(encode_payload(bytearray(), typed))
        return cls(token.bytes_le + LOCK_TOKEN_MARKER + encoded)

    def materialize(self) -> Any:
        """The message exactly as the extension's own converter decodes it."""
        binding_data = types.SimpleNamespace(
            version="1.0",
            source="AzureServiceBusReceivedMessage",
            content_type="application/octet-stream",
            content=self.content,
        )
        datum = Datum(type="model_binding_data", value=binding_data)
        return ServiceBusConverter.decode(datum, trigger_metadata=None, pytype=None)


class MessageActionsArgument(DeferredArgument):
    """The extension's actions client (a process-wide singleton holding a gRPC channel)."""

    def materialize(self) -> Any:
        return ServiceBusMessageActions.get_instance()


_TIMESTAMP_ANNOTATIONS = frozenset(
    {b"x-opt-enqueued-time", b"x-opt-locked-until", b"x-opt-scheduled-enqueue-time"}
)


def _typed_annotations(annotations: dict[Any, Any]) -> dict[Any, Any]:
    """Annotations with the AMQP types decoding dropped (timestamps and longs were ints)."""
    typed: dict[Any, Any] = {}
    for key, value in annotations.items():
        name = key if isinstance(key, bytes) else str(key).encode()
        if isinstance(value, dt.datetime):
            value = int(value.timestamp() * 1000)
        if isinstance(value, int) and not isinstance(value, bool):
            kind = AMQPTypes.timestamp if name in _TIMESTAMP_ANNOTATIONS else AMQPTypes.long
            value = {TYPE: kind, VALUE: value}
        typed[key] = value
    return typed


# Settles one message through the trigger that holds it: operation is "complete", "abandon",
# "dead_letter", "defer" or "renew" (lock renewal, which does not settle).
Settle = Callable[..., Coroutine[Any, Any, None]]


@dataclass
class HeldMessage:
    message: ServiceBusReceivedMessage
    loop: asyncio.AbstractEventLoop
    settle: Settle
    settled: bool = False


class SettlementService:
    """The host's gRPC ``Settlement`` service over the messages the triggers hold."""

    _instance: SettlementService | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._held: dict[str, HeldMessage] = {}
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.port = 0
        self.worker_arguments: list[str] = []

    @classmethod
    def shared(cls) -> SettlementService:
        """The process-wide service, started on first use and announced to the worker."""
        with cls._instance_lock:
            if cls._instance is None:
                service = cls()
                service._start()
                cls._instance = service
            return cls._instance

    def _start(self) -> None:
        # Each call holds a server thread until the trigger's loop has applied it, so the pool
        # must cover every invocation that may settle at once (maxConcurrentCalls per trigger).
        workers = futures.ThreadPoolExecutor(
            max_workers=SETTLE_THREADS, thread_name_prefix="settle"
        )
        server = grpc.server(workers)
        settlement_pb2_grpc.add_SettlementServicer_to_server(_Servicer(self), server)
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        # What the host passes on the worker's command line; the actions client reads it,
        # in this process and in language worker processes.
        self.worker_arguments = [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--functions-grpc-max-message-length",
            str(MAX_GRPC_MESSAGE),
        ]
        sys.argv.extend(self.worker_arguments)

    def hold(
        self, message: ServiceBusReceivedMessage, loop: asyncio.AbstractEventLoop, settle: Settle
    ) -> str:
        """Make the message settleable through the service while its function runs."""
        token = str(message.lock_token)
        with self._lock:
            self._held[token] = HeldMessage(message, loop, settle)
        return token

    def release(self, token: str) -> HeldMessage | None:
        with self._lock:
            return self._held.pop(token, None)

    def settle(self, token: str, operation: str, **options: Any) -> None:
        """Run ``receiver.<operation>_message`` for the held message on its own loop."""
        with self._lock:
            held = self._held.get(token)
        if held is None:
            raise LookupError(f"no message with lock token {token} is being processed")
        if held.settled:
            raise ValueError(f"message with lock token {token} is already settled")
        call: Coroutine[Any, Any, None] = held.settle(operation, held.message, **options)
        asyncio.run_coroutine_threadsafe(call, held.loop).result(SETTLE_TIMEOUT_SECONDS)
        if operation != "renew":
            held.settled = True


MAX_DEAD_LETTER_TEXT = 4096
"""The longest dead-letter reason or error description Service Bus takes."""


class _Servicer(settlement_pb2_grpc.SettlementServicer):  # type: ignore[misc]
    """The single-message operations; the session ones keep the base's UNIMPLEMENTED."""

    def __init__(self, service: SettlementService) -> None:
        self._service = service

    def Complete(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        return self._settle(request, context, "complete")

    def Abandon(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        return self._settle(request, context, "abandon")

    def Defer(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        return self._settle(request, context, "defer")

    def Deadletter(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        options = {
            "reason": request.deadletterReason.value
            if request.HasField("deadletterReason")
            else None,
            "error_description": request.deadletterErrorDescription.value
            if request.HasField("deadletterErrorDescription")
            else None,
        }
        for name, value in options.items():
            if value is not None and len(value) > MAX_DEAD_LETTER_TEXT:
                # The host's Service Bus client refuses these before they reach the broker.
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the dead-letter {name} is {len(value)} characters, more than the "
                    f"{MAX_DEAD_LETTER_TEXT} Service Bus allows",
                )
        return self._settle(request, context, "dead_letter", **options)

    def RenewMessageLock(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        return self._settle(request, context, "renew")

    def _settle(
        self, request: Any, context: grpc.ServicerContext, operation: str, **options: Any
    ) -> empty_pb2.Empty:
        if getattr(request, "propertiesToModify", b""):
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "the devhost does not apply propertiesToModify when settling",
            )
        try:
            self._service.settle(request.locktoken, operation, **options)
        except LookupError as error:
            context.abort(grpc.StatusCode.NOT_FOUND, str(error))
        except (ValueError, ServiceBusError) as error:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
        return empty_pb2.Empty()
