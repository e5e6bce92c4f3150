"""The steps an order can run, declared as data, and the one `Step` value (D6, E1, C1, C7).

Each declaration names a step, the agent (and remote service) that runs it, the action and
the compensation that undoes it; `ORDER_STEPS` picks a new order's steps, in order. A `Step`
is one step of one order, from the orchestrator to the store. `WORKFLOW_VERSION` is the
workflow a new order runs (C7).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

WORKFLOW_VERSION = 1
"""The workflow new orders run; the record keeps it and the orchestrator dispatches on it."""


@dataclass(frozen=True)
class Step:
    """One step of an order, by position and name, with the reference its service gave the
    side effect: None before there is one, and for a step in doubt, which is undone by its
    action's idempotency key instead (C1)."""

    index: int
    name: str
    reference: str | None = None


@dataclass(frozen=True)
class StepDeclaration:
    name: str
    agent: str
    """The agent (and remote service) that runs the step: ``stock``, ``payment``..."""
    action: str
    """What the agent asks its service to do: ``reserve``, ``charge``, ``ship``."""
    compensation: str
    """What undoes it: ``release``, ``refund``, ``cancel`` (C1)."""


STEP_DECLARATIONS: tuple[StepDeclaration, ...] = (
    StepDeclaration("reserve-stock", agent="stock", action="reserve", compensation="release"),
    StepDeclaration("charge-payment", agent="payment", action="charge", compensation="refund"),
    StepDeclaration("ship-order", agent="shipping", action="ship", compensation="cancel"),
)
"""Every step this app knows, in the order they run by default."""

DEFAULT_ORDER_STEPS = tuple(step.name for step in STEP_DECLARATIONS)

_BY_NAME = {step.name: step for step in STEP_DECLARATIONS}


class UnknownStep(ValueError):
    """A step name that no declaration has."""


def declaration(name: str) -> StepDeclaration:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownStep(
            f"unknown step {name!r}; the steps are {', '.join(DEFAULT_ORDER_STEPS)}"
        ) from None


def step_list(names: Iterable[str]) -> tuple[StepDeclaration, ...]:
    """The declarations of a workflow's steps, in order: at least one, each known, none twice."""
    steps = tuple(declaration(name) for name in names)
    if not steps:
        raise UnknownStep("a workflow needs at least one step")
    seen: set[str] = set()
    for step in steps:
        if step.name in seen:
            raise UnknownStep(f"step {step.name!r} is listed twice")
        seen.add(step.name)
    return steps
