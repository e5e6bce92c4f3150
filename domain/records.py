"""The state record of one order and the identifiers around it (S4, D2, C1, C3, C4, C7, C10).

A `StateRecord` holds the contract fields of contracts.md, the workflow's `Steps` and the
ordered `CompensationLog` (C1), the order's retry budget and what it spent (C4), the attempt
counter and timestamps. It is the truth about
which steps completed (C10). Timestamps are one fixed-width ISO-8601 UTC form, so string
order is time order in both stores' queries. `SchemaVersion` is the document's shape and
`WorkflowVersion` the workflow the order was accepted with (C7).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from domain.policies import DEFAULT_MAX_FAILURES, DEFAULT_RETRY_BUDGET, RetryBudget
from domain.workflow import DEFAULT_ORDER_STEPS

RECORD_SCHEMA_VERSION = 1
"""Version of the state record's shape (C7). Readers accept every version listed here."""

SUPPORTED_RECORD_VERSIONS = frozenset({RECORD_SCHEMA_VERSION})

ORDER_ID_PATTERN = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]{1,64}")
"""contracts.md: 1-64 characters of `[A-Za-z0-9._-]`, but not `.` or `..`, which a REST path
such as Cosmos DB's document URL rewrites to its parent; never the `:` of instance ids."""

_UTC_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

DEFAULT_BUDGET = RetryBudget.for_order(
    DEFAULT_RETRY_BUDGET, steps=len(DEFAULT_ORDER_STEPS), supervisor_attempts=DEFAULT_MAX_FAILURES
)
"""The budget of a record built without one."""


class ProcessState(StrEnum):
    """`ProcessState` values of the state record (contracts.md; C2 keeps compensation apart)."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    PROCESSED = "Processed"
    ERROR = "Error"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"


FINISHED_STATES = frozenset(
    {
        ProcessState.PROCESSED,
        ProcessState.ERROR,
        ProcessState.COMPENSATED,
        ProcessState.COMPENSATION_FAILED,
    }
)
"""States no attempt, supervisor or compensation moves an order out of by itself; only an
operator does (E8, C2)."""

RETIRABLE_STATES = frozenset({ProcessState.PROCESSED, ProcessState.ERROR, ProcessState.COMPENSATED})
"""Finished states whose order is retired after the retention (C3): its order document and
orchestration histories go, its record stays as a tombstone. CompensationFailed is not
among them: side effects are left that an operator must still undo, with the order's data."""


class StepState(StrEnum):
    """`State` of one entry of the record's `Steps` (contracts.md; C1, C2)."""

    NOT_STARTED = "NotStarted"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"


class RecordFormatError(ValueError):
    """A stored document or identifier does not have the shape this code understands."""


def format_utc(moment: datetime) -> str:
    """Fixed-width ISO-8601 UTC text (`2026-01-02T03:04:05.000000Z`), sortable as a string."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: pass an aware UTC datetime")
    return moment.astimezone(UTC).strftime(_UTC_FORMAT)


def parse_utc(text: str) -> datetime:
    """Inverse of `format_utc`; also accepts any ISO-8601 text with an offset or `Z`."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise RecordFormatError(f"not an ISO-8601 timestamp: {text!r}") from error
    if parsed.tzinfo is None:
        raise RecordFormatError(f"timestamp without a UTC offset: {text!r}")
    return parsed.astimezone(UTC)


def _utc_or_none(moment: datetime | None) -> str | None:
    return None if moment is None else format_utc(moment)


def _parsed_or_none(text: object) -> datetime | None:
    return None if text is None else parse_utc(str(text))


@dataclass(frozen=True, order=True)
class InstanceId:
    """Attempt-specific orchestration instance id `"{OrderID}:{attempt}"` (D2).

    It is also the fencing token (D4, E7): `LockedBy` holds it while the attempt owns the
    record, and the remote service refuses calls from an attempt older than one it has seen.
    """

    order_id: str
    attempt: int

    def __post_init__(self) -> None:
        if not ORDER_ID_PATTERN.fullmatch(self.order_id):
            raise RecordFormatError(f"invalid OrderID in instance id: {self.order_id!r}")
        if self.attempt < 1:
            raise RecordFormatError(
                f"attempt must be >= 1 in instance id of order {self.order_id!r}, "
                f"got {self.attempt}"
            )

    def __str__(self) -> str:
        return f"{self.order_id}:{self.attempt}"

    @classmethod
    def parse(cls, text: str) -> InstanceId:
        order_id, separator, attempt = text.rpartition(":")
        if not separator or not attempt.isdigit():
            raise RecordFormatError(
                f"instance id {text!r} is not of the form '{{OrderID}}:{{attempt}}'"
            )
        return cls(order_id, int(attempt))


@dataclass(frozen=True)
class StepStatus:
    """One entry of the record's `Steps`: a step of the workflow and how far it got."""

    name: str
    state: StepState = StepState.NOT_STARTED
    complete_by: datetime | None = None
    reference: str | None = None
    """The remote service's id of the step's side effect (a reservation, a payment...)."""

    def to_document(self) -> dict[str, Any]:
        return {
            "Name": self.name,
            "State": self.state.value,
            "CompleteBy": _utc_or_none(self.complete_by),
            "Reference": self.reference,
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> StepStatus:
        try:
            complete_by = document["CompleteBy"]
            return cls(
                name=str(document["Name"]),
                state=StepState(document["State"]),
                complete_by=None if complete_by is None else parse_utc(str(complete_by)),
                reference=document["Reference"],
            )
        except KeyError as error:
            raise RecordFormatError(f"step entry lacks {error}") from error


@dataclass(frozen=True)
class CompletedStep:
    """One entry of the compensation log (C1): a step that completed and may need undoing.

    Only the step name and the reference the remote service gave its side effect are kept,
    never the order's data or secrets (C3): compensation undoes the side effect by reference.
    """

    step: str
    reference: str | None
    completed_at: datetime

    def to_document(self) -> dict[str, Any]:
        return {
            "Step": self.step,
            "Reference": self.reference,
            "CompletedAt": format_utc(self.completed_at),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> CompletedStep:
        try:
            return cls(
                step=str(document["Step"]),
                reference=document["Reference"],
                completed_at=parse_utc(str(document["CompletedAt"])),
            )
        except KeyError as error:
            raise RecordFormatError(f"compensation log entry lacks {error}") from error


class OwedKind(StrEnum):
    """What an entry of the record's outbox (`Owed`) stands for (C6)."""

    STATUS = "status"
    """A status message for the order's reply queue (R2); `name` is its status."""
    ALERT = "alert"
    """An operator alert (E8, U2, U4, C2); `name` is its kind."""
    COMPENSATION = "compensation"
    """Starting the compensation instance of attempt `attempt` (U4, C1, C2)."""


@dataclass(frozen=True)
class OwedMessage:
    """One message a committed transition owes, enough to rebuild it under its stable id.

    `attempt` is the one the message id names; `reason` names fields and states, never an
    order's data (C3); `at` is the time the message body carries."""

    kind: OwedKind
    name: str
    attempt: int
    at: datetime
    reason: str | None = None
    step: str | None = None

    def to_document(self) -> dict[str, Any]:
        return {
            "Kind": self.kind.value,
            "Name": self.name,
            "Attempt": self.attempt,
            "At": format_utc(self.at),
            "Reason": self.reason,
            "Step": self.step,
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> OwedMessage:
        try:
            return cls(
                kind=OwedKind(document["Kind"]),
                name=str(document["Name"]),
                attempt=int(document["Attempt"]),
                at=parse_utc(str(document["At"])),
                reason=document["Reason"],
                step=document["Step"],
            )
        except KeyError as error:
            raise RecordFormatError(f"owed message lacks {error}") from error


@dataclass(frozen=True)
class Owed:
    """The record's outbox (C6): what the transition that wrote it still owes, written in
    that same write, delivered at once by whoever wrote it, then cleared.

    `due` is when the relay takes over, after its grace: the commit time, or for a step's
    `in-progress` status the step's CompleteBy, while its running attempt delivers it."""

    due: datetime
    messages: tuple[OwedMessage, ...]

    def to_document(self) -> dict[str, Any]:
        return {
            "Due": format_utc(self.due),
            "Messages": [message.to_document() for message in self.messages],
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any] | None) -> Owed | None:
        if document is None:
            return None
        try:
            return cls(
                due=parse_utc(str(document["Due"])),
                messages=tuple(OwedMessage.from_document(m) for m in document["Messages"]),
            )
        except KeyError as error:
            raise RecordFormatError(f"owed messages lack {error}") from error


@dataclass(frozen=True)
class StateRecord:
    """The state of one order in the state store. Immutable: transitions return new records.

    `etag` is the store's concurrency token of the version this object was read as; it is
    not part of the document and is `None` for a record that was never stored.
    """

    order_id: str
    process_state: ProcessState
    locked_by: str | None
    complete_by: datetime | None
    failure_count: int
    reply_to: str | None
    attempt: int
    created_at: datetime
    updated_at: datetime
    workflow_version: int
    steps: tuple[StepStatus, ...]
    current_step: str | None = None
    last_error: str | None = None
    compensation_log: tuple[CompletedStep, ...] = ()
    compensation_failures: int = 0
    """Compensation runs the supervisor found stalled (C2), counted apart from FailureCount."""
    compensation_started_at: datetime | None = None
    """When the order began compensating: no step may start a side effect after it (C1)."""
    trace_parent: str | None = None
    """W3C ``traceparent`` of the submission that created the record: the starter, the
    supervisor and every attempt of the order join that trace (C9)."""
    resubmits: int = 0
    """How often an operator resubmitted the order from Error (E8); its retry budget bounds
    it (C4)."""
    schema_version: int = RECORD_SCHEMA_VERSION
    etag: str | None = field(default=None, compare=False)
    owed: Owed | None = None
    """The outbox: messages a committed transition owes and no one has cleared (C6)."""
    compensation_ends_in: ProcessState = ProcessState.COMPENSATED
    """The state the order's compensation ends in once everything is undone (C1, C2, U4):
    Compensated, or Error when the supervisor gave up on an order that completed nothing
    but left a step in doubt: Error then says the order failed and nothing is left behind."""
    retry_budget: int = DEFAULT_BUDGET.total
    """The order's one count of calls to its services, fixed when it was accepted (C4)."""
    undo_reserve: int = DEFAULT_BUDGET.undo_reserve
    """The part of `retry_budget` the steps' requests leave for the undos (C4, C1)."""
    tries_spent: int = 0
    """Tries the steps' requests drew from `retry_budget` (C4)."""
    undo_tries_spent: int = 0
    """Tries the undos' requests drew from `retry_budget` (C4)."""
    body_hash: str | None = None
    """`Order.body_hash` of the order it was created for (S2, S3): what a resend is compared
    with once the order document is gone. None for records written before the field."""
    retired_at: datetime | None = None
    """When the retirement removed the order's document and histories (C3); the record is
    then a tombstone that keeps the OrderID known, so the order never runs again (S2)."""

    @property
    def instance_id(self) -> InstanceId | None:
        """The attempt that holds the record, parsed from `LockedBy`."""
        return None if self.locked_by is None else InstanceId.parse(self.locked_by)

    @property
    def resume_at(self) -> int | None:
        """Index of the first step not completed: where an attempt starts (C10); None when
        every step completed."""
        return next(
            (i for i, step in enumerate(self.steps) if step.state is not StepState.COMPLETED),
            None,
        )

    @property
    def budget(self) -> RetryBudget:
        """The order's retry budget (C4): the count and what is kept to undo its steps."""
        return RetryBudget(self.retry_budget, self.undo_reserve)

    @property
    def tries_left(self) -> int:
        """Tries a new request of a step may still draw (C4)."""
        return self.budget.forward_left(self.tries_spent)

    @property
    def undo_tries_left(self) -> int:
        """Tries a new undo may still draw (C4)."""
        return self.budget.undo_left(self.tries_spent, self.undo_tries_spent)

    def step_index(self, name: str) -> int:
        for index, step in enumerate(self.steps):
            if step.name == name:
                return index
        raise RecordFormatError(f"order {self.order_id!r} has no step {name!r}")

    def to_document(self) -> dict[str, Any]:
        """The stored JSON document, with the contract field names of contracts.md."""
        return {
            "id": self.order_id,
            "OrderID": self.order_id,
            "LockedBy": self.locked_by,
            "CompleteBy": None if self.complete_by is None else format_utc(self.complete_by),
            "ProcessState": self.process_state.value,
            "FailureCount": self.failure_count,
            "ReplyTo": self.reply_to,
            "SchemaVersion": self.schema_version,
            "Attempt": self.attempt,
            "CurrentStep": self.current_step,
            "LastError": self.last_error,
            "CompensationLog": [entry.to_document() for entry in self.compensation_log],
            "WorkflowVersion": self.workflow_version,
            "Steps": [step.to_document() for step in self.steps],
            "CompensationFailures": self.compensation_failures,
            "CompensationStartedAt": _utc_or_none(self.compensation_started_at),
            "TraceParent": self.trace_parent,
            "Resubmits": self.resubmits,
            "CompensationEndsIn": self.compensation_ends_in.value,
            "RetryBudget": self.retry_budget,
            "UndoReserve": self.undo_reserve,
            "TriesSpent": self.tries_spent,
            "UndoTriesSpent": self.undo_tries_spent,
            "BodyHash": self.body_hash,
            "RetiredAt": _utc_or_none(self.retired_at),
            "CreatedAt": format_utc(self.created_at),
            "UpdatedAt": format_utc(self.updated_at),
            "Owed": None if self.owed is None else self.owed.to_document(),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any], etag: str | None = None) -> StateRecord:
        """Read a stored document; refuses shapes of an unknown `SchemaVersion` (C7)."""
        version = document.get("SchemaVersion")
        if version not in SUPPORTED_RECORD_VERSIONS:
            raise RecordFormatError(
                f"state record {document.get('id')!r} has SchemaVersion {version!r}; "
                f"this code reads {sorted(SUPPORTED_RECORD_VERSIONS)}"
            )
        try:
            complete_by = document["CompleteBy"]
            steps = tuple(StepStatus.from_document(step) for step in document["Steps"])
            return cls(
                order_id=str(document["OrderID"]),
                process_state=ProcessState(document["ProcessState"]),
                locked_by=document["LockedBy"],
                complete_by=None if complete_by is None else parse_utc(str(complete_by)),
                failure_count=int(document["FailureCount"]),
                reply_to=document["ReplyTo"],
                attempt=int(document["Attempt"]),
                created_at=parse_utc(str(document["CreatedAt"])),
                updated_at=parse_utc(str(document["UpdatedAt"])),
                current_step=document["CurrentStep"],
                last_error=document["LastError"],
                compensation_log=tuple(
                    CompletedStep.from_document(entry) for entry in document["CompensationLog"]
                ),
                workflow_version=int(document["WorkflowVersion"]),
                steps=steps,
                compensation_failures=int(document["CompensationFailures"]),
                compensation_started_at=_parsed_or_none(document["CompensationStartedAt"]),
                trace_parent=document["TraceParent"],
                resubmits=int(document["Resubmits"]),
                schema_version=int(version),
                etag=etag,
                # SchemaVersion 1 documents written before the outbox have no Owed.
                owed=Owed.from_document(document.get("Owed")),
                # SchemaVersion 1 documents written before the field lack it.
                compensation_ends_in=ProcessState(
                    document.get("CompensationEndsIn", ProcessState.COMPENSATED.value)
                ),
                retry_budget=int(document["RetryBudget"])
                if "RetryBudget" in document
                else _default_budget(len(steps)).total,
                undo_reserve=int(document["UndoReserve"])
                if "UndoReserve" in document
                else _default_budget(len(steps)).undo_reserve,
                tries_spent=int(document.get("TriesSpent", 0)),
                undo_tries_spent=int(document.get("UndoTriesSpent", 0)),
                # SchemaVersion 1 documents written before tombstones lack both.
                body_hash=document.get("BodyHash"),
                retired_at=_parsed_or_none(document.get("RetiredAt")),
            )
        except KeyError as error:
            raise RecordFormatError(
                f"state record {document.get('id')!r} lacks field {error}"
            ) from error
        except ValueError as error:
            raise RecordFormatError(
                f"state record {document.get('id')!r} is malformed: {error}"
            ) from error


def _default_budget(steps: int) -> RetryBudget:
    """The budget of a SchemaVersion 1 document written before the retry budget was kept:
    the default one, with nothing spent yet (C4). Only such documents pay for computing it."""
    return RetryBudget.for_order(
        DEFAULT_RETRY_BUDGET, steps=max(1, steps), supervisor_attempts=DEFAULT_MAX_FAILURES
    )
