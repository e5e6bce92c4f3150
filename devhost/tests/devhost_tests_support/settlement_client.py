"""A client of the host's gRPC ``Settlement`` service with a deadline on every call.

It sends what the Service Bus extension's ``ServiceBusMessageActions`` sends (requests from
the extension's own protos, to the address the host puts on the worker's command line), and
gives each call a gRPC deadline, which the extension's client offers no way to set. Failures
are the ``grpc.RpcError`` of the call.
"""

from __future__ import annotations

from typing import Any

import grpc
from azurefunctions.extensions.bindings.protos.settlement_pb2 import (
    AbandonRequest,
    CompleteRequest,
    DeadletterRequest,
)
from azurefunctions.extensions.bindings.protos.settlement_pb2_grpc import SettlementStub
from azurefunctions.extensions.bindings.servicebus.grpc_utils import (
    get_grpc_max_message_length,
    get_grpc_uri,
    parse_grpc_args,
)
from google.protobuf.wrappers_pb2 import StringValue


class DeadlineSettlement:
    """``complete``, ``abandon`` and ``deadletter`` as the extension's client takes them."""

    def __init__(self, seconds: float, argv: list[str] | None = None) -> None:
        # argv None: this process's command line, which the extension's client reads too.
        args = parse_grpc_args(argv)
        length = get_grpc_max_message_length(args)
        self._channel = grpc.insecure_channel(
            get_grpc_uri(args),
            options=[
                ("grpc.max_send_message_length", length),
                ("grpc.max_receive_message_length", length),
            ],
        )
        self._stub = SettlementStub(self._channel)
        self._seconds = seconds

    def complete(self, message: Any) -> None:
        self._stub.Complete(
            CompleteRequest(locktoken=str(message.lock_token)), timeout=self._seconds
        )

    def abandon(self, message: Any) -> None:
        request = AbandonRequest(locktoken=str(message.lock_token), propertiesToModify=b"")
        self._stub.Abandon(request, timeout=self._seconds)

    def deadletter(
        self,
        message: Any,
        deadletter_reason: str | None = None,
        deadletter_error_description: str | None = None,
    ) -> None:
        request = DeadletterRequest(locktoken=str(message.lock_token), propertiesToModify=b"")
        if deadletter_reason:
            request.deadletterReason.CopyFrom(StringValue(value=deadletter_reason))
        if deadletter_error_description:
            request.deadletterErrorDescription.CopyFrom(
                StringValue(value=deadletter_error_description)
            )
        self._stub.Deadletter(request, timeout=self._seconds)

    def close(self) -> None:
        self._channel.close()
