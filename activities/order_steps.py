"""The orchestration's fenced state writes (D4, D6, E5, E8, R2) as activity functions.

Each takes the orchestration's own (replay-safe) time and runs one service-layer step; a
status or alert is sent only when the write applied for this attempt. A stale attempt's
write changes nothing and sends nothing (D4).

``begin_attempt`` also hands the agent its request when the attempt uses the Service Bus
transport (E1, E4): once the fence held, so a stale attempt sends nothing; with a stable
MessageId, so a retried activity's second send is removed by duplicate detection. One
activity instead of two saves the orchestration a replay and a round trip per order. The step
that began is logged once its agent has the request (C9); what the writes did is logged by
`services.steps`.
"""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df

import bootstrap
from activities.agent_bridge import send_agent_request
from adapters import blocking_calls
from domain.agent_messages import AgentRequest
from domain.outgoing_messages import alert_outgoing, status_outgoing
from domain.policies import AGENT_TRANSPORT_ACTIVITY
from observability import logs
from observability.tracing import status_span
from orchestrators.payloads import StepCall, StepStarted
from services.operator import load_order
from services.steps import StepOutcome, complete_order, fail_order, start_step

bp = df.Blueprint()
STEP = "fulfil"
log = logs.get_logger("app.steps")

# Activity inputs are annotated Any, the JSON value the trigger delivers, and parsed into
# their dataclass first thing: the Python worker refuses a builtin generic such as
# dict[str, Any] on a binding parameter and with it the whole app (its indexing check).


@bp.activity_trigger(input_name="call")
async def begin_attempt(call: Any) -> dict[str, Any]:
    app = bootstrap.services()
    step = StepCall.from_dict(call)
    order = await blocking_calls.run(load_order, app.orders, step.instance)
    outcome = await blocking_calls.run(
        start_step,
        app.states,
        step.instance,
        step=STEP,
        now=step.now,
        timeouts=app.settings.timeouts,
    )
    if not outcome.applied or outcome.record is None or outcome.record.complete_by is None:
        return StepStarted(applied=False).to_dict()
    request = AgentRequest(
        instance_id=str(step.instance),
        step=STEP,
        order=order,
        deadline=outcome.record.complete_by,
    )
    if step.agent_transport != AGENT_TRANSPORT_ACTIVITY:
        await send_agent_request(request, app.settings.agent_requests_queue)
    log.info(
        "step begun", instance_id=step.instance, step=STEP, agent_transport=step.agent_transport
    )
    return StepStarted(applied=True, request=request.to_document()).to_dict()


@bp.activity_trigger(input_name="call")
async def complete_order_step(call: Any) -> dict[str, Any]:
    app = bootstrap.services()
    step = StepCall.from_dict(call)
    outcome = await blocking_calls.run(
        complete_order,
        app.states,
        step.instance,
        now=step.now,
        reply_queues=app.settings.reply_queues,
    )
    return await _report(outcome)


@bp.activity_trigger(input_name="call")
async def fail_order_step(call: Any) -> dict[str, Any]:
    app = bootstrap.services()
    step = StepCall.from_dict(call)
    outcome = await blocking_calls.run(
        fail_order,
        app.states,
        step.instance,
        reason=step.reason or "the remote service refused the order",
        compensate=False,
        now=step.now,
        timeouts=app.settings.timeouts,
        reply_queues=app.settings.reply_queues,
    )
    return await _report(outcome)


async def _report(outcome: StepOutcome) -> dict[str, Any]:
    publisher = bootstrap.publisher()
    if outcome.alert is not None:
        queue = bootstrap.services().settings.operator_alerts_queue
        await publisher.send(alert_outgoing(outcome.alert, queue))
    if outcome.status is not None:
        status = outcome.status
        with status_span(status.correlation_id, status.subject):
            await publisher.send(status_outgoing(status))
    return {"applied": outcome.applied}
