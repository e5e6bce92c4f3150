"""The one-step workflow (workflow version 1): one attempt of one fulfilment order.

Rules D4-D6, E2, E5, E6, E8. Orders accepted before the step workflow existed run it to the
end (C7).

1. ``begin_attempt`` loads the order and sets CompleteBy, fenced on LockedBy (D4, D6), and
   with the Service Bus transport (the default, E1 worker shape) puts the agent's request on
   the request queue; it returns the request either way.
2. The agent answers: as an external event raised from the response queue, or as the
   ``fulfil_in_activity`` activity (E1 activity shape, AGENT_TRANSPORT=activity).
3. A durable timer at CompleteBy races the agent's response (E2); the loser is cancelled.
4. Response first: ``complete_order`` (Processed, only while the fence holds, E5) or, for a
   non-transient failure, ``fail_order`` (Error, operator alert, ``failed`` status, E8).
   Timer first, or the agent gave up: the orchestration ends WITHOUT touching the record
   (E6); the expired CompleteBy is the supervisor's signal.

Parallelism comes from one instance per order attempt, never from inside one (D5). The code
must stay deterministic: time comes from ``context.current_utc_datetime`` only.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from domain.agent_messages import (
    AGENT_RESPONSE_EVENT,
    AgentOutcome,
    AgentRequest,
    AgentResponse,
    agent_response_event,
)
from domain.policies import AGENT_TRANSPORT_ACTIVITY
from orchestrators.payloads import AttemptInput, StepCall, StepStarted

# Store writes are idempotent, so a transient store fault is retried here, within the step's
# own deadline; what outlasts this is the supervisor's to recover.
STORE_RETRY = df.RetryOptions(first_retry_interval_in_milliseconds=500, max_number_of_attempts=3)


def one_step_workflow(
    context: df.DurableOrchestrationContext, attempt: AttemptInput
) -> Generator[Any, Any, dict[str, Any]]:
    call = StepCall.of(
        attempt.instance, context.current_utc_datetime, agent_transport=attempt.agent_transport
    )
    started = StepStarted.from_dict(
        (yield context.call_activity_with_retry("begin_attempt", STORE_RETRY, call.to_dict()))
    )
    if not started.applied or started.request is None:
        return {"outcome": "superseded"}
    request = AgentRequest.from_document(started.request)
    timer = context.create_timer(request.deadline)
    if attempt.agent_transport == AGENT_TRANSPORT_ACTIVITY:
        answers = [context.call_activity("fulfil_in_activity", started.request)]
    else:
        # The answer comes under its request's own event name; an instance started before
        # the names were per request may already hold it under the old shared name (C7).
        # Each name is waited on once, so an early event reaches this wait alone (#507).
        answers = [
            context.wait_for_external_event(agent_response_event(request.request_id)),
            context.wait_for_external_event(AGENT_RESPONSE_EVENT),
        ]
    winner = yield context.task_any([*answers, timer])
    if winner == timer:
        return {"outcome": "timed-out"}
    response = AgentResponse.answering(request.request_id, winner.result)
    timer.cancel()
    done = StepCall.of(attempt.instance, context.current_utc_datetime, response.detail)
    if response.outcome is AgentOutcome.SUCCEEDED:
        result = yield context.call_activity_with_retry(
            "complete_order_step", STORE_RETRY, done.to_dict()
        )
        return {"outcome": "completed" if result["applied"] else "superseded"}
    if response.outcome is AgentOutcome.FAILED:
        result = yield context.call_activity_with_retry(
            "fail_order_step", STORE_RETRY, done.to_dict()
        )
        return {"outcome": "failed" if result["applied"] else "superseded"}
    return {"outcome": response.outcome.value, "detail": response.detail}
