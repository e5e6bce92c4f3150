"""The agents' Functions entry points, one per remote service (E1, E4, E7, E9, C1, C8).

`stock_agent`, `payment_agent` and `shipping_agent` are the request-queue triggers
(<AGENT>_REQUESTS_QUEUE) of the queue-pair shape; `run_step_agent_once` runs an agent inside
a step's activity, E1's other shape. Either way `run_step_agent` does or undoes the step
through its service's client, under the call policy.
"""

from __future__ import annotations

import azure.durable_functions as df
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

import bootstrap
from domain.agent_messages import AgentOutcome, AgentRequest, AgentResponse
from domain.workflow import declaration
from observability import logs
from observability.tracing import order_span
from order_agents.call_policy import request_call, respond, run_agent
from order_agents.remote_services import STEP_SERVICES
from order_agents.request_handling import granted_tries, serve_request
from order_agents.service_client import ServiceClient

bp = df.Blueprint()
log = logs.get_logger("app.agents")


async def run_step_agent(request: AgentRequest, tries: int) -> AgentResponse:
    """The agent of the request's step: do or undo, under the call policy, in at most
    `tries` calls (C4)."""
    agent = declaration(request.step).agent
    api = STEP_SERVICES[agent]
    app = bootstrap.services()
    client = ServiceClient(api, app.settings.service_url(agent), bootstrap.http_session())
    with order_span(
        f"agent.{agent}",
        order_id=request.order.order_id,
        instance_id=request.instance_id,
        attempt=request.attempt,
        step=request.step,
    ) as span:
        span.set_attribute("agent.operation", request.operation.value)
        return await run_agent(
            request,
            request_call(client, request),
            app.breaker(api.name),
            app.settings.agent_policy,
            tries=tries,
            now=bootstrap.now,
        )


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%STOCK_REQUESTS_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
async def stock_agent(
    message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
) -> None:
    await serve_request(message, message_actions, run_step_agent)


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%PAYMENT_REQUESTS_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
async def payment_agent(
    message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
) -> None:
    await serve_request(message, message_actions, run_step_agent)


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%SHIPPING_REQUESTS_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
async def shipping_agent(
    message: ServiceBusReceivedMessage, message_actions: ServiceBusMessageActions
) -> None:
    await serve_request(message, message_actions, run_step_agent)


async def run_step_agent_once(request: AgentRequest) -> AgentResponse:
    """`run_step_agent` inside an activity the orchestration retries for its store write: an
    unexpected error ends the agent's run as given up (the supervisor retries the attempt
    past its CompleteBy, E6). The activity is its one delivery: it spends all the tries the
    request carries, which its own begin write drew (C4)."""
    try:
        return await run_step_agent(request, granted_tries(request))
    except Exception as error:
        log.exception(
            "agent failed",
            instance_id=request.instance_id,
            step=request.step,
            error=type(error).__name__,
        )
        return respond(request, AgentOutcome.GAVE_UP, f"the agent failed: {type(error).__name__}")
