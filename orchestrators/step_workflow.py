"""The step workflow (workflow version 2): one attempt of one multi-step order, and its undo.

The Scheduler of the pattern (D4-D6, E2, E5, E6, E8, C1, C2, C10):

1. For each step from ``resume_at`` (the first step the record does not show completed, so a
   retried order never repeats a completed step, C10): ``begin_step`` sets the step's
   CompleteBy with a fenced write (D4, D6) - the same write that records the step before it
   as completed and logs it for compensation (C1) - and sends the step's agent its request.
   The orchestration picks CompleteBy itself, from the budgets its input carries.
2. A durable timer at CompleteBy races the agent's response (E2). With the agent as an
   activity (E1), one activity, ``run_step_in_activity``, makes the fenced write and then
   runs the agent, and the timer races that activity from the episode that starts the step:
   one activity and one episode per step instead of two. Instances whose input carries no
   budgets (started by older code) replay the two-activity path they started on (C7).
   - Response first, succeeded: on to the next step; after the last, ``finish_steps``
     (Processed, only under the fence, E5).
   - Response first, failed for good: ``fail_step`` (E8): Error when nothing completed,
     otherwise the order starts compensating and this instance undoes it.
   - Timer first, or the agent gave up: end without touching the record (E6); the expired
     CompleteBy is the supervisor's signal.
3. Undo (C1, C2): each step to undo, newest first, gets its own fenced write and deadline
   (``begin_undo``; ``run_undo_in_activity`` with the agent as an activity), then the
   agent's compensation races the timer. All undone:
   ``finish_undo`` (Compensated). An undo that fails for good: ``undo_failed``
   (CompensationFailed, operator alert). Timer first: end; the supervisor finds the stalled
   compensation and starts an instance that resumes it where it stopped.

The steps are data (``domain.workflow``): this code runs whatever list the attempt holds.
It must stay deterministic: time comes from ``context.current_utc_datetime`` only.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

import azure.durable_functions as df

from domain.agent_messages import (
    AgentOperation,
    AgentOutcome,
    AgentResponse,
    agent_response_event,
)
from domain.policies import AGENT_TRANSPORT_ACTIVITY, compensation_deadline, step_deadline
from domain.records import format_utc, parse_utc
from orchestrators.one_step_workflow import STORE_RETRY
from orchestrators.step_payloads import StepRef, StepsAttempt, StepWrite, StepWritten

AGENT_ACTIVITY = "run_agent_in_activity"  # the agent alone, for instances started before (C7)
# The write that begins a step or an undo, alone and followed by the agent in one activity.
BEGIN_ACTIVITIES = {
    AgentOperation.DO: ("begin_step", "run_step_in_activity"),
    AgentOperation.UNDO: ("begin_undo", "run_undo_in_activity"),
}
DEADLINES = {AgentOperation.DO: step_deadline, AgentOperation.UNDO: compensation_deadline}

Steps = Generator[Any, Any, dict[str, Any]]


class Begun(NamedTuple):
    """How a step or an undo began: refused by the fence (``applied`` False), or begun with
    the order document and the agent's answer, None when the deadline came first."""

    applied: bool
    order: dict[str, Any] | None = None
    response: AgentResponse | None = None


def step_workflow(context: df.DurableOrchestrationContext, attempt: StepsAttempt) -> Steps:
    if attempt.undo is not None:
        return (yield from _undo(context, attempt, attempt.undo, order=None))
    done: StepRef | None = None
    order: dict[str, Any] | None = None
    for index in range(attempt.resume_at, len(attempt.steps)):
        step = StepRef(index, attempt.steps[index])
        begun = yield from _begin(context, attempt, AgentOperation.DO, step, done, order)
        if not begun.applied:
            return {"outcome": "superseded"}
        order, response = begun.order, begun.response
        if response is None:
            return {"outcome": "timed-out", "step": step.name}
        if response.outcome is AgentOutcome.FAILED:
            failed = yield from _write(
                context, "fail_step", attempt, step=step, reason=response.detail, order=order
            )
            if not failed.applied:
                return {"outcome": "superseded"}
            if failed.undo:
                return (yield from _undo(context, attempt, failed.undo_steps, order))
            return {"outcome": "failed", "step": step.name}
        if response.outcome is not AgentOutcome.SUCCEEDED:
            return {"outcome": response.outcome.value, "step": step.name}
        done = StepRef(index, step.name, response.reference)
    finished = yield from _write(context, "finish_steps", attempt, done=done)
    return {"outcome": "completed" if finished.applied else "superseded"}


def _undo(
    context: df.DurableOrchestrationContext,
    attempt: StepsAttempt,
    steps: tuple[StepRef, ...],
    order: dict[str, Any] | None,
) -> Steps:
    undone: StepRef | None = None
    for step in steps:
        begun = yield from _begin(context, attempt, AgentOperation.UNDO, step, undone, order)
        if not begun.applied:
            return {"outcome": "superseded"}
        order, response = begun.order, begun.response
        if response is None:
            return {"outcome": "compensation-stalled", "step": step.name}
        if response.outcome is AgentOutcome.FAILED:
            failed = yield from _write(
                context, "undo_failed", attempt, step=step, reason=response.detail
            )
            return {"outcome": "compensation-failed" if failed.applied else "superseded"}
        if response.outcome is not AgentOutcome.SUCCEEDED:
            return {"outcome": "compensation-stalled", "step": step.name}
        undone = step
    finished = yield from _write(context, "finish_undo", attempt, done=undone)
    return {"outcome": "compensated" if finished.applied else "superseded"}


def _begin(
    context: df.DurableOrchestrationContext,
    attempt: StepsAttempt,
    operation: AgentOperation,
    step: StepRef,
    done: StepRef | None,
    order: dict[str, Any] | None,
) -> Generator[Any, Any, Begun]:
    """Begin `step` (or its undo) under the fence, then race its agent against CompleteBy."""
    now, timeouts = context.current_utc_datetime, attempt.timeouts
    deadline = None if timeouts is None else DEADLINES[operation](now, timeouts)
    call = StepWrite.of(
        attempt,
        now,
        step=step,
        done=done,
        order=order,
        agent_transport=attempt.agent_transport,
        complete_by=None if deadline is None else format_utc(deadline),
    )
    alone, with_agent = BEGIN_ACTIVITIES[operation]
    if deadline is not None and attempt.agent_transport == AGENT_TRANSPORT_ACTIVITY:
        run = context.call_activity_with_retry(with_agent, STORE_RETRY, call.to_dict())
        timer = context.create_timer(deadline)
        if (yield context.task_any([run, timer])) == timer:
            return Begun(applied=True, order=order)
        timer.cancel()
        # Yielded again, the finished activity gives its answer, or raises what failed it.
        ran = StepWritten.from_dict((yield run))
        if not ran.applied or ran.request is None:
            return Begun(applied=False)
        request_id = str(ran.request["requestId"])
        return Begun(True, ran.order, AgentResponse.answering(request_id, ran.response))
    started = yield from _called(context, alone, call)
    if not started.applied or started.request is None:
        return Begun(applied=False)
    response = yield from _agent_answer(context, started.request, attempt.agent_transport)
    return Begun(True, started.order, response)


def _write(
    context: df.DurableOrchestrationContext,
    activity: str,
    attempt: StepsAttempt,
    **fields: Any,
) -> Generator[Any, Any, StepWritten]:
    return (
        yield from _called(
            context, activity, StepWrite.of(attempt, context.current_utc_datetime, **fields)
        )
    )


def _called(
    context: df.DurableOrchestrationContext, activity: str, call: StepWrite
) -> Generator[Any, Any, StepWritten]:
    result = yield context.call_activity_with_retry(activity, STORE_RETRY, call.to_dict())
    return StepWritten.from_dict(result)


def _agent_answer(
    context: df.DurableOrchestrationContext, request_document: dict[str, Any], transport: str
) -> Generator[Any, Any, AgentResponse | None]:
    """The agent's answer to this request, or None when its deadline came first (E2, E6)."""
    # The activity that sent the request built this document: its id and deadline are all
    # the race needs, read without parsing the whole request on every replay.
    request_id = str(request_document["requestId"])
    timer = context.create_timer(parse_utc(str(request_document["deadline"])))
    if transport == AGENT_TRANSPORT_ACTIVITY:
        # Only instances whose input carries no CompleteBy budgets come here (C7).
        agent = context.call_activity(AGENT_ACTIVITY, request_document)
    else:
        # The answer's own event name: one raised before this wait opened is buffered by the
        # SDK for this wait alone (agent_response_event says why the name is per request).
        agent = context.wait_for_external_event(agent_response_event(request_id))
    winner = yield context.task_any([agent, timer])
    if winner == timer:
        return None
    response = AgentResponse.answering(request_id, agent.result)
    timer.cancel()
    return response
