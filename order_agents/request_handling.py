"""Serving one agent request from a request queue (E1, E3, E4, E7, C4): `serve_request`, which
every agent's queue trigger shares.

A request that breaks the contract is dead-lettered with the reason. Any other is run and
answered on AGENT_RESPONSES_QUEUE under a MessageId derived from the request, so a
redelivered request's answer is a duplicate Service Bus removes (E4); one past its deadline
starts no side effect and is answered ``gave-up`` (E7). Each delivery spends only its share
of the request's tries (`domain.policies.delivery_tries`), so all the deliveries messaging may
make (AGENT_DELIVERY_ATTEMPTS) together never spend more than the request drew (C4).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)

import bootstrap
from adapters.codec import PayloadError, from_json, to_json
from adapters.message_bodies import NotADataBody, data_body
from adapters.message_settlement import complete, dead_letter
from domain.agent_messages import AgentRequest, AgentResponse
from domain.outgoing_messages import OutgoingMessage
from domain.policies import delivery_tries
from observability import logs
from observability.tracing import order_span

log = logs.get_logger("app.agents")

Agent = Callable[[AgentRequest, int], Awaitable[AgentResponse]]
"""Runs a request, making at most the given number of calls (C4)."""


def granted_tries(request: AgentRequest) -> int:
    """The calls the request may make over all its deliveries (C4): what it carries, or for
    a request sent before requests carried their tries, what a request draws today."""
    if request.tries is None:
        return bootstrap.services().settings.tries_per_request
    return request.tries


async def serve_request(
    message: ServiceBusReceivedMessage, actions: ServiceBusMessageActions, agent: Agent
) -> None:
    try:
        request = from_json(data_body(message), AgentRequest)
    except (NotADataBody, PayloadError) as error:
        await dead_letter(actions, message, reason="InvalidAgentRequest", description=str(error))
        return
    # Every record of this request - the agent's, the publisher's, the settlement's - carries
    # the order, attempt and step it is about (C9); so does its span.
    with (
        logs.correlated(instance_id=request.instance_id, step=request.step),
        order_span(
            "agent.serve",
            order_id=request.order.order_id,
            instance_id=request.instance_id,
            attempt=request.attempt,
            step=request.step,
        ),
    ):
        # The delivery count is that of earlier deliveries that failed: 0 on the first (C4).
        tries = delivery_tries(
            granted_tries(request),
            delivery=(message.delivery_count or 0) + 1,
            deliveries=bootstrap.services().settings.agent_delivery_attempts,
        )
        response = await agent(request, tries)
        log.info(
            "agent answered", operation=request.operation.value, outcome=response.outcome.value
        )
        await bootstrap.publisher().send(
            OutgoingMessage(
                queue=bootstrap.services().settings.agent_responses_queue,
                body=to_json(response),
                message_id=response.message_id,
                correlation_id=request.order.order_id,
                subject=response.outcome.value,
            )
        )
    await complete(actions, message)
