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

from devhost.durable.history import DTFX_NAMES, HistoryEvent, event_type_name, format_timestamp


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

    def to_json(self, show_history_output: bool = False) -> dict[str, Any]:
        """The JSON body of the management API's status response; its history is the
        extension's summary (``summarised``), with results only with ``show_history_output``."""
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
            body["historyEvents"] = summarised(self.history, show_history_output)
        return body


def decode_json(text: str | None) -> Any:
    """Stored payloads are JSON text; None means absent."""
    return None if text is None else json.loads(text)


def _api_time(moment: dt.datetime) -> str:
    return format_timestamp(moment).split(".")[0] + "Z"


_SCHEDULED_BY = {
    "TaskCompleted": "TaskScheduled",
    "TaskFailed": "TaskScheduled",
    "SubOrchestrationInstanceCompleted": "SubOrchestrationInstanceCreated",
    "SubOrchestrationInstanceFailed": "SubOrchestrationInstanceCreated",
}
_DROPPED = {
    "TaskScheduled": ("Version", "Input"),
    "SubOrchestrationInstanceCreated": ("Version", "Input"),
    "ExecutionStarted": ("OrchestrationInstance", "ParentInstance", "Version", "Tags", "Input"),
    "ExecutionTerminated": ("Input",),
    "TimerFired": ("TimerId",),
    "EventRaised": ("Input",),
}
_ORCHESTRATION_STATUSES = {1: "Completed", 3: "Failed", 5: "Terminated"}


def summarised(history: list[HistoryEvent], show_output: bool) -> list[dict[str, Any]]:
    """A history as the Durable extension's HTTP API shows it (``showHistory=true``): each
    completion carries its scheduling event's ``FunctionName`` and ``ScheduledTime`` in its
    place, episode boundaries, event ids and payloads are left out, results are shown only
    with ``show_output`` (``showHistoryOutput=true``). No replay can be made from it."""
    shown: list[dict[str, Any] | None] = []
    scheduled: dict[tuple[str, Any], int] = {}
    for event in history:
        kind = DTFX_NAMES.get(event["EventType"], event_type_name(event))
        item = {**event, "EventType": kind}
        if kind in ("OrchestratorStarted", "OrchestratorCompleted"):
            continue
        if kind in _SCHEDULED_BY.values():
            scheduled[(kind, event.get("EventId"))] = len(shown)
        origin = scheduled.get((_SCHEDULED_BY.get(kind, ""), event.get("TaskScheduledId")))
        if origin is not None:
            source = shown[origin]
            assert source is not None
            item["ScheduledTime"] = source["Timestamp"]
            item["FunctionName"] = source.get("Name")
            shown[origin] = None
            item.pop("TaskScheduledId", None)
        if kind == "ExecutionStarted":
            item["FunctionName"] = item.pop("Name", None)
        if kind == "ExecutionCompleted":
            code = item.get("OrchestrationStatus")
            if isinstance(code, int):
                item["OrchestrationStatus"] = _ORCHESTRATION_STATUSES.get(code, code)
        if not show_output and kind in ("TaskCompleted", "ExecutionCompleted"):
            item.pop("Result", None)
        for name in (*_DROPPED.get(kind, ()), "EventId", "IsPlayed"):
            item.pop(name, None)
        shown.append(item)
    return [item for item in shown if item is not None]


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
