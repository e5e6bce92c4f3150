"""Orchestration status as the Durable client reports it, and the client-side errors.

Fields follow ``DurableOrchestrationStatus`` (name, instanceId, createdTime,
lastUpdatedTime, input, output, runtimeStatus, customStatus, historyEvents) so the same
record serves the engine's async API and the emulated HTTP management API
(``management_http``).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from dataclasses import dataclass
from typing import Any

from devhost.durable.history import HistoryEvent, event_type_name, format_timestamp


class RuntimeStatus(enum.StrEnum):
    """``OrchestrationRuntimeStatus`` values."""

    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETED = "Completed"
    CONTINUED_AS_NEW = "ContinuedAsNew"
    FAILED = "Failed"
    TERMINATED = "Terminated"

    @property
    def is_terminal(self) -> bool:
        return self in (RuntimeStatus.COMPLETED, RuntimeStatus.FAILED, RuntimeStatus.TERMINATED)


@dataclass(frozen=True)
class OrchestrationStatus:
    """The status of one instance."""

    name: str
    instance_id: str
    created_time: dt.datetime
    last_updated_time: dt.datetime
    input: Any
    output: Any
    runtime_status: RuntimeStatus
    custom_status: Any
    history: list[HistoryEvent] | None

    def to_json(self) -> dict[str, Any]:
        """The JSON body of the management API's status response."""
        body: dict[str, Any] = {
            "name": self.name,
            "instanceId": self.instance_id,
            "runtimeStatus": self.runtime_status.value,
            "input": self.input,
            "customStatus": self.custom_status,
            "output": self.output,
            "createdTime": _api_time(self.created_time),
            "lastUpdatedTime": _api_time(self.last_updated_time),
        }
        if self.history is not None:
            body["historyEvents"] = [_readable(event) for event in self.history]
        return body


def decode_json(text: str | None) -> Any:
    """Stored payloads are JSON text; None means absent."""
    return None if text is None else json.loads(text)


def _api_time(moment: dt.datetime) -> str:
    return format_timestamp(moment).split(".")[0] + "Z"


def _readable(event: HistoryEvent) -> dict[str, Any]:
    return {**event, "EventType": event_type_name(event)}


class DurableClientError(Exception):
    """A client operation that Durable Functions would refuse."""


class InstanceNotFoundError(DurableClientError):
    def __init__(self, instance_id: str) -> None:
        super().__init__(f"no orchestration instance with id '{instance_id}' exists")
        self.instance_id = instance_id


class InstanceAlreadyExistsError(DurableClientError):
    def __init__(self, instance_id: str, runtime_status: str) -> None:
        super().__init__(
            f"an orchestration instance with id '{instance_id}' already exists and is "
            f"{runtime_status}; wait for it to finish, terminate it, or use another id"
        )
        self.instance_id = instance_id


class InvalidInstanceIdError(DurableClientError):
    def __init__(self, instance_id: str, reason: str) -> None:
        super().__init__(f"invalid orchestration instance id {instance_id!r}: {reason}")
        self.instance_id = instance_id
