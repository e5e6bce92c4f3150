"""Inputs and outputs of the step workflow and its activities: small dataclasses.

They cross the Durable Functions boundary as JSON dictionaries (``to_dict``/``from_dict``);
new fields get defaults so histories written by older code still replay (C7).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from domain.policies import Timeouts
from domain.records import InstanceId, format_utc, parse_utc


@dataclass(frozen=True)
class StepRef:
    """A step of the order by position and name, with the reference the service gave its
    side effect (None while there is none, or for a step in doubt)."""

    index: int
    name: str
    reference: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "reference": self.reference}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRef:
        return cls(**data)


@dataclass(frozen=True)
class StepsAttempt:
    """What the starter (or the supervisor, to compensate) hands a step-workflow instance.

    ``resume_at`` is the first step not completed when the attempt was claimed (C10): a step
    completed by an earlier attempt is never run again. ``undo`` is set when the instance is
    started to compensate: the steps to undo, in order (C1, C2).

    ``timeouts`` are the app's CompleteBy budgets when the attempt was started: with them the
    orchestration sets each CompleteBy itself (D6), so it can start the durable timer in the
    episode that starts the step (E2). Inputs written before they existed carry none; their
    instances replay the way they started, with the deadline set by the write that begins
    the step (C7).
    """

    order_id: str
    attempt: int
    steps: tuple[str, ...]
    agent_transport: str
    resume_at: int = 0
    undo: tuple[StepRef, ...] | None = None
    timeouts: Timeouts | None = None

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, self.attempt)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepsAttempt:
        undo, timeouts = data.get("undo"), data.get("timeouts")
        return cls(
            order_id=data["order_id"],
            attempt=data["attempt"],
            steps=tuple(data["steps"]),
            agent_transport=data["agent_transport"],
            resume_at=data.get("resume_at", 0),
            undo=None if undo is None else tuple(StepRef.from_dict(u) for u in undo),
            timeouts=None if timeouts is None else Timeouts(**timeouts),
        )


@dataclass(frozen=True)
class StepWrite:
    """One fenced write of the step workflow, at the orchestration's (replay-safe) time.

    ``step`` is the step the write is about (to begin, to fail, to undo); ``done`` the step
    completed or undone just before, recorded in the same write (C1). ``order`` carries the
    order document once the first write loaded it, so later agent requests need no read.
    ``complete_by`` is the CompleteBy the orchestration set for the step or undo it begins
    (D6); without it the write sets one from the app's timeouts.
    """

    order_id: str
    attempt: int
    at: str
    step: StepRef | None = None
    done: StepRef | None = None
    reason: str | None = None
    order: dict[str, Any] | None = None
    agent_transport: str | None = None
    complete_by: str | None = None

    @classmethod
    def of(cls, attempt: StepsAttempt, at: datetime, **fields: Any) -> StepWrite:
        return cls(attempt.order_id, attempt.attempt, format_utc(at), **fields)

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, self.attempt)

    @property
    def now(self) -> datetime:
        return parse_utc(self.at)

    @property
    def deadline(self) -> datetime | None:
        """The CompleteBy the orchestration set, if it set one."""
        return None if self.complete_by is None else parse_utc(self.complete_by)

    def to_dict(self) -> dict[str, Any]:
        # Built by hand, not with asdict: the orchestrator calls this on every replay, and
        # asdict deep-copies the order document each time (a fifth of a replay's cost).
        return {
            "order_id": self.order_id,
            "attempt": self.attempt,
            "at": self.at,
            "step": None if self.step is None else self.step.to_dict(),
            "done": None if self.done is None else self.done.to_dict(),
            "reason": self.reason,
            "order": self.order,
            "agent_transport": self.agent_transport,
            "complete_by": self.complete_by,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepWrite:
        step, done = data.get("step"), data.get("done")
        return cls(
            **{
                **data,
                "step": None if step is None else StepRef.from_dict(step),
                "done": None if done is None else StepRef.from_dict(done),
            }
        )


@dataclass(frozen=True)
class StepWritten:
    """A step write's answer: whether the fence held; for a write that starts a step or an
    undo, the agent request (already on its queue with the Service Bus transport), which
    holds the order document, and, when the same activity ran the agent, its response; for
    a failure that turned into compensation, what to undo."""

    applied: bool
    request: dict[str, Any] | None = None
    undo: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "request": self.request,
            "undo": self.undo,
            "response": self.response,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepWritten:
        # Histories written before the answer stopped repeating the order beside the request
        # carry an "order" key: the request holds the same document.
        return cls(
            data["applied"], data.get("request"), data.get("undo") or [], data.get("response")
        )

    @property
    def order(self) -> dict[str, Any] | None:
        """The order document the request carries, for the next step's request."""
        if self.request is None:
            return None
        order: dict[str, Any] = self.request["order"]
        return order

    @property
    def undo_steps(self) -> tuple[StepRef, ...]:
        return tuple(StepRef.from_dict(u) for u in self.undo)
