"""Settling a trigger's Service Bus message from function code (S1, S3; C8 redelivery).

`complete` and `dead_letter` settle through the SDK-type binding's `ServiceBusMessageActions`,
off the event loop, each gRPC call bounded by `SETTLEMENT_DEADLINE_SECONDS`. A settlement that
fails is logged, not raised, and the message is abandoned for redelivery (or left until its
lock expires): its work runs again, as every trigger's work allows (S2, C6, C8).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable
from typing import Any

import grpc
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)
from azurefunctions.extensions.bindings.servicebus.serviceBusMessageActions import (
    SettlementError,
)

from adapters import blocking_calls
from observability import logs

log = logs.get_logger("app.settlement")

# A settlement normally takes milliseconds (loopback gRPC to the host, then one Service Bus
# round trip). The deadline leaves ample room for a slow host, while a settlement and the
# abandon that may follow it (two deadlines) still fit within one lock duration (PT1M for
# every queue in servicebus.config.json) and within the devhost settlement service's own wait
# (SETTLE_TIMEOUT_SECONDS = 60), so the caller, not the server, decides when to give up.
SETTLEMENT_DEADLINE_SECONDS = 20.0
MAX_DEAD_LETTER_TEXT = 4096
"""The longest dead-letter reason or description Service Bus takes; the host's client
refuses a longer one, and the message would only be abandoned."""

# The stub calls this module makes through the extension's client.
_STUB_CALLS = ("Complete", "Abandon", "Deadletter")
_DETAIL_CHARS = 200


class Outcome(enum.Enum):
    """What became of a message whose settlement was asked for."""

    SETTLED = "settled"
    """The requested settlement (complete, dead-letter) was applied."""
    ABANDONED = "abandoned"
    """It failed; the message was abandoned and the broker redelivers it now."""
    LOCK_EXPIRES = "lock-expires"
    """It failed and so did the abandon; the broker redelivers once the lock expires."""


class ExtensionShapeError(RuntimeError):
    """The installed extension no longer looks the way ``with_deadline`` relies on."""


async def complete(
    actions: ServiceBusMessageActions,
    message: ServiceBusReceivedMessage,
    *,
    deadline: float = SETTLEMENT_DEADLINE_SECONDS,
) -> Outcome:
    """Complete the message; on failure abandon it (see the module docstring)."""

    def settle(bound: ServiceBusMessageActions, received: ServiceBusReceivedMessage) -> None:
        bound.complete(received)

    return await _settle("complete", actions, message, deadline, settle)


async def dead_letter(
    actions: ServiceBusMessageActions,
    message: ServiceBusReceivedMessage,
    *,
    reason: str,
    description: str,
    deadline: float = SETTLEMENT_DEADLINE_SECONDS,
) -> Outcome:
    """Dead-letter the message with a reason; on failure abandon it, so the next delivery
    dead-letters it again (or the broker does, past MaxDeliveryCount). Reason and
    description are cut to the MAX_DEAD_LETTER_TEXT characters Service Bus takes."""

    def settle(bound: ServiceBusMessageActions, received: ServiceBusReceivedMessage) -> None:
        bound.deadletter(
            received,
            deadletter_reason=_clipped(reason),
            deadletter_error_description=_clipped(description),
        )

    return await _settle("dead_letter", actions, message, deadline, settle)


def _clipped(text: str) -> str:
    if len(text) <= MAX_DEAD_LETTER_TEXT:
        return text
    marker = "..."
    return text[: MAX_DEAD_LETTER_TEXT - len(marker)] + marker


async def _settle(
    operation: str,
    actions: ServiceBusMessageActions,
    message: ServiceBusReceivedMessage,
    deadline: float,
    settle: Callable[[ServiceBusMessageActions, ServiceBusReceivedMessage], None],
) -> Outcome:
    bound = with_deadline(actions, deadline)
    try:
        await blocking_calls.run(settle, bound, message)
    except SettlementError as error:
        log.warning(
            "settlement failed",
            operation=operation,
            **_message_fields(message),
            **_error_fields(error),
            next="abandon",
        )
    else:
        return Outcome.SETTLED
    try:
        await blocking_calls.run(bound.abandon, message)
    except SettlementError as error:
        # Unless it was settled already, the broker redelivers it when its lock expires.
        log.warning(
            "abandon failed",
            operation=operation,
            **_message_fields(message),
            **_error_fields(error),
            outcome="lock-expires",
        )
        return Outcome.LOCK_EXPIRES
    log.info(
        "message abandoned for redelivery",
        operation=operation,
        **_message_fields(message),
        outcome="abandoned",
    )
    return Outcome.ABANDONED


def with_deadline(actions: ServiceBusMessageActions, seconds: float) -> ServiceBusMessageActions:
    """The extension's actions client with each settlement gRPC call bounded by ``seconds``.

    The copy keeps the extension's request building and error wrapping (every failure is a
    ``SettlementError``) and swaps its ``Settlement`` stub, the private ``_client``, for one
    that passes ``timeout=seconds`` to each call. The one place that touches the extension's
    private state: if its shape changed, ``ExtensionShapeError``, never a settlement without a
    deadline.
    """
    stub = getattr(actions, "_client", None)
    calls = {name: getattr(stub, name, None) for name in _STUB_CALLS}
    unusable = [
        name for name, call in calls.items() if not isinstance(call, grpc.UnaryUnaryMultiCallable)
    ]
    if not isinstance(actions, ServiceBusMessageActions) or unusable:
        raise ExtensionShapeError(
            "azurefunctions-extensions-bindings-servicebus changed shape: "
            "ServiceBusMessageActions._client no longer holds a Settlement gRPC stub with "
            f"unary calls {', '.join(unusable or _STUB_CALLS)}, so settlement calls cannot be "
            "given a deadline; adapt adapters/message_settlement.with_deadline to the "
            "installed version (or use its own timeout option if it has one now)"
        )
    bound = copy.copy(actions)
    bound._client = _DeadlineStub(calls, seconds)
    return bound


class _DeadlineStub:
    """The ``Settlement`` stub calls this module makes, each with a deadline."""

    def __init__(self, calls: dict[str, Any], seconds: float) -> None:
        self._calls = calls
        self._seconds = seconds

    def Complete(self, request: Any) -> Any:
        return self._calls["Complete"](request, timeout=self._seconds)

    def Abandon(self, request: Any) -> Any:
        return self._calls["Abandon"](request, timeout=self._seconds)

    def Deadletter(self, request: Any) -> Any:
        return self._calls["Deadletter"](request, timeout=self._seconds)


def _message_fields(message: ServiceBusReceivedMessage) -> dict[str, object]:
    # Identifiers only: the body and application properties may hold personal data (C3).
    return {
        "message_id": message.message_id,
        "correlation_id": message.correlation_id,
        "sequence": message.sequence_number,
        "delivery_count": message.delivery_count,
    }


def _error_fields(error: SettlementError) -> dict[str, object]:
    original = error.original
    if isinstance(original, grpc.RpcError) and isinstance(original, grpc.Call):
        detail = str(original.details() or "")
        return {"status": original.code().name, "detail": detail[:_DETAIL_CHARS]}
    return {"status": type(original).__name__, "detail": str(original)[:_DETAIL_CHARS]}
