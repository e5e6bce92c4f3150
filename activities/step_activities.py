"""The step workflow's fenced writes as activity functions (D4, D6, E1, E4, E5, E8, C1, C2, R2).

Each takes the orchestration's own (replay-safe) time, runs one service-layer write and
sends what it produced - progress and final statuses, operator alerts - only when the write
applied for this attempt (D4). ``begin_step`` and ``begin_undo`` set the CompleteBy the
orchestration chose (D6) and hand the step's agent its request, do or undo, on the agent's
own request queue (E1) once the fence held, with a stable MessageId so a re-run's second
send is removed by duplicate detection (E4). With the agent as an activity (E1's other
shape), ``run_step_in_activity`` and ``run_undo_in_activity`` make the same write and then
run the agent here, so a step costs one activity and one orchestrator episode. The
orchestration retries these activities for their store write only: the agent runs once
per activity (``run_step_agent_once``), so a retry never spends more of the budget (C4). The
order is read from the orders database once per attempt and then travels with the
orchestration (D6). Each activity is a span with the order's correlation attributes, and each
status message it sends has its own (C9); the step or undo that began is logged once its
agent has the request (``step begun``, ``undo begun``), what the writes did by
`services.step_writes`.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import azure.durable_functions as df
from opentelemetry.trace import Span

import bootstrap
from activities.agent_bridge import send_agent_request
from adapters import blocking_calls
from domain.agent_messages import AgentOperation, AgentRequest
from domain.contracts import OperatorAlert, Order, StatusMessage
from domain.outgoing_messages import alert_outgoing, status_outgoing
from domain.policies import (
    AGENT_TRANSPORT_ACTIVITY,
    compensation_deadline,
    step_deadline,
)
from domain.records import StateRecord
from domain.transitions import Undo
from domain.workflow import declaration
from observability import logs
from observability.tracing import order_span, status_span
from orchestrators.step_payloads import StepRef, StepWrite, StepWritten
from order_agents.step_agents import run_step_agent_once
from services import step_writes
from services.operator import load_order
from services.step_writes import Done, StepWriteOutcome

bp = df.Blueprint()
log = logs.get_logger("app.steps")
_BEGUN = {AgentOperation.DO: "step begun", AgentOperation.UNDO: "undo begun"}

# Activity inputs are annotated Any, the JSON value the trigger delivers, and parsed into
# their dataclass first thing: the Python worker refuses a builtin generic such as
# dict[str, Any] on a binding parameter and with it the whole app (its indexing check).


@bp.activity_trigger(input_name="call")
async def begin_step(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "begin_step"):
        return _written(await _begin_step(write))


@bp.activity_trigger(input_name="call")
async def run_step_in_activity(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "run_step_in_activity"):
        return await _answered(await _begin_step(write))


async def _begin_step(write: StepWrite) -> AgentRequest | None:
    step = _required(write.step, "begin_step")
    app = bootstrap.services()
    outcome = await blocking_calls.run(
        step_writes.begin_step,
        app.states,
        write.instance,
        index=step.index,
        name=step.name,
        done=None if write.done is None else _done(write.done),
        now=write.now,
        complete_by=write.deadline or step_deadline(write.now, app.settings.timeouts),
        reply_queues=app.settings.reply_queues,
    )
    return await _with_request(write, step, outcome, AgentOperation.DO)


@bp.activity_trigger(input_name="call")
async def finish_steps(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "finish_steps"):
        app = bootstrap.services()
        outcome = await blocking_calls.run(
            step_writes.finish_steps,
            app.states,
            write.instance,
            done=_done(_required(write.done, "finish_steps")),
            now=write.now,
            reply_queues=app.settings.reply_queues,
        )
        return await _reported(outcome)


@bp.activity_trigger(input_name="call")
async def fail_step(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "fail_step"):
        step = _required(write.step, "fail_step")
        app = bootstrap.services()
        outcome = await blocking_calls.run(
            step_writes.fail_step,
            app.states,
            write.instance,
            index=step.index,
            name=step.name,
            reason=write.reason or f"the {step.name} service refused the order",
            now=write.now,
            timeouts=app.settings.timeouts,
            reply_queues=app.settings.reply_queues,
        )
        return await _reported(outcome)


@bp.activity_trigger(input_name="call")
async def begin_undo(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "begin_undo"):
        return _written(await _begin_undo(write))


@bp.activity_trigger(input_name="call")
async def run_undo_in_activity(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "run_undo_in_activity"):
        return await _answered(await _begin_undo(write))


async def _begin_undo(write: StepWrite) -> AgentRequest | None:
    step = _required(write.step, "begin_undo")
    app = bootstrap.services()
    outcome = await blocking_calls.run(
        step_writes.begin_undo,
        app.states,
        write.instance,
        _undo(step),
        undone=None if write.done is None else _undo(write.done),
        now=write.now,
        complete_by=write.deadline or compensation_deadline(write.now, app.settings.timeouts),
    )
    return await _with_request(write, step, outcome, AgentOperation.UNDO)


@bp.activity_trigger(input_name="call")
async def finish_undo(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "finish_undo"):
        app = bootstrap.services()
        outcome = await blocking_calls.run(
            step_writes.finish_undo,
            app.states,
            write.instance,
            undone=None if write.done is None else _undo(write.done),
            now=write.now,
            reply_queues=app.settings.reply_queues,
        )
        return await _reported(outcome)


@bp.activity_trigger(input_name="call")
async def undo_failed(call: Any) -> dict[str, Any]:
    write = StepWrite.from_dict(call)
    with _step_span(write, "undo_failed"):
        step = _required(write.step, "undo_failed")
        app = bootstrap.services()
        outcome = await blocking_calls.run(
            step_writes.undo_failed,
            app.states,
            write.instance,
            _undo(step),
            reason=write.reason or f"the {step.name} service refused to undo it",
            now=write.now,
            reply_queues=app.settings.reply_queues,
        )
        return await _reported(outcome)


async def _with_request(
    write: StepWrite, step: StepRef, outcome: StepWriteOutcome, operation: AgentOperation
) -> AgentRequest | None:
    """The agent's request once the write that starts the step applied, None when the fence
    refused it; over Service Bus it is on the agent's queue already."""
    if not outcome.applied or outcome.record is None:
        return None
    await _send(outcome.statuses, outcome.alert)
    app = bootstrap.services()
    order = (
        Order.from_document(write.order)
        if write.order is not None
        else await blocking_calls.run(load_order, app.orders, write.instance)
    )
    request = AgentRequest(
        instance_id=str(write.instance),
        step=step.name,
        order=order,
        deadline=_deadline(outcome.record, step),
        operation=operation,
        reference=step.reference if operation is AgentOperation.UNDO else None,
    )
    if write.agent_transport != AGENT_TRANSPORT_ACTIVITY:
        await send_agent_request(request, app.settings.agent_queue(declaration(step.name).agent))
    # With the activity transport the orchestration hands the agent this request itself.
    log.info(
        _BEGUN[operation],
        instance_id=write.instance,
        step=step.name,
        agent_transport=write.agent_transport,
    )
    return request


def _written(request: AgentRequest | None) -> dict[str, Any]:
    if request is None:
        return StepWritten(applied=False).to_dict()
    return StepWritten(applied=True, request=request.to_document()).to_dict()


async def _answered(request: AgentRequest | None) -> dict[str, Any]:
    """The begun step's request with its agent's answer, run here (E1's activity shape)."""
    if request is None:
        return StepWritten(applied=False).to_dict()
    response = await run_step_agent_once(request)
    return StepWritten(
        applied=True, request=request.to_document(), response=response.to_document()
    ).to_dict()


async def _reported(outcome: StepWriteOutcome) -> dict[str, Any]:
    if outcome.applied:
        await _send(outcome.statuses, outcome.alert)
    undo = [StepRef(u.index, u.name, u.reference).to_dict() for u in outcome.undo]
    return StepWritten(applied=outcome.applied, undo=undo).to_dict()


async def _send(statuses: Iterable[StatusMessage], alert: OperatorAlert | None) -> None:
    publisher = bootstrap.publisher()
    if alert is not None:
        queue = bootstrap.services().settings.operator_alerts_queue
        await publisher.send(alert_outgoing(alert, queue))
    for status in statuses:
        with status_span(status.correlation_id, status.subject, status.body.get("step")):
            await publisher.send(status_outgoing(status))


def _step_span(write: StepWrite, activity: str) -> AbstractContextManager[Span]:
    return order_span(
        f"step.{activity}",
        order_id=write.order_id,
        instance_id=write.instance,
        attempt=write.attempt,
        step=None if write.step is None else write.step.name,
    )


def _deadline(record: StateRecord, step: StepRef) -> datetime:
    deadline = record.steps[step.index].complete_by
    if deadline is None:
        raise ValueError(f"step {step.name} of order {record.order_id!r} has no CompleteBy")
    return deadline


def _done(ref: StepRef) -> Done:
    return Done(ref.index, ref.name, ref.reference)


def _undo(ref: StepRef) -> Undo:
    return Undo(ref.index, ref.name, ref.reference)


def _required(ref: StepRef | None, activity: str) -> StepRef:
    if ref is None:
        raise ValueError(f"{activity} needs the step it is about")
    return ref
