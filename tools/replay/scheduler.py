"""The gate's source on Azure (C7): a Durable Task Scheduler's in-flight instances with their
full histories, read with Microsoft's ``durabletask`` client, and turned into the events the
Durable Functions SDK replays.

The deployer reaches the scheduler with ``DefaultAzureCredential`` (azd's identity; the
deployment gives it a data role on the task hub); a plain ``http://`` endpoint, the
scheduler's emulator or the devhost's, takes no token.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import grpc
from azure.identity import DefaultAzureCredential
from devhost.durable.history import EventType, HistoryEvent, format_timestamp, new_event
from durabletask import history
from durabletask.azuremanaged.client import DurableTaskSchedulerClient
from durabletask.client import OrchestrationQuery, OrchestrationStatus

from tools.replay.sources import InstanceHistory, SourceError

IN_FLIGHT = (OrchestrationStatus.RUNNING, OrchestrationStatus.PENDING)


def from_scheduler(endpoint: str, task_hub: str) -> list[InstanceHistory]:
    """The histories of the task hub's Running and Pending instances."""
    secure = endpoint.startswith("https://")
    client = DurableTaskSchedulerClient(
        host_address=endpoint,
        taskhub=task_hub,
        token_credential=DefaultAzureCredential() if secure else None,
        secure_channel=secure,
    )
    origin = f"{endpoint} task hub {task_hub}"
    try:
        states = client.get_all_orchestration_states(
            OrchestrationQuery(runtime_status=list(IN_FLIGHT), fetch_inputs_and_outputs=False)
        )
        return [
            InstanceHistory(
                state.instance_id,
                [
                    dtfx_event(event)
                    for event in client.get_orchestration_history(state.instance_id)
                ],
                origin,
            )
            for state in states
        ]
    except grpc.RpcError as error:
        raise SourceError(f"{origin}: {error.code().name}: {error.details()}") from error
    finally:
        client.close()


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def _instance(instance: history.OrchestrationInstance | None) -> dict[str, Any] | None:
    if instance is None:
        return None
    return {"InstanceId": instance.instance_id, "ExecutionId": instance.execution_id}


def _completion(event: Any) -> dict[str, Any]:
    """An activity's or a sub-orchestration's completion."""
    return {"TaskScheduledId": event.task_scheduled_id, "Result": event.result}


def _failure(event: Any) -> dict[str, Any]:
    """An activity's or a sub-orchestration's failure."""
    details = event.failure_details
    return {
        "TaskScheduledId": event.task_scheduled_id,
        "Reason": "" if details is None else details.message,
        "Details": None if details is None else details.stack_trace,
    }


_FIELDS: dict[type[Any], tuple[EventType, Callable[[Any], dict[str, Any]]]] = {
    history.ExecutionStartedEvent: (
        EventType.EXECUTION_STARTED,
        lambda e: {
            "Name": e.name,
            "Version": e.version,
            "Input": e.input,
            "OrchestrationInstance": _instance(e.orchestration_instance),
            "ParentInstance": None,
        },
    ),
    history.ExecutionCompletedEvent: (
        EventType.EXECUTION_COMPLETED,
        lambda e: {"OrchestrationStatus": int(e.orchestration_status), "Result": e.result},
    ),
    history.ExecutionTerminatedEvent: (
        EventType.EXECUTION_TERMINATED,
        lambda e: {"Input": e.input},
    ),
    history.TaskScheduledEvent: (
        EventType.TASK_SCHEDULED,
        lambda e: {"Name": e.name, "Version": e.version or "", "Input": e.input},
    ),
    history.TaskCompletedEvent: (EventType.TASK_COMPLETED, _completion),
    history.TaskFailedEvent: (EventType.TASK_FAILED, _failure),
    history.SubOrchestrationInstanceCreatedEvent: (
        EventType.SUB_ORCHESTRATION_CREATED,
        lambda e: {
            "InstanceId": e.instance_id,
            "Name": e.name,
            "Version": e.version,
            "Input": e.input,
        },
    ),
    history.SubOrchestrationInstanceCompletedEvent: (
        EventType.SUB_ORCHESTRATION_COMPLETED,
        _completion,
    ),
    history.SubOrchestrationInstanceFailedEvent: (EventType.SUB_ORCHESTRATION_FAILED, _failure),
    history.TimerCreatedEvent: (EventType.TIMER_CREATED, lambda e: {"FireAt": _time(e.fire_at)}),
    history.TimerFiredEvent: (
        EventType.TIMER_FIRED,
        lambda e: {"FireAt": _time(e.fire_at), "TimerId": e.timer_id},
    ),
    history.OrchestratorStartedEvent: (EventType.ORCHESTRATOR_STARTED, lambda e: {}),
    history.OrchestratorCompletedEvent: (EventType.ORCHESTRATOR_COMPLETED, lambda e: {}),
    history.EventRaisedEvent: (
        EventType.EVENT_RAISED,
        lambda e: {"Name": e.name, "Input": e.input},
    ),
}


def dtfx_event(event: history.HistoryEvent) -> HistoryEvent:
    """A scheduler's history event as the Durable Functions SDK replays it."""
    kind = _FIELDS.get(type(event))
    if kind is None:
        raise SourceError(
            f"history event {type(event).__name__} has no Durable Functions form the gate replays"
        )
    event_type, fields = kind
    return new_event(event_type, event.timestamp, event.event_id, **fields(event))
