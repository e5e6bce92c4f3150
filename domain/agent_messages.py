"""The scheduler <-> agent messages (E1, E3, E4, E7, C7): the project's own internal contract.

A request carries everything the agent needs to act on its own: the order, the attempt (the
fencing token the remote service enforces, E7), the idempotency key that stays the same on
every try and every attempt of the step (so no side effect happens twice, C8) and the
deadline after which the agent starts no new side effect (E7). Its operation is ``do`` (the
step's action) or ``undo`` (its compensation, C1), which names the side effect by the
reference the service gave it, or, for a step whose outcome is in doubt, by the idempotency
key of the action it undoes.

Message ids are stable, derived from the request id, so a resend is removed by Service Bus
duplicate detection on both queues (E4). Both shapes carry a schema version (C7).

A response's fields are bounded (contracts.md, "Bounds"): its ids, its `detail` (which
becomes an order's LastError, a status reason and an alert) and its `reference` (kept in the
record's Steps and CompensationLog, C1), so that no response can make a record the stores
refuse or cannot read back; a response past a bound is an `AgentMessageError` whose message
names the bound, and the bridge dead-letters it with that reason (S3). Our agents clip the
detail they send (`clip_detail`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from domain.contracts import Order, decode_json, encode_json, text_problem
from domain.records import InstanceId, RecordFormatError, format_utc, parse_utc

AGENT_SCHEMA_VERSION = 1
MAX_AGENT_ID_LENGTH = 256
"""`requestId` and `instanceId` ({OrderID}:{attempt}[:{step}[:undo]]) are at most this long."""
MAX_DETAIL_LENGTH = 2_000
MAX_REFERENCE_LENGTH = 256
MAX_ATTEMPT = 2**53 - 1
"""The attempt of an instance id stays an integer every JSON store keeps exact."""
UNDO_SUFFIX = ":undo"
"""Ends the request id of an ``undo`` (`AgentRequest.request_id`)."""
RESPONSE_SUFFIX = ":response"
"""Ends a response's message id, after the id of the request it answers."""
AGENT_RESPONSE_EVENT = "AgentResponse"
"""The one event name of the first workflow version's single wait; its instances still in
flight after an upgrade may hold a response raised under it (C7)."""


def agent_response_event(request_id: str) -> str:
    """The external event that brings the answer to `request_id` to its orchestration (E3).

    One name per request, never waited on twice by one instance: the Python SDK hands an
    event raised before its wait opened to every later wait of the same name
    (azure-functions-durable-python#507), and agents often answer before the orchestrator
    has opened its wait, so with one shared name a later step would take an earlier step's
    answer again and again.
    """
    return f"{AGENT_RESPONSE_EVENT}:{request_id}"


class AgentMessageError(ValueError):
    """A request or response that does not follow this contract."""


class AgentOperation(StrEnum):
    DO = "do"
    UNDO = "undo"  # the step's compensation (C1)


class AgentOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # non-transient, unrecoverable (E8)
    GAVE_UP = "gave-up"  # transient faults outlasted the tries or the deadline (E9)
    SUPERSEDED = "superseded"  # the remote service saw a newer attempt (E7 fencing)


@dataclass(frozen=True)
class AgentRequest:
    instance_id: str
    step: str
    order: Order
    deadline: datetime
    operation: AgentOperation = AgentOperation.DO
    reference: str | None = None
    """For ``undo``: the service's id of the side effect, or None when it is in doubt."""

    @property
    def request_id(self) -> str:
        if self.operation is AgentOperation.UNDO:
            return f"{self.instance_id}:{self.step}{UNDO_SUFFIX}"
        return f"{self.instance_id}:{self.step}"

    @property
    def message_id(self) -> str:
        return self.request_id

    @property
    def attempt(self) -> int:
        return InstanceId.parse(self.instance_id).attempt

    @property
    def idempotency_key(self) -> str:
        """The key of the step's action: the same for every attempt of the step, so a side
        effect done by an expired attempt is recognised, not repeated, when the next attempt
        asks again; an ``undo`` of a step in doubt names the action by it."""
        return f"{self.order.order_id}:{self.step}"

    def to_document(self) -> dict[str, Any]:
        return {
            "schemaVersion": AGENT_SCHEMA_VERSION,
            "requestId": self.request_id,
            "instanceId": self.instance_id,
            "step": self.step,
            "operation": self.operation.value,
            "reference": self.reference,
            "deadline": format_utc(self.deadline),
            "order": self.order.to_document(),
        }

    def to_json(self) -> str:
        return encode_json(self.to_document())

    @classmethod
    def from_document(cls, document: Any) -> AgentRequest:
        fields = _fields(document, "instanceId", "step", "deadline", "order")
        try:
            reference = document.get("reference")
            return cls(
                instance_id=str(fields["instanceId"]),
                step=str(fields["step"]),
                order=Order.from_document(fields["order"]),
                deadline=parse_utc(str(fields["deadline"])),
                operation=AgentOperation(document.get("operation", AgentOperation.DO.value)),
                reference=None if reference is None else str(reference),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise AgentMessageError(f"agent request is malformed: {error}") from error

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentRequest:
        return cls.from_document(_decode(text))


@dataclass(frozen=True)
class AgentResponse:
    request_id: str
    instance_id: str
    outcome: AgentOutcome
    detail: str | None = None
    reference: str | None = None
    """The service's id of the side effect the request made or undid (a reservation...)."""

    @property
    def message_id(self) -> str:
        return f"{self.request_id}{RESPONSE_SUFFIX}"

    @property
    def event_name(self) -> str:
        return agent_response_event(self.request_id)

    def to_document(self) -> dict[str, Any]:
        return {
            "schemaVersion": AGENT_SCHEMA_VERSION,
            "requestId": self.request_id,
            "instanceId": self.instance_id,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "reference": self.reference,
        }

    def to_json(self) -> str:
        return encode_json(self.to_document())

    @classmethod
    def from_document(cls, document: Any) -> AgentResponse:
        fields = _fields(document, "requestId", "instanceId", "outcome")
        try:
            outcome = AgentOutcome(fields["outcome"])
        except ValueError as error:
            raise AgentMessageError(f"agent response has unknown outcome: {error}") from error
        request_id = _text(fields, "requestId", MAX_AGENT_ID_LENGTH)
        instance_id = _text(fields, "instanceId", MAX_AGENT_ID_LENGTH)
        try:
            attempt = InstanceId.parse(instance_id).attempt
        except RecordFormatError as error:
            raise AgentMessageError(f"agent response instanceId: {error}") from error
        if attempt > MAX_ATTEMPT:
            raise AgentMessageError(
                f"agent response instanceId attempt must be at most {MAX_ATTEMPT}"
            )
        # fulfilmentId: the name the one-step workflow's responses gave the reference (C7).
        reference = document.get("reference", document.get("fulfilmentId"))
        return cls(
            request_id=request_id,
            instance_id=instance_id,
            outcome=outcome,
            detail=_optional_text(
                document.get("detail"), "detail", MAX_DETAIL_LENGTH, allow_controls=True
            ),
            reference=_optional_text(reference, "reference", MAX_REFERENCE_LENGTH),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentResponse:
        return cls.from_document(_decode(text))

    @classmethod
    def answering(cls, request_id: str, document: Any) -> AgentResponse:
        """The response in `document`, which must answer `request_id` (E3)."""
        response = cls.from_document(document)
        if response.request_id != request_id:
            raise AgentMessageError(
                f"the answer to {response.request_id} came for request {request_id}"
            )
        return response


def answered_operation(message_id: str | None) -> AgentOperation | None:
    """The operation of the request an agent response answers, from the response's message
    id (`AgentResponse.message_id`); None for an id of another shape."""
    if message_id is None or not message_id.endswith(RESPONSE_SUFFIX):
        return None
    request_id = message_id.removesuffix(RESPONSE_SUFFIX)
    return AgentOperation.UNDO if request_id.endswith(UNDO_SUFFIX) else AgentOperation.DO


def clip_detail(detail: str | None) -> str | None:
    """`detail` as an agent may send it: cut to MAX_DETAIL_LENGTH characters, a lone
    surrogate (from a decoded error text) replaced."""
    if detail is None:
        return None
    detail = detail.encode("utf-8", "replace").decode("utf-8")
    if len(detail) <= MAX_DETAIL_LENGTH:
        return detail
    marker = "..."
    return detail[: MAX_DETAIL_LENGTH - len(marker)] + marker


def _text(fields: dict[str, Any], name: str, max_length: int) -> str:
    value = fields[name]
    problem = text_problem(f"agent response {name}", value, max_length=max_length)
    if problem is not None:
        raise AgentMessageError(problem)
    return str(value)


def _optional_text(
    value: Any, name: str, max_length: int, *, allow_controls: bool = False
) -> str | None:
    if value is None:
        return None
    problem = text_problem(
        f"agent response {name}",
        value,
        max_length=max_length,
        allow_empty=True,
        allow_controls=allow_controls,
    )
    if problem is not None:
        raise AgentMessageError(problem)
    return str(value)


def _decode(text: str | bytes) -> Any:
    try:
        return decode_json(text)
    except (ValueError, RecursionError) as error:
        # also an integer literal past Python's digit limit, or nesting too deep
        raise AgentMessageError(f"agent message is not JSON: {str(error)[:200]}") from error


def _fields(document: Any, *names: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise AgentMessageError("agent message must be a JSON object")
    if document.get("schemaVersion") != AGENT_SCHEMA_VERSION:
        raise AgentMessageError(
            f"agent message schemaVersion {document.get('schemaVersion')!r} is not "
            f"{AGENT_SCHEMA_VERSION}"
        )
    missing = [name for name in names if document.get(name) is None]
    if missing:
        raise AgentMessageError(f"agent message lacks {', '.join(missing)}")
    return {name: document[name] for name in names}
