"""The read side of the Durable Task Scheduler's gRPC API, emulated on the engine.

On Azure, a Durable Functions app's full orchestration histories are read from its Durable
Task Scheduler, through the ``TaskHubSidecarService`` that Microsoft's ``durabletask`` client
calls: ``QueryInstances`` lists instances, ``StreamInstanceHistory`` streams one instance's
history events. (The Durable extension's HTTP API shows only a summary of a history.) This
server answers those two calls, with the messages of the ``durabletask`` package, on
127.0.0.1 without TLS or a token, as the scheduler's emulator does; a request must name the
host's task hub in its ``taskhub`` metadata. Every other call is UNIMPLEMENTED.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import durabletask.internal.orchestrator_service_pb2 as pb
import grpc
from durabletask.internal import orchestrator_service_pb2_grpc as service
from google.protobuf import timestamp_pb2, wrappers_pb2

from devhost.durable.engine import DurableEngine
from devhost.durable.history import EventType, HistoryEvent, parse_timestamp
from devhost.durable.status import RuntimeStatus

TASK_HUB_METADATA = "taskhub"
HISTORY_CHUNK = 100
"""Events per streamed chunk."""

_STATUSES = {
    RuntimeStatus.RUNNING: pb.ORCHESTRATION_STATUS_RUNNING,
    RuntimeStatus.COMPLETED: pb.ORCHESTRATION_STATUS_COMPLETED,
    RuntimeStatus.CONTINUED_AS_NEW: pb.ORCHESTRATION_STATUS_CONTINUED_AS_NEW,
    RuntimeStatus.FAILED: pb.ORCHESTRATION_STATUS_FAILED,
    RuntimeStatus.TERMINATED: pb.ORCHESTRATION_STATUS_TERMINATED,
    RuntimeStatus.PENDING: pb.ORCHESTRATION_STATUS_PENDING,
}


class SchedulerApi:
    """``QueryInstances`` and ``StreamInstanceHistory`` over ``engine``'s instances."""

    def __init__(self, engine: DurableEngine, task_hub: str) -> None:
        self.engine = engine
        self.task_hub = task_hub
        self.port = 0
        self._server: grpc.aio.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        server = grpc.aio.server()
        service.add_TaskHubSidecarServiceServicer_to_server(_Servicer(self), server)  # type: ignore[no-untyped-call]
        self.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None


class _Servicer(service.TaskHubSidecarServiceServicer):
    def __init__(self, api: SchedulerApi) -> None:
        self._api = api

    async def QueryInstances(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Any:
        await self._check_hub(context)
        wanted = set(request.query.runtimeStatus)
        by_code = {code: status for status, code in _STATUSES.items()}
        statuses = [by_code[code] for code in wanted if code in by_code] or None
        found = await self._api.engine.get_status_by(statuses, None, None)
        prefix = request.query.instanceIdPrefix.value
        return pb.QueryInstancesResponse(
            orchestrationState=[
                pb.OrchestrationState(
                    instanceId=status.instance_id,
                    name=status.name,
                    orchestrationStatus=_STATUSES[status.runtime_status],
                    createdTimestamp=_timestamp(status.created_time),
                    lastUpdatedTimestamp=_timestamp(status.last_updated_time),
                )
                for status in found
                if status.instance_id.startswith(prefix)
            ]
        )

    async def StreamInstanceHistory(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        await self._check_hub(context)
        status = await self._api.engine.get_status(request.instanceId, show_history=True)
        if status is None or status.history is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no orchestration instance '{request.instanceId}'"
            )
            return
        events = [to_proto(event) for event in status.history]
        for start in range(0, len(events), HISTORY_CHUNK):
            yield pb.HistoryChunk(events=events[start : start + HISTORY_CHUNK])

    async def _check_hub(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        named = dict(context.invocation_metadata() or ()).get(TASK_HUB_METADATA)
        if named is None or str(named).lower() != self._api.task_hub.lower():
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"task hub {named!r} does not exist here; this host serves '{self._api.task_hub}'",
            )


def _timestamp(moment: dt.datetime | str | None) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    if moment is not None:
        stamp.FromDatetime(parse_timestamp(moment) if isinstance(moment, str) else moment)
    return stamp


def _text(value: Any) -> wrappers_pb2.StringValue | None:
    return None if value is None else wrappers_pb2.StringValue(value=str(value))


def _instance(value: Any) -> pb.OrchestrationInstance | None:
    if not isinstance(value, Mapping) or value.get("InstanceId") is None:
        return None
    return pb.OrchestrationInstance(
        instanceId=str(value["InstanceId"]), executionId=_text(value.get("ExecutionId"))
    )


def _completed(message: Callable[..., Any]) -> Callable[[HistoryEvent], Any]:
    """The body of a completion (an activity's or a sub-orchestration's) as ``message``."""
    return lambda e: message(
        taskScheduledId=int(e["TaskScheduledId"]), result=_text(e.get("Result"))
    )


def _failed(message: Callable[..., Any]) -> Callable[[HistoryEvent], Any]:
    """The body of a failure (an activity's or a sub-orchestration's) as ``message``."""
    return lambda e: message(
        taskScheduledId=int(e["TaskScheduledId"]),
        failureDetails=pb.TaskFailureDetails(
            errorType="Exception",
            errorMessage=str(e.get("Reason") or ""),
            stackTrace=_text(e.get("Details")),
        ),
    )


_BODIES: dict[int, tuple[str, Callable[[HistoryEvent], Any]]] = {
    EventType.EXECUTION_STARTED: (
        "executionStarted",
        lambda e: pb.ExecutionStartedEvent(
            name=str(e.get("Name")),
            version=_text(e.get("Version")),
            input=_text(e.get("Input")),
            orchestrationInstance=_instance(e.get("OrchestrationInstance")),
        ),
    ),
    EventType.EXECUTION_COMPLETED: (
        "executionCompleted",
        lambda e: pb.ExecutionCompletedEvent(
            orchestrationStatus=pb.OrchestrationStatus.Name(int(e.get("OrchestrationStatus", 0))),
            result=_text(e.get("Result")),
        ),
    ),
    EventType.EXECUTION_TERMINATED: (
        "executionTerminated",
        lambda e: pb.ExecutionTerminatedEvent(input=_text(e.get("Input"))),
    ),
    EventType.TASK_SCHEDULED: (
        "taskScheduled",
        lambda e: pb.TaskScheduledEvent(
            name=str(e.get("Name")), version=_text(e.get("Version")), input=_text(e.get("Input"))
        ),
    ),
    EventType.TASK_COMPLETED: ("taskCompleted", _completed(pb.TaskCompletedEvent)),
    EventType.TASK_FAILED: ("taskFailed", _failed(pb.TaskFailedEvent)),
    EventType.SUB_ORCHESTRATION_CREATED: (
        "subOrchestrationInstanceCreated",
        lambda e: pb.SubOrchestrationInstanceCreatedEvent(
            instanceId=str(e.get("InstanceId")),
            name=str(e.get("Name")),
            version=_text(e.get("Version")),
            input=_text(e.get("Input")),
        ),
    ),
    EventType.SUB_ORCHESTRATION_COMPLETED: (
        "subOrchestrationInstanceCompleted",
        _completed(pb.SubOrchestrationInstanceCompletedEvent),
    ),
    EventType.SUB_ORCHESTRATION_FAILED: (
        "subOrchestrationInstanceFailed",
        _failed(pb.SubOrchestrationInstanceFailedEvent),
    ),
    EventType.TIMER_CREATED: (
        "timerCreated",
        lambda e: pb.TimerCreatedEvent(fireAt=_timestamp(e.get("FireAt"))),
    ),
    EventType.TIMER_FIRED: (
        "timerFired",
        lambda e: pb.TimerFiredEvent(fireAt=_timestamp(e.get("FireAt")), timerId=int(e["TimerId"])),
    ),
    EventType.ORCHESTRATOR_STARTED: (
        "orchestratorStarted",
        lambda e: pb.OrchestratorStartedEvent(),
    ),
    EventType.ORCHESTRATOR_COMPLETED: (
        "orchestratorCompleted",
        lambda e: pb.OrchestratorCompletedEvent(),
    ),
    EventType.EVENT_RAISED: (
        "eventRaised",
        lambda e: pb.EventRaisedEvent(name=str(e.get("Name")), input=_text(e.get("Input"))),
    ),
}


def to_proto(event: HistoryEvent) -> Any:
    """A stored event as the scheduler streams it (``durabletask``'s ``HistoryEvent``)."""
    field, body = _BODIES[int(event["EventType"])]
    return pb.HistoryEvent(
        eventId=int(event.get("EventId", -1)),
        timestamp=_timestamp(event.get("Timestamp")),
        **{field: body(event)},
    )
