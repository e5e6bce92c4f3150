"""What the order workflow hands its activities and what they answer (D2, D6, E1, C1, C10).

`Attempt`, `StepWrite` and `StepWritten`: small frozen dataclasses that cross the Durable
Functions boundary through the app's one codec (`adapters.codec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain.agent_messages import AgentRequest, AgentResponse
from domain.contracts import Order
from domain.policies import AGENT_TRANSPORT_SERVICEBUS, Timeouts
from domain.records import InstanceId, ProcessState
from domain.workflow import Step


@dataclass(frozen=True)
class Attempt:
    """What the starter, the supervisor or an operator hands one instance of the workflow.

    `resume_at` is the first step the record did not show completed when the attempt was
    claimed (C10). `undo` is set for an instance started to compensate: the steps to undo,
    in order (C1, C2). `timeouts` are the CompleteBy budgets the orchestration sets each
    deadline from (D6).
    """

    order_id: str
    attempt: int
    steps: tuple[str, ...]
    agent_transport: str
    timeouts: Timeouts
    resume_at: int = 0
    undo: tuple[Step, ...] | None = None
    ends_in: ProcessState = ProcessState.COMPENSATED
    """What the compensation ends in once everything is undone: the record's
    CompensationEndsIn when the instance was started (C1, U4)."""

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, self.attempt)


@dataclass(frozen=True)
class StepWrite:
    """One fenced write of an attempt, at the orchestration's (replay-safe) time `at`.

    `step` is the step the write is about (to begin, to fail, to undo); `done` the step
    completed or undone just before, recorded in the same write (C1). `order` is the order
    once the attempt's first write loaded it, so later requests need no read (D6).
    `complete_by` is the deadline the orchestration chose for what the write begins (D6).
    """

    order_id: str
    attempt: int
    at: datetime
    step: Step | None = None
    done: Step | None = None
    reason: str | None = None
    order: Order | None = None
    agent_transport: str = AGENT_TRANSPORT_SERVICEBUS
    complete_by: datetime | None = None
    ends_in: ProcessState = ProcessState.COMPENSATED
    """For the write that finishes a compensation: the state it ends in (C2, U4)."""

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, self.attempt)


@dataclass(frozen=True)
class StepWritten:
    """A write's answer: whether the fence held; for a write that begins a step or an undo,
    the agent's request (already on its queue over Service Bus) and, when the same activity
    ran the agent, its response; for a failure that began compensation, what to undo."""

    applied: bool
    request: AgentRequest | None = None
    response: AgentResponse | None = None
    undo: tuple[Step, ...] = ()


REFUSED = StepWritten(applied=False)
