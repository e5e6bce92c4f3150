"""The workflow's fenced writes as activity functions (D4, D6, E1, E4, E5, E8, C1, C2, C4, R2).

Each activity runs one write of `services.steps` at the orchestration's time and, only when
the write applied (D4), delivers what the write stored in the record's outbox; a write that
ends the order then clears it (C6). `begin_step` and `begin_undo` then put the
agent's request on its queue (E1, E4); `run_step_in_activity` and `run_undo_in_activity`
run the agent in the same invocation instead (E1's activity shape, C4).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, TypeVar

import azure.durable_functions as df
from opentelemetry.trace import Span

import bootstrap
from activities.agent_bridge import send_agent_request
from activities.replies import deliver_owed
from adapters import blocking_calls
from adapters.codec import from_data, to_data
from domain.agent_messages import AgentOperation, AgentRequest
from domain.policies import AGENT_TRANSPORT_ACTIVITY
from domain.workflow import declaration
from observability import logs
from observability.tracing import order_span
from orchestrators.order_workflow import (
    BEGIN_STEP,
    BEGIN_UNDO,
    FAIL_STEP,
    FINISH_STEPS,
    FINISH_UNDO,
    RUN_STEP,
    RUN_UNDO,
    UNDO_FAILED,
)
from orchestrators.payloads import REFUSED, StepWrite, StepWritten
from order_agents.functions import run_step_agent_once
from services import steps
from services.operator import load_order

T = TypeVar("T")
bp = df.Blueprint()
log = logs.get_logger("app.steps")
_BEGUN = {AgentOperation.DO: "step begun", AgentOperation.UNDO: "undo begun"}

# Activity inputs are annotated Any, the JSON value the trigger delivers: the Python worker
# refuses a builtin generic such as dict[str, Any] on a binding parameter, and with it the
# whole app (its indexing check).


@bp.activity_trigger(input_name="call")
async def begin_step(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, BEGIN_STEP):
        return to_data(_written(await _begun(write, AgentOperation.DO)))


@bp.activity_trigger(input_name="call")
async def run_step_in_activity(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, RUN_STEP):
        return to_data(await _answered(await _begun(write, AgentOperation.DO)))


@bp.activity_trigger(input_name="call")
async def finish_steps(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, FINISH_STEPS):
        written = await blocking_calls.run(
            steps.finish_steps,
            bootstrap.services().states,
            write.instance,
            _required(write.done, "the last step"),
            now=write.at,
        )
        return to_data(await _sent(written))


@bp.activity_trigger(input_name="call")
async def fail_step(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, FAIL_STEP):
        written = await blocking_calls.run(
            steps.fail_step,
            bootstrap.services().states,
            write.instance,
            _required(write.step, "the step that failed"),
            reason=write.reason or "the service refused the order",
            now=write.at,
            compensate_by=_required(write.complete_by, "the compensation's deadline"),
        )
        return to_data(await _sent(written))


@bp.activity_trigger(input_name="call")
async def begin_undo(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, BEGIN_UNDO):
        return to_data(_written(await _begun(write, AgentOperation.UNDO)))


@bp.activity_trigger(input_name="call")
async def run_undo_in_activity(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, RUN_UNDO):
        return to_data(await _answered(await _begun(write, AgentOperation.UNDO)))


@bp.activity_trigger(input_name="call")
async def finish_undo(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, FINISH_UNDO):
        written = await blocking_calls.run(
            steps.finish_undo,
            bootstrap.services().states,
            write.instance,
            undone=write.done,
            now=write.at,
            ends_in=write.ends_in,
        )
        return to_data(await _sent(written))


@bp.activity_trigger(input_name="call")
async def undo_failed(call: Any) -> Any:
    write = from_data(call, StepWrite)
    with _span(write, UNDO_FAILED):
        written = await blocking_calls.run(
            steps.undo_failed,
            bootstrap.services().states,
            write.instance,
            _required(write.step, "the undo that failed"),
            reason=write.reason or "the service refused to undo it",
            now=write.at,
        )
        return to_data(await _sent(written))


async def _begun(write: StepWrite, operation: AgentOperation) -> AgentRequest | None:
    """The write that begins a step or its undo, then the agent's request, None when the
    fence refused it; over Service Bus the request is on the agent's queue already."""
    step = _required(write.step, "the step it begins")
    complete_by = _required(write.complete_by, "the deadline of what it begins")
    app = bootstrap.services()
    if operation is AgentOperation.DO:
        written = await blocking_calls.run(
            steps.begin_step,
            app.states,
            write.instance,
            step,
            done=write.done,
            now=write.at,
            complete_by=complete_by,
        )
    else:
        written = await blocking_calls.run(
            steps.begin_undo,
            app.states,
            write.instance,
            step,
            undone=write.done,
            now=write.at,
            complete_by=complete_by,
        )
    if not written.applied or written.record is None:
        return None
    # The next fenced write of this attempt replaces the outbox, so it needs no clearing.
    await deliver_owed(written.record, clear=False)
    order = write.order
    if order is None:
        order = await blocking_calls.run(load_order, app.orders, write.instance)
    request = AgentRequest(
        instance_id=str(write.instance),
        step=step.name,
        order=order,
        deadline=complete_by,
        operation=operation,
        reference=step.reference if operation is AgentOperation.UNDO else None,
    )
    if write.agent_transport != AGENT_TRANSPORT_ACTIVITY:
        await send_agent_request(request, app.settings.agent_queue(declaration(step.name).agent))
    log.info(
        _BEGUN[operation],
        instance_id=write.instance,
        step=step.name,
        agent_transport=write.agent_transport,
    )
    return request


def _written(request: AgentRequest | None) -> StepWritten:
    return REFUSED if request is None else StepWritten(applied=True, request=request)


async def _answered(request: AgentRequest | None) -> StepWritten:
    """The begun step's request with its agent's answer, run here (E1's activity shape)."""
    if request is None:
        return REFUSED
    return StepWritten(applied=True, request=request, response=await run_step_agent_once(request))


async def _sent(written: steps.Written) -> StepWritten:
    if not written.applied or written.record is None:
        return REFUSED
    await deliver_owed(written.record)
    return StepWritten(applied=True, undo=written.undo)


def _span(write: StepWrite, activity: str) -> AbstractContextManager[Span]:
    return order_span(
        f"step.{activity}",
        order_id=write.order_id,
        instance_id=write.instance,
        attempt=write.attempt,
        step=None if write.step is None else write.step.name,
    )


def _required(value: T | None, what: str) -> T:
    if value is None:
        raise ValueError(f"the write lacks {what}")
    return value
