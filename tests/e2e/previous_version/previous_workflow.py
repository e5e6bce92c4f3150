"""The order workflow as version 1 was released, frozen for the upgrade test (C7).

The previous version of the app runs this orchestrator: the instances it starts are the
version-1 instances an upgrade finds in flight. It is never edited. A change to the app's
workflow that these instances cannot replay breaks orders in flight on Azure; the upgrade
test fails on it, and the way out is a new version beside the old one in
``orchestrators.order_workflow.WORKFLOWS``.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any

import azure.durable_functions as df

from adapters.codec import from_data, to_data
from domain.agent_messages import AgentOperation, AgentOutcome, AgentResponse, agent_response_event
from domain.contracts import Order
from domain.policies import AGENT_TRANSPORT_ACTIVITY, compensation_deadline, step_deadline
from domain.workflow import Step
from orchestrators.payloads import Attempt, StepWrite, StepWritten

bp = df.Blueprint()
RETRY = df.RetryOptions(first_retry_interval_in_milliseconds=500, max_number_of_attempts=3)
BEGIN = {
    AgentOperation.DO: ("begin_step", "run_step_in_activity", step_deadline),
    AgentOperation.UNDO: ("begin_undo", "run_undo_in_activity", compensation_deadline),
}
Outcome = Generator[Any, Any, dict[str, Any]]
Begun = tuple[bool, Order | None, AgentResponse | None]


@bp.orchestration_trigger(context_name="context")
def order_workflow(context: df.DurableOrchestrationContext) -> Outcome:
    if context.version != "1.0":
        raise ValueError(f"the previous version runs 1.0 only, not {context.version!r}")
    attempt = from_data(context.get_input(), Attempt)
    if attempt.undo is not None:
        return (yield from _undo(context, attempt, attempt.undo, None))
    done: Step | None = None
    order: Order | None = None
    for index in range(attempt.resume_at, len(attempt.steps)):
        step = Step(index, attempt.steps[index])
        applied, order, answer = yield from _begin(
            context, attempt, AgentOperation.DO, step, done, order
        )
        if not applied:
            return {"outcome": "superseded"}
        if answer is None:
            return {"outcome": "timed-out", "step": step.name}
        if answer.outcome is AgentOutcome.FAILED:
            now = context.current_utc_datetime
            failed = yield from _write(
                context,
                "fail_step",
                attempt,
                step=step,
                reason=answer.detail or f"the {step.name} service refused the order",
                order=order,
                complete_by=compensation_deadline(now, attempt.timeouts),
            )
            if not failed.applied:
                return {"outcome": "superseded"}
            if failed.undo:
                return (yield from _undo(context, attempt, failed.undo, order))
            return {"outcome": "failed", "step": step.name}
        if answer.outcome is not AgentOutcome.SUCCEEDED:
            return {"outcome": answer.outcome.value, "step": step.name}
        done = Step(index, step.name, answer.reference)
    finished = yield from _write(context, "finish_steps", attempt, done=done)
    return {"outcome": "completed" if finished.applied else "superseded"}


def _undo(
    context: df.DurableOrchestrationContext,
    attempt: Attempt,
    steps: tuple[Step, ...],
    order: Order | None,
) -> Outcome:
    undone: Step | None = None
    for step in steps:
        applied, order, answer = yield from _begin(
            context, attempt, AgentOperation.UNDO, step, undone, order
        )
        if not applied:
            return {"outcome": "superseded"}
        if answer is None or answer.outcome not in (AgentOutcome.SUCCEEDED, AgentOutcome.FAILED):
            return {"outcome": "compensation-stalled", "step": step.name}
        if answer.outcome is AgentOutcome.FAILED:
            failed = yield from _write(
                context,
                "undo_failed",
                attempt,
                step=step,
                reason=answer.detail or f"the {step.name} service refused to undo it",
            )
            return {"outcome": "compensation-failed" if failed.applied else "superseded"}
        undone = step
    finished = yield from _write(context, "finish_undo", attempt, done=undone)
    return {"outcome": "compensated" if finished.applied else "superseded"}


def _begin(
    context: df.DurableOrchestrationContext,
    attempt: Attempt,
    operation: AgentOperation,
    step: Step,
    done: Step | None,
    order: Order | None,
) -> Generator[Any, Any, Begun]:
    now = context.current_utc_datetime
    alone, with_agent, deadline_of = BEGIN[operation]
    deadline = deadline_of(now, attempt.timeouts)
    write = _payload(attempt, now, step=step, done=done, order=order, complete_by=deadline)
    if attempt.agent_transport == AGENT_TRANSPORT_ACTIVITY:
        run = context.call_activity_with_retry(with_agent, RETRY, to_data(write))
        timer = context.create_timer(deadline)
        if (yield context.task_any([run, timer])) == timer:
            return True, order, None
        timer.cancel()
        ran = from_data((yield run), StepWritten)
        if not ran.applied or ran.request is None or ran.response is None:
            return False, None, None
        return True, ran.request.order, ran.response.answering(ran.request.request_id)
    started = from_data(
        (yield context.call_activity_with_retry(alone, RETRY, to_data(write))), StepWritten
    )
    if not started.applied or started.request is None:
        return False, None, None
    request_id = started.request.request_id
    timer = context.create_timer(deadline)
    answer = context.wait_for_external_event(agent_response_event(request_id))
    if (yield context.task_any([answer, timer])) == timer:
        return True, started.request.order, None
    timer.cancel()
    response = from_data(answer.result, AgentResponse).answering(request_id)
    return True, started.request.order, response


def _write(
    context: df.DurableOrchestrationContext, activity: str, attempt: Attempt, **fields: Any
) -> Generator[Any, Any, StepWritten]:
    write = _payload(attempt, context.current_utc_datetime, **fields)
    return from_data(
        (yield context.call_activity_with_retry(activity, RETRY, to_data(write))), StepWritten
    )


def _payload(attempt: Attempt, at: datetime, **fields: Any) -> StepWrite:
    return StepWrite(
        attempt.order_id, attempt.attempt, at, agent_transport=attempt.agent_transport, **fields
    )
