"""The Scheduler's orchestration (D4-D6, E2, E5, E6, E8, C1, C2, C7, C10): one instance per
order attempt.

`order_workflow` runs the steps from the first not completed, each begun by a fenced write
and raced against a durable timer at its CompleteBy; timer first, it ends without touching
the record (E6). It dispatches on `context.version` (`WORKFLOWS`, C7) and is replay-safe.
This module alone names the activities (`ACTIVITIES`, `STATUS_SENDERS`) and builds the
instances' inputs (`attempt_input`, `compensation_input`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import azure.durable_functions as df

from adapters.codec import from_data, to_data
from domain.agent_messages import AgentOperation, AgentOutcome, AgentResponse, agent_response_event
from domain.contracts import Order
from domain.policies import AGENT_TRANSPORT_ACTIVITY, Timeouts, compensation_deadline, step_deadline
from domain.records import InstanceId, ProcessState, StateRecord
from domain.workflow import Step
from observability import logs
from orchestrators.payloads import Attempt, StepWrite, StepWritten
from services.owed_statuses import StatusSenders

bp = df.Blueprint()
log = logs.get_logger("app.orchestrator")

ORCHESTRATOR = "order_workflow"

# The activities, by the names activities/steps.py registers them under.
BEGIN_STEP = "begin_step"
RUN_STEP = "run_step_in_activity"  # the write, then the agent, in one activity (E1)
FINISH_STEPS = "finish_steps"
FAIL_STEP = "fail_step"
BEGIN_UNDO = "begin_undo"
RUN_UNDO = "run_undo_in_activity"
FINISH_UNDO = "finish_undo"
UNDO_FAILED = "undo_failed"
ACTIVITIES = (
    BEGIN_STEP,
    RUN_STEP,
    FINISH_STEPS,
    FAIL_STEP,
    BEGIN_UNDO,
    RUN_UNDO,
    FINISH_UNDO,
    UNDO_FAILED,
)

STATUS_SENDERS = StatusSenders(
    begin_step=(BEGIN_STEP, RUN_STEP),
    finish_steps=FINISH_STEPS,
    fail_step=FAIL_STEP,
    finish_undo=FINISH_UNDO,
    undo_failed=UNDO_FAILED,
    writes=frozenset(ACTIVITIES),
)
"""Which activity sends which status, for the console's view of what an order is owed (R2)."""

# Store writes are idempotent, so a transient store fault is retried here, within the step's
# own deadline; what outlasts this is the supervisor's to recover.
STORE_RETRY = df.RetryOptions(first_retry_interval_in_milliseconds=500, max_number_of_attempts=3)

_BEGIN = {AgentOperation.DO: (BEGIN_STEP, RUN_STEP), AgentOperation.UNDO: (BEGIN_UNDO, RUN_UNDO)}
_DEADLINES = {AgentOperation.DO: step_deadline, AgentOperation.UNDO: compensation_deadline}

Outcome = Generator[Any, Any, dict[str, Any]]


class Begun(NamedTuple):
    """How a step or an undo began: refused by the fence (``applied`` False), or begun, with
    the order and the agent's answer, None when the deadline came first."""

    applied: bool
    order: Order | None = None
    response: AgentResponse | None = None


def run_attempt(context: df.DurableOrchestrationContext, attempt: Attempt) -> Outcome:
    """Workflow version 1: the steps in order, then their undo if the order cannot finish."""
    if attempt.undo is not None:
        return (yield from _undo(context, attempt, attempt.undo, order=None))
    done: Step | None = None
    order: Order | None = None
    for index in range(attempt.resume_at, len(attempt.steps)):
        step = Step(index, attempt.steps[index])
        begun = yield from _begin(context, attempt, AgentOperation.DO, step, done, order)
        if not begun.applied:
            return {"outcome": "superseded"}
        order, response = begun.order, begun.response
        if response is None:
            return {"outcome": "timed-out", "step": step.name}
        if response.outcome is AgentOutcome.FAILED:
            now = context.current_utc_datetime
            failed = yield from _write(
                context,
                FAIL_STEP,
                attempt,
                step=step,
                reason=response.detail or f"the {step.name} service refused the order",
                order=order,
                complete_by=compensation_deadline(now, attempt.timeouts),
            )
            if not failed.applied:
                return {"outcome": "superseded"}
            if failed.undo:
                return (yield from _undo(context, attempt, failed.undo, order))
            return {"outcome": "failed", "step": step.name}
        if response.outcome is not AgentOutcome.SUCCEEDED:
            return {"outcome": response.outcome.value, "step": step.name}
        done = Step(index, step.name, response.reference)
    finished = yield from _write(context, FINISH_STEPS, attempt, done=done)
    return {"outcome": "completed" if finished.applied else "superseded"}


WORKFLOWS: dict[int, Callable[[df.DurableOrchestrationContext, Attempt], Outcome]] = {
    1: run_attempt,
}
"""Every workflow version an order in flight may carry (C7); the newest is WORKFLOW_VERSION,
which new orders get.
A change that alters the activities, timers or events an instance meets is a new version
here, with the old one kept until no order runs it."""


def orchestration_version(workflow_version: int) -> str:
    """The orchestration version of a record's WorkflowVersion: a .NET version string, so
    the extension compares versions as numbers."""
    return f"{workflow_version}.0"


def workflow_version(orchestration: str | None) -> int:
    """The workflow an instance runs, from the version it was started with."""
    for workflow in WORKFLOWS:
        if orchestration == orchestration_version(workflow):
            return workflow
    raise ValueError(
        f"orchestration version {orchestration!r} is not one this app runs: it runs "
        f"{', '.join(orchestration_version(v) for v in WORKFLOWS)}"
    )


def attempt_input(record: StateRecord, agent_transport: str, timeouts: Timeouts) -> Any:
    """The input of the instance that runs the attempt a claim of `record` won (D2, C10)."""
    instance = record.instance_id
    if instance is None:
        raise ValueError(f"order {record.order_id!r} is not claimed: no attempt to start")
    return to_data(
        Attempt(
            order_id=record.order_id,
            attempt=instance.attempt,
            steps=tuple(step.name for step in record.steps),
            agent_transport=agent_transport,
            timeouts=timeouts,
            resume_at=record.resume_at or 0,
        )
    )


def compensation_input(
    record: StateRecord,
    instance: InstanceId,
    undo: Sequence[Step],
    agent_transport: str,
    timeouts: Timeouts,
) -> Any:
    """The input of an instance that undoes `undo` for `record` (C1, C2), started by the
    supervisor or an operator; it ends in the record's CompensationEndsIn (U4)."""
    return to_data(
        Attempt(
            order_id=record.order_id,
            attempt=instance.attempt,
            steps=tuple(step.name for step in record.steps),
            agent_transport=agent_transport,
            timeouts=timeouts,
            undo=tuple(undo),
            ends_in=record.compensation_ends_in,
        )
    )


@bp.orchestration_trigger(context_name="context")
def order_workflow(context: df.DurableOrchestrationContext) -> Outcome:
    workflow = WORKFLOWS[workflow_version(context.version)]
    result = yield from workflow(context, from_data(context.get_input(), Attempt))
    if not context.is_replaying:
        log.info(
            "orchestration ended",
            instance_id=context.instance_id,
            step=result.get("step"),
            outcome=result.get("outcome"),
        )
    return result


def _undo(
    context: df.DurableOrchestrationContext,
    attempt: Attempt,
    steps: tuple[Step, ...],
    order: Order | None,
) -> Outcome:
    undone: Step | None = None
    for step in steps:
        begun = yield from _begin(context, attempt, AgentOperation.UNDO, step, undone, order)
        if not begun.applied:
            return {"outcome": "superseded"}
        order, response = begun.order, begun.response
        if response is None:
            return {"outcome": "compensation-stalled", "step": step.name}
        if response.outcome is AgentOutcome.FAILED:
            failed = yield from _write(
                context,
                UNDO_FAILED,
                attempt,
                step=step,
                reason=response.detail or f"the {step.name} service refused to undo it",
            )
            return {"outcome": "compensation-failed" if failed.applied else "superseded"}
        if response.outcome is not AgentOutcome.SUCCEEDED:
            return {"outcome": "compensation-stalled", "step": step.name}
        undone = step
    finished = yield from _write(
        context, FINISH_UNDO, attempt, done=undone, ends_in=attempt.ends_in
    )
    if not finished.applied:
        return {"outcome": "superseded"}
    return {"outcome": "failed" if attempt.ends_in is ProcessState.ERROR else "compensated"}


def _begin(
    context: df.DurableOrchestrationContext,
    attempt: Attempt,
    operation: AgentOperation,
    step: Step,
    done: Step | None,
    order: Order | None,
) -> Generator[Any, Any, Begun]:
    """Begin `step` (or its undo) under the fence, then race its agent against CompleteBy."""
    now = context.current_utc_datetime
    deadline = _DEADLINES[operation](now, attempt.timeouts)
    write = _payload(attempt, now, step=step, done=done, order=order, complete_by=deadline)
    alone, with_agent = _BEGIN[operation]
    if attempt.agent_transport == AGENT_TRANSPORT_ACTIVITY:
        run = context.call_activity_with_retry(with_agent, STORE_RETRY, to_data(write))
        timer = context.create_timer(deadline)
        if (yield context.task_any([run, timer])) == timer:
            return Begun(applied=True, order=order)
        timer.cancel()
        # Yielded again, the finished activity gives its answer, or raises what failed it.
        ran = from_data((yield run), StepWritten)
        if not ran.applied or ran.request is None or ran.response is None:
            return Begun(applied=False)
        return Begun(True, ran.request.order, ran.response.answering(ran.request.request_id))
    started = yield from _called(context, alone, write)
    if not started.applied or started.request is None:
        return Begun(applied=False)
    request_id = started.request.request_id
    timer = context.create_timer(deadline)
    # The answer's own event name: one raised before this wait opened is buffered by the SDK
    # for this wait alone (agent_response_event says why the name is per request).
    answer = context.wait_for_external_event(agent_response_event(request_id))
    if (yield context.task_any([answer, timer])) == timer:
        return Begun(True, started.request.order)
    timer.cancel()
    response = from_data(answer.result, AgentResponse).answering(request_id)
    return Begun(True, started.request.order, response)


def _write(
    context: df.DurableOrchestrationContext, activity: str, attempt: Attempt, **fields: Any
) -> Generator[Any, Any, StepWritten]:
    write = _payload(attempt, context.current_utc_datetime, **fields)
    return (yield from _called(context, activity, write))


def _called(
    context: df.DurableOrchestrationContext, activity: str, write: StepWrite
) -> Generator[Any, Any, StepWritten]:
    result = yield context.call_activity_with_retry(activity, STORE_RETRY, to_data(write))
    return from_data(result, StepWritten)


def _payload(attempt: Attempt, at: datetime, **fields: Any) -> StepWrite:
    return StepWrite(
        attempt.order_id, attempt.attempt, at, agent_transport=attempt.agent_transport, **fields
    )
