"""The scheduler's side of the agent queue pair (E1, E3, E4).

``send_agent_request`` puts the request on its agent's request queue (<AGENT>_REQUESTS_QUEUE)
with a stable MessageId, so a re-run of the activity that sends it is removed by duplicate
detection (E4).
``receive_agent_response`` is triggered by AGENT_RESPONSES_QUEUE and raises the
orchestration's external event, named after the request it answers (one name per request:
``agent_response_event``) and carrying the request id the orchestrator checks (E3). A response for
an instance that has finished or never existed is late or stray: it is logged and dropped
(E6). A response that breaks the contract is dead-lettered with the reason. Taking a response
in is a span of the order's trace, which the response message carried (C9).
"""

from __future__ import annotations

import azure.durable_functions as df
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

import bootstrap
from adapters.codec import PayloadError, from_json, to_data, to_json
from adapters.message_settlement import body_bytes, complete, dead_letter
from domain.agent_messages import AgentRequest, AgentResponse
from domain.outgoing_messages import OutgoingMessage
from domain.records import InstanceId, RecordFormatError
from observability import logs
from observability.tracing import annotate, order_span

bp = df.Blueprint()
log = logs.get_logger("app.agent_bridge")

FINISHED = {
    df.OrchestrationRuntimeStatus.Completed,
    df.OrchestrationRuntimeStatus.Failed,
    df.OrchestrationRuntimeStatus.Terminated,
}


async def send_agent_request(request: AgentRequest, queue: str) -> None:
    await bootstrap.publisher().send(
        OutgoingMessage(
            queue=queue,
            body=to_json(request),
            message_id=request.message_id,
            correlation_id=request.order.order_id,
            subject=request.step,
        )
    )


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_RESPONSES_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
@bp.durable_client_input(client_name="client")
async def receive_agent_response(
    message: ServiceBusReceivedMessage,
    message_actions: ServiceBusMessageActions,
    client: df.DurableOrchestrationClient,
) -> None:
    try:
        response = from_json(body_bytes(message), AgentResponse)
    except PayloadError as error:
        await dead_letter(
            message_actions, message, reason="InvalidAgentResponse", description=str(error)
        )
        return
    with (
        logs.correlated(instance_id=response.instance_id),
        order_span("agent.response", instance_id=response.instance_id) as span,
    ):
        try:
            instance = InstanceId.parse(response.instance_id)
        except RecordFormatError:
            pass
        else:
            annotate(span, order_id=instance.order_id, attempt=instance.attempt)
        span.set_attribute("agent.outcome", response.outcome.value)
        try:
            await client.raise_event(response.instance_id, response.event_name, to_data(response))
        except Exception:
            status = await client.get_status(response.instance_id)
            if status.runtime_status is not None and status.runtime_status not in FINISHED:
                raise  # a live instance that could not be reached: retry through redelivery
            log.info("late agent response dropped", request=response.request_id)
    await complete(message_actions, message)
