"""The fulfilment agent of the one-step workflow (E1, E4, E7, C7).

Behind the Service Bus queue pair: triggered by AGENT_REQUESTS_QUEUE, it runs the call
policy against the remote fulfilment service and answers on AGENT_RESPONSES_QUEUE. The same
agent runs in-process as the ``fulfil_in_activity`` activity (E1's activity shape). It
serves orders accepted before the step workflow existed until the last of them finishes.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

import bootstrap
from domain.agent_messages import AgentRequest, AgentResponse
from order_agents.call_policy import request_call, run_agent
from order_agents.remote_services import FULFILMENT
from order_agents.request_handling import serve_request
from order_agents.service_client import ServiceClient

bp = df.Blueprint()


async def fulfil(request: AgentRequest) -> AgentResponse:
    app = bootstrap.services()
    client = ServiceClient(FULFILMENT, app.settings.fulfilment_base_url, bootstrap.http_session())
    return await run_agent(
        request,
        request_call(client, request),
        app.breaker(FULFILMENT.name),
        app.settings.agent_policy,
        now=bootstrap.now,
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
    await serve_request(message, message_actions, fulfil)


@bp.activity_trigger(input_name="request")
async def fulfil_in_activity(request: Any) -> dict[str, Any]:
    # Any, the JSON value the trigger delivers: the Python worker refuses a builtin generic
    # such as dict[str, Any] on a binding parameter, and with it the whole app.
    response = await fulfil(AgentRequest.from_document(request))
    return response.to_document()
