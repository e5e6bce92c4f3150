"""Durable Task history events in the JSON shape the Python SDK replays.

The Durable extension hands the SDK a list of DTFx history events (PascalCase keys,
``EventType`` as an integer, ``Timestamp`` as ISO-8601 UTC).  This module owns that shape:
the event type numbers, the constructors the engine uses, and timestamp (de)serialisation.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

HistoryEvent = dict[str, Any]


class EventType(IntEnum):
    """DTFx history event types (the numbering of the SDK's ``HistoryEventType``)."""

    EXECUTION_STARTED = 0
    EXECUTION_COMPLETED = 1
    EXECUTION_TERMINATED = 3
    TASK_SCHEDULED = 4
    TASK_COMPLETED = 5
    TASK_FAILED = 6
    SUB_ORCHESTRATION_CREATED = 7
    SUB_ORCHESTRATION_COMPLETED = 8
    SUB_ORCHESTRATION_FAILED = 9
    TIMER_CREATED = 10
    TIMER_FIRED = 11
    ORCHESTRATOR_STARTED = 12
    ORCHESTRATOR_COMPLETED = 13
    EVENT_RAISED = 15


DTFX_NAMES = {
    EventType.EXECUTION_STARTED: "ExecutionStarted",
    EventType.EXECUTION_COMPLETED: "ExecutionCompleted",
    EventType.EXECUTION_TERMINATED: "ExecutionTerminated",
    EventType.TASK_SCHEDULED: "TaskScheduled",
    EventType.TASK_COMPLETED: "TaskCompleted",
    EventType.TASK_FAILED: "TaskFailed",
    EventType.SUB_ORCHESTRATION_CREATED: "SubOrchestrationInstanceCreated",
    EventType.SUB_ORCHESTRATION_COMPLETED: "SubOrchestrationInstanceCompleted",
    EventType.SUB_ORCHESTRATION_FAILED: "SubOrchestrationInstanceFailed",
    EventType.TIMER_CREATED: "TimerCreated",
    EventType.TIMER_FIRED: "TimerFired",
    EventType.ORCHESTRATOR_STARTED: "OrchestratorStarted",
    EventType.ORCHESTRATOR_COMPLETED: "OrchestratorCompleted",
    EventType.EVENT_RAISED: "EventRaised",
}
"""Each event type's name in DTFx's ``EventType``, as the Durable extension's JSON shows it."""


class OrchestrationStatusCode(IntEnum):
    """``OrchestrationStatus`` values carried by ExecutionCompleted events."""

    COMPLETED = 1
    FAILED = 3
    TERMINATED = 5


def format_timestamp(moment: dt.datetime) -> str:
    """Render an aware datetime the way the extension does (fixed width, UTC, ``Z``).

    The fixed width also makes the stored strings sort chronologically in SQLite.
    """
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {moment!r} has no timezone; the engine works in UTC")
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> dt.datetime:
    """Parse a timestamp written by ``format_timestamp`` or by the SDK's actions."""
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def new_event(
    event_type: EventType, timestamp: dt.datetime, event_id: int = -1, **fields: Any
) -> HistoryEvent:
    """Build one history event; ``fields`` are the type-specific PascalCase attributes."""
    return {
        "EventType": int(event_type),
        "EventId": event_id,
        "IsPlayed": False,
        "Timestamp": format_timestamp(timestamp),
        **fields,
    }


def execution_started(
    timestamp: dt.datetime,
    name: str,
    instance_id: str,
    input_json: str | None,
    parent_instance_id: str | None = None,
    *,
    version: str | None,
) -> HistoryEvent:
    """ExecutionStarted with the instance's orchestration version (None: it has none).

    ``Version`` is present even when None: the SDK reads it unconditionally, as
    ``context.version``.
    """
    parent = (
        {"OrchestrationInstance": {"InstanceId": parent_instance_id}}
        if parent_instance_id
        else None
    )
    return new_event(
        EventType.EXECUTION_STARTED,
        timestamp,
        Name=name,
        Input=input_json,
        Version=version,
        OrchestrationInstance={"InstanceId": instance_id},
        ParentInstance=parent,
    )


def event_type_name(event: HistoryEvent) -> str:
    """Human-readable type of a stored event, for status output and error messages."""
    try:
        return EventType(event["EventType"]).name
    except ValueError:
        return f"EventType {event['EventType']}"


@dataclass(frozen=True)
class BufferedEvent:
    """An external event raised for an instance and not yet delivered to a wait."""

    buffer_id: int
    name: str
    event: HistoryEvent
