"""The devhost's one door to the SDKs' private internals.

The devhost runs Microsoft's own code where it can (the Durable SDK's replay, the
azure-servicebus client, the Functions worker library), and in a few places that code offers
no public way to do what the host does. Each such use is here, resolved at import against
the SDK versions it was written for (``PINNED``), so a changed SDK fails in one place with a
message that says what to adapt; ``check()`` compares the installed versions, and a test runs
it.

- ``df_dumps`` (``azure.functions._durable_functions``): the encoder the Durable worker uses
  for inputs, outputs and event data, so values the engine stores read back as the SDK wrote.
- ``encode_payload`` and the AMQP type tags (``azure.servicebus._pyamqp``): the settlement
  service encodes a trigger message's annotations as the Service Bus extension does before
  handing it to the binding extension.
- ``received_amqp_message``: the AMQP message an azure-servicebus received message wraps,
  which the settlement service re-encodes for the SDK-type binding.
- ``LinkState`` and the receiver's and its AMQP client's state (``receiver_fault``):
  azure-servicebus can fail a receiver without raising, and the trigger's listener must see
  that to restart it, as the Functions host's listener does.
- ``close_durable_http_session``: the Durable SDK keeps one aiohttp session per process, bound
  to the loop that opened it; a host that stops its loop must close it.
- ``patch_durable_replay_helpers``: two pure helpers of the Durable SDK's replay (timestamp
  parsing, namedtuple classes) are swapped for memoised ones in language worker processes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any

PINNED: Mapping[str, str] = {
    "azure-functions": "1.26.0",
    "azure-functions-durable": "1.7.0",
    "azure-servicebus": "7.15.0",
}
"""The versions whose internals this module was written and tested against."""


class SdkShapeError(RuntimeError):
    """An SDK no longer has the private shape the devhost relies on."""


def _adapt(what: str, error: Exception) -> SdkShapeError:
    return SdkShapeError(
        f"{what} is not where devhost/sdk_compat.py expects it ({type(error).__name__}: "
        f"{error}); the SDK versions it was written for are {dict(PINNED)}: adapt "
        "devhost/sdk_compat.py to the installed versions, or install those"
    )


try:
    from azure.functions._durable_functions import df_dumps
    from azure.servicebus._pyamqp._encode import encode_payload
    from azure.servicebus._pyamqp.constants import LinkState
    from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
except ImportError as _error:
    raise _adapt("an SDK internal", _error) from _error

__all__ = [
    "PINNED",
    "TYPE",
    "VALUE",
    "AMQPTypes",
    "LinkState",
    "SdkShapeError",
    "check",
    "close_durable_http_session",
    "df_dumps",
    "encode_payload",
    "patch_durable_replay_helpers",
    "received_amqp_message",
    "receiver_fault",
    "receiver_handler",
]

_HISTORY_EVENT = "azure.durable_functions.models.history.HistoryEvent"
_EXECUTOR = "azure.durable_functions.models.TaskOrchestrationExecutor"
_HTTP_UTILS = "azure.durable_functions.models.utils.http_utils"


def check(pinned: Mapping[str, str] = PINNED) -> list[str]:
    """What differs between the installed SDKs and `pinned`, one line each; empty when none
    does. Every private name must resolve too."""
    problems = []
    for package, expected in pinned.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != expected:
            problems.append(
                f"{package} is {installed}, devhost/sdk_compat.py was written for {expected}: "
                "check that its internals still hold (the sdk_compat test) and update PINNED"
            )
    for module, name in (
        (_HISTORY_EVENT, "dt_parse"),
        (_EXECUTOR, "namedtuple"),
        (_HTTP_UTILS, "_close_session"),
    ):
        if not hasattr(importlib.import_module(module), name):
            problems.append(f"{module} has no {name}: adapt devhost/sdk_compat.py")
    return problems


def received_amqp_message(message: Any) -> Any:
    """The pyamqp ``Message`` behind an azure-servicebus ``ServiceBusReceivedMessage``
    (``message._message``), with every section the broker sent.

    The Functions host hands an SDK-type binding the AMQP-encoded message, and
    ``encode_payload`` encodes a pyamqp ``Message``; the SDK's public ``raw_amqp_message`` is
    an ``AmqpAnnotatedMessage``, with no public way back to the message it came from.
    """
    try:
        return message._message
    except AttributeError as error:
        raise _adapt("ServiceBusReceivedMessage._message", error) from error


def receiver_handler(receiver: object) -> object | None:
    """The receiver's AMQP client as it is now (``receiver._handler``)."""
    return getattr(receiver, "_handler", None)


def receiver_fault(receiver: Any, handler: object) -> str | None:
    """Why an open azure-servicebus receiver can no longer receive, or None while it can.

    ``handler`` is ``receiver_handler(receiver)`` when the receiver opened. After an error
    the SDK closes the handler and clears ``_running``, and only reopens it on the next call;
    a handler that shut down while ``_running`` stayed set makes every receive return an
    empty batch at once, without an error; a handler the SDK swapped (an open from another
    operation) delivers on a link whose delivery ids the earlier messages do not belong to.
    """
    if receiver._shutdown.is_set():
        return "the receiver was closed"
    current = receiver_handler(receiver)
    if not getattr(receiver, "_running", True) or current is None:
        return "the SDK shut the receiver's handler down after an error"
    if current is not handler:
        return "the SDK reopened the receiver on a new link"
    if getattr(current, "_shutdown", False):
        return "the receiver's AMQP client shut down"
    link = getattr(current, "_link", None)
    state = getattr(link, "state", LinkState.ATTACHED)
    if link is not None and (state != LinkState.ATTACHED or getattr(link, "_error", None)):
        return f"the receive link is {getattr(state, 'name', state)}"
    return None


async def close_durable_http_session() -> None:
    """Close the Durable SDK's per-process aiohttp session (it belongs to the running loop)."""
    close: Callable[[], Any] = importlib.import_module(_HTTP_UTILS)._close_session
    await close()


def patch_durable_replay_helpers(
    timestamp_parser: Callable[[str], Any], namedtuple_factory: Callable[..., Any]
) -> None:
    """Make the Durable SDK's replay parse history timestamps with `timestamp_parser` and
    build its namedtuple classes with `namedtuple_factory` (module globals it calls)."""
    setattr(importlib.import_module(_HISTORY_EVENT), "dt_parse", timestamp_parser)  # noqa: B010
    setattr(importlib.import_module(_EXECUTOR), "namedtuple", namedtuple_factory)  # noqa: B010
