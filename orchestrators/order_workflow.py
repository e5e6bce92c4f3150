"""The order orchestration, versioned: each order runs the workflow it was accepted with (C7).

One orchestrator function, ``order_workflow``, versioned the way Durable Functions documents
it (orchestration versioning): every instance carries the version it was started with -
the starter and the supervisor pass the record's WorkflowVersion explicitly - and
``context.version`` picks the code it replays with. Instances started before versioning
existed carry no version and are version 1. host.json's ``defaultVersion`` is the newest
workflow; with ``CurrentOrOlder`` an older host never runs a newer instance.

- version 1 (``orchestrators.one_step_workflow``): the one-step fulfilment workflow;
- version 2 (``orchestrators.step_workflow``): ordered steps with compensation (C1).

Parallelism comes from one instance per order attempt, never from inside one (D5).

The orchestrator logs how each instance ended, once: a replay runs this code again from the
start, so it logs nothing while ``context.is_replaying`` (C9).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import azure.durable_functions as df

from domain.policies import Timeouts
from domain.records import WORKFLOW_ONE_STEP, WORKFLOW_STEPS, InstanceId, StateRecord
from domain.transitions import Undo
from observability import logs
from orchestrators.one_step_workflow import one_step_workflow
from orchestrators.payloads import AttemptInput
from orchestrators.step_payloads import StepRef, StepsAttempt
from orchestrators.step_workflow import step_workflow

bp = df.Blueprint()

ORCHESTRATOR = "order_workflow"
log = logs.get_logger("app.orchestrator")
_VERSIONS = {WORKFLOW_ONE_STEP: "1.0", WORKFLOW_STEPS: "2.0"}


def orchestration_version(workflow_version: int) -> str:
    """The orchestration version of a record's WorkflowVersion (``1.0``, ``2.0``: .NET
    version strings, so the extension compares them as numbers)."""
    return _VERSIONS[workflow_version]


def workflow_version(orchestration: str | None) -> int:
    """The workflow an instance runs; no version is an instance started before versioning."""
    if not orchestration:
        return WORKFLOW_ONE_STEP
    for workflow, version in _VERSIONS.items():
        if version == orchestration:
            return workflow
    raise ValueError(f"orchestration version {orchestration!r} is not one this app runs")


def attempt_input(record: StateRecord, agent_transport: str, timeouts: Timeouts) -> dict[str, Any]:
    """The input of the instance that runs the attempt a claim of `record` won (D2, C10),
    with the CompleteBy budgets the orchestration sets its deadlines from (D6)."""
    instance = record.instance_id
    if instance is None:
        raise ValueError(f"order {record.order_id!r} is not claimed: no attempt to start")
    if record.workflow_version == WORKFLOW_STEPS:
        return StepsAttempt(
            order_id=record.order_id,
            attempt=instance.attempt,
            steps=tuple(step.name for step in record.steps),
            agent_transport=agent_transport,
            resume_at=record.resume_at or 0,
            timeouts=timeouts,
        ).to_dict()
    return AttemptInput(record.order_id, instance.attempt, agent_transport).to_dict()


def compensation_input(
    record: StateRecord,
    instance: InstanceId,
    undo: Sequence[Undo],
    agent_transport: str,
    timeouts: Timeouts,
) -> dict[str, Any]:
    """The input of an instance that undoes `undo` for `record` (C1, C2): what the supervisor
    and an operator start, with `orchestration_version(record.workflow_version)` (C7)."""
    return StepsAttempt(
        order_id=record.order_id,
        attempt=instance.attempt,
        steps=tuple(step.name for step in record.steps),
        agent_transport=agent_transport,
        undo=tuple(StepRef(u.index, u.name, u.reference) for u in undo),
        timeouts=timeouts,
    ).to_dict()


@bp.orchestration_trigger(context_name="context")
def order_workflow(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    if workflow_version(context.version) == WORKFLOW_STEPS:
        result = yield from step_workflow(context, StepsAttempt.from_dict(context.get_input()))
    else:
        result = yield from one_step_workflow(context, AttemptInput.from_dict(context.get_input()))
    if not context.is_replaying:
        log.info(
            "orchestration ended",
            instance_id=context.instance_id,
            step=result.get("step"),
            outcome=result.get("outcome"),
        )
    return result
