"""The scheduler's side of the agent queue pair (E1, E3, E4, E6).

`send_agent_request` puts a request on its agent's queue under its stable MessageId (E4).
`receive_agent_response` (AGENT_RESPONSES_QUEUE) raises the orchestration's event named
after the request it answers (E3); a response for a finished or unknown instance is late and
dropped (E6), and one that breaks the contract is dead-lettered with the reason.
"""

from __future__ import annotations

import azure.durable_functions as df
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

import bootstrap
from adapters.codec import PayloadError, from_json, to_data, to_json
from adapters.message_bodies import NotADataBody, data_body
from adapters.message_settlement import complete, dead_letter
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
        response = from_json(data_body(message), AgentResponse)
    except (NotADataBody, PayloadError) as error:
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
