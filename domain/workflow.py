"""The steps an order can run, declared as data (D6, E1, C1).

Each step wraps ONE remote service through its own agent: a name (what the state record's
`Steps` and the status messages say), the agent that runs it (whose request queue and
remote service the app settings name), the agent's action and the compensating action that
undoes it. The orchestrator runs whatever list it is given, so adding a step is one more
declaration here and one more agent, not an edit of the orchestrator. `ORDER_STEPS` picks
the steps a new order runs, in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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
