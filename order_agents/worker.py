"""The fulfilment agent as a separate worker behind the Service Bus queue pair (E1, E4, E7).

Triggered by AGENT_REQUESTS_QUEUE; runs the agent's call policy against the remote
fulfilment service and answers on AGENT_RESPONSES_QUEUE with a MessageId derived from the
request, so a redelivered request produces a duplicate that Service Bus removes (E4). A
request whose deadline already passed starts no side effect (E7) and gets a ``gave-up``
answer. The same policy runs in-process as the ``fulfil_in_activity`` activity (E1's
activity shape).
"""

from __future__ import annotations

import logging
from typing import Any

import azure.durable_functions as df
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

import bootstrap
from adapters.message_settlement import body_bytes, complete, dead_letter
from domain.agent_messages import AgentMessageError, AgentRequest, AgentResponse
from domain.outgoing_messages import OutgoingMessage
from order_agents.fulfilment_agent import run_fulfilment_agent
from order_agents.fulfilment_client import FulfilmentClient

bp = df.Blueprint()
log = logging.getLogger("app.agent_worker")


async def _fulfil(request: AgentRequest) -> AgentResponse:
    app = bootstrap.services()
    client = FulfilmentClient(app.settings.fulfilment_base_url, bootstrap.http_session())
    return await run_fulfilment_agent(
        request, client, app.breaker, app.settings.agent_policy, now=bootstrap.now
    )


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_REQUESTS_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
async def fulfil_order_request(
    message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
) -> None:
    try:
        request = AgentRequest.from_json(body_bytes(message))
    except AgentMessageError as error:
        await dead_letter(
            message_actions, message, reason="InvalidAgentRequest", description=str(error)
        )
        return
    response = await _fulfil(request)
    log.info(
        "agent answered order=%s instance=%s outcome=%s",
        request.order.order_id,
        request.instance_id,
        response.outcome.value,
    )
    await bootstrap.publisher().send(
        OutgoingMessage(
            queue=bootstrap.services().settings.agent_responses_queue,
            body=response.to_json(),
            message_id=response.message_id,
            correlation_id=request.order.order_id,
            subject=response.outcome.value,
        )
    )
    await complete(message_actions, message)


@bp.activity_trigger(input_name="request")
async def fulfil_in_activity(request: Any) -> dict[str, Any]:
    # Any, the JSON value the trigger delivers: the Python worker refuses a builtin generic
    # such as dict[str, Any] on a binding parameter, and with it the whole app.
    response = await _fulfil(AgentRequest.from_document(request))
    return response.to_document()
