"""The scheduler <-> agent messages (E1, E3, E4, E7, C1, C4, C7, C8): the internal contract.

An `AgentRequest` carries what the agent needs to act alone: the order, the attempt as the
fencing token (E7), the step's `idempotency_key` (C8), the deadline, the `tries` it may
spend of the order's retry budget (C4), and the `AgentOperation` (an `undo` names its side
effect by `reference`, or in doubt by the key, C1). An
`AgentResponse` has bounded fields, checked at construction (`AgentMessageError`). Both carry
a schema version (C7) and ids derived from the request's (E4); `agent_response_event` names
the event an answer is raised as (E3).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from domain.contracts import Order, text_problem
from domain.records import InstanceId, RecordFormatError

AGENT_SCHEMA_VERSION = 1
MAX_AGENT_ID_LENGTH = 256
"""`request_id` and `instance_id` ({OrderID}:{attempt}[:{step}[:undo]]) are at most this long."""
MAX_DETAIL_LENGTH = 2_000
MAX_REFERENCE_LENGTH = 256
MAX_ATTEMPT = 2**53 - 1
"""The attempt of an instance id stays an integer every JSON store keeps exact."""
UNDO_SUFFIX = ":undo"
"""Ends the request id of an ``undo`` (`AgentRequest.request_id`)."""
RESPONSE_SUFFIX = ":response"
"""Ends a response's message id, after the id of the request it answers."""


def agent_response_event(request_id: str) -> str:
    """The external event that brings the answer to `request_id` to its orchestration (E3).

    One name per request, never waited on twice by one instance: the Python SDK hands an
    event raised before its wait opened to every later wait of the same name
    (azure-functions-durable-python#507), and agents often answer before the orchestrator
    has opened its wait.
    """
    return f"AgentResponse:{request_id}"


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
    schema_version: int = AGENT_SCHEMA_VERSION
    tries: int | None = None
    """The calls the agent may make for this request, over all its deliveries: the tries
    its begin write drew that fit in what was left of the order's retry budget (C4); None
    on a request sent before requests carried them."""

    def __post_init__(self) -> None:
        _check_version(self.schema_version)
        if self.tries is not None and self.tries < 0:
            raise AgentMessageError(f"tries must be >= 0, got {self.tries}")

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


@dataclass(frozen=True)
class AgentResponse:
    request_id: str
    instance_id: str
    outcome: AgentOutcome
    detail: str | None = None
    reference: str | None = None
    """The service's id of the side effect the request made or undid (a reservation...)."""
    schema_version: int = AGENT_SCHEMA_VERSION

    def __post_init__(self) -> None:
        _check_version(self.schema_version)
        _check_text("request_id", self.request_id, MAX_AGENT_ID_LENGTH)
        _check_text("instance_id", self.instance_id, MAX_AGENT_ID_LENGTH)
        try:
            attempt = InstanceId.parse(self.instance_id).attempt
        except RecordFormatError:
            raise AgentMessageError(
                "instance_id is not of the form '{OrderID}:{attempt}'"
            ) from None
        if attempt > MAX_ATTEMPT:
            raise AgentMessageError(f"instance_id's attempt must be at most {MAX_ATTEMPT}")
        if self.detail is not None:
            _check_text("detail", self.detail, MAX_DETAIL_LENGTH, empty=True, controls=True)
        if self.reference is not None:
            _check_text("reference", self.reference, MAX_REFERENCE_LENGTH, empty=True)

    @property
    def message_id(self) -> str:
        return f"{self.request_id}{RESPONSE_SUFFIX}"

    @property
    def event_name(self) -> str:
        return agent_response_event(self.request_id)

    def answering(self, request_id: str) -> AgentResponse:
        """This response, which must answer `request_id` (E3)."""
        if self.request_id != request_id:
            raise AgentMessageError(
                f"the answer to {self.request_id} came for request {request_id}"
            )
        return self


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


def _check_version(version: int) -> None:
    if version != AGENT_SCHEMA_VERSION:
        raise AgentMessageError(f"schema_version must be {AGENT_SCHEMA_VERSION}")


def _check_text(
    name: str, value: str, max_length: int, *, empty: bool = False, controls: bool = False
) -> None:
    problem = text_problem(
        name, value, max_length=max_length, allow_empty=empty, allow_controls=controls
    )
    if problem is not None:
        raise AgentMessageError(problem)
