"""Inputs and outputs of the order orchestration and its activities: small dataclasses.

They cross the Durable Functions boundary as JSON dictionaries (``to_dict``/``from_dict``);
new fields get defaults so histories written by older code still replay (C7).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from domain.policies import AGENT_TRANSPORT_SERVICEBUS
from domain.records import InstanceId, format_utc, parse_utc


@dataclass(frozen=True)
class AttemptInput:
    """What the starter hands a new orchestration instance (D2)."""

    order_id: str
    attempt: int
    agent_transport: str = AGENT_TRANSPORT_SERVICEBUS

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, self.attempt)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptInput:
        return cls(**data)


@dataclass(frozen=True)
class StepCall:
    """An activity's fenced write for one attempt, at the orchestration's (replay-safe) time.

    ``agent_transport`` is for ``begin_attempt``: the attempt's transport (``AttemptInput``),
    which decides whether beginning the step also sends the agent its request.
    """

    order_id: str
    attempt: int
    at: str
    reason: str | None = None
    agent_transport: str | None = None

    @classmethod
    def of(
        cls,
        instance: InstanceId,
        at: datetime,
        reason: str | None = None,
        agent_transport: str | None = None,
    ) -> StepCall:
        return cls(instance.order_id, instance.attempt, format_utc(at), reason, agent_transport)

    @property
    def instance(self) -> InstanceId:
        return InstanceId(self.order_id, self.attempt)

    @property
    def now(self) -> datetime:
        return parse_utc(self.at)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepCall:
        return cls(**data)


@dataclass(frozen=True)
class StepStarted:
    """begin_attempt's answer: whether the fence held and, if it did, the agent request for
    this step, with the order and the deadline (D6); with the Service Bus transport it is on
    the request queue already."""

    applied: bool
    request: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepStarted:
        return cls(**data)
