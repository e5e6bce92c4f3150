"""The workflow with the agent as an activity, through the real SDK replay (E1, E2, D6).

The orchestration picks each deadline from the budgets in its input, and one activity
(``run_step_in_activity``, ``run_undo_in_activity``) makes the fenced write and runs the
agent while a durable timer at that deadline races it: one activity and one episode per
step.

``drive`` plays the Durable extension: it replays ``run_attempt`` with
``azure.durable_functions`` itself, records what the episode scheduled as the extension
would, answers each activity at once and replays again, until the instance ends. The
timers never fire: every activity answers first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import azure.durable_functions as df
import pytest
from azure.durable_functions.models.actions.ActionType import ActionType

from adapters.codec import from_data, to_data
from domain.agent_messages import AgentOperation, AgentOutcome, AgentRequest, AgentResponse
from domain.contracts import Order, OrderItem
from domain.policies import Timeouts
from domain.records import format_utc, parse_utc
from domain.workflow import Step
from orchestrators.order_workflow import (
    FINISH_STEPS,
    FINISH_UNDO,
    RUN_STEP,
    RUN_UNDO,
    run_attempt,
)
from orchestrators.payloads import Attempt, StepWrite, StepWritten

STEPS = ("reserve-stock", "charge-payment", "ship-order")
ATTEMPT = Attempt(
    order_id="o-1",
    attempt=1,
    steps=STEPS,
    agent_transport="activity",
    timeouts=Timeouts(claim_seconds=60.0, step_seconds=30.0, compensation_seconds=20.0),
)
INSTANCE = "o-1:1"
ORDER = Order("o-1", "c-1", (OrderItem("s-1", 1),), "EUR")
START = datetime(2030, 1, 1, 8, tzinfo=UTC)


def workflow(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return (yield from run_attempt(context, from_data(context.get_input(), Attempt)))


REPLAY = df.Orchestrator.create(workflow)


@dataclass
class Run:
    """An instance's history as the extension records it, and what it scheduled."""

    attempt: Attempt
    history: list[dict[str, Any]] = field(default_factory=list)
    activities: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    timers: list[datetime] = field(default_factory=list)
    episodes: int = 0
    output: dict[str, Any] | None = None
    clock: count[int] = field(default_factory=count)

    def event(self, event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
        at = START + timedelta(seconds=next(self.clock))
        return {
            "EventType": event_type,
            "EventId": event_id,
            "IsPlayed": False,
            "Timestamp": format_utc(at),
            **fields,
        }


Answer = Callable[[str, dict[str, Any]], Any]


def drive(attempt: Attempt, answer: Answer) -> Run:
    """Replay episodes until the instance returns; every activity answers in the next one."""
    run = Run(attempt)
    run.history += [
        run.event(12),
        run.event(
            0,
            Name="order_workflow",
            Input=json.dumps(to_data(attempt)),
            Version="1.0",
            OrchestrationInstance={"InstanceId": INSTANCE},
            ParentInstance=None,
        ),
    ]
    task_ids = count()
    for _ in range(50):
        run.episodes += 1
        state = _replay(run)
        if state.get("isDone"):
            assert state.get("error") is None, state["error"]
            run.output = state["output"]
            return run
        answers = []
        for action in _new_actions(state, run):
            task_id = next(task_ids)
            if action["actionType"] == ActionType.CREATE_TIMER:
                run.timers.append(parse_utc(action["fireAt"]))
                run.history.append(run.event(10, task_id, FireAt=action["fireAt"]))
                continue
            name, call = action["functionName"], json.loads(action["input"])
            run.activities.append((name, call))
            run.history.append(run.event(4, task_id, Name=name, Input=action["input"]))
            answers.append(
                run.event(5, TaskScheduledId=task_id, Result=json.dumps(answer(name, call)))
            )
        run.history += [run.event(13), run.event(12), *answers]
    raise AssertionError("the instance did not end within 50 episodes")


def _replay(run: Run) -> dict[str, Any]:
    context = {
        "history": run.history,
        "instanceId": INSTANCE,
        "isReplaying": False,
        "parentInstanceId": None,
        "input": json.dumps(to_data(run.attempt)),
        "upperSchemaVersion": 1,
    }
    state: dict[str, Any] = json.loads(REPLAY(json.dumps(context)))
    for event in run.history:
        event["IsPlayed"] = True
    return state


def _new_actions(state: dict[str, Any], run: Run) -> list[dict[str, Any]]:
    """The actions this episode added: the SDK returns every action since the start."""
    actions = [leaf for group in state["actions"] for action in group for leaf in _leaves(action)]
    recorded = sum(1 for event in run.history if event.get("EventType") in (4, 10))
    return actions[recorded:]


def _leaves(action: dict[str, Any]) -> list[dict[str, Any]]:
    """The activities and timers of an action: a race, or a retried call, holds them."""
    if "compoundActions" not in action:
        return [action]
    return [leaf for inner in action["compoundActions"] for leaf in _leaves(inner)]


def answered(call: dict[str, Any], operation: AgentOperation) -> Any:
    """The answer of an activity that made its write and ran an agent that succeeded."""
    write = from_data(call, StepWrite)
    assert write.step is not None
    assert write.complete_by is not None
    request = AgentRequest(INSTANCE, write.step.name, ORDER, write.complete_by, operation)
    response = AgentResponse(request.request_id, INSTANCE, AgentOutcome.SUCCEEDED, reference="r")
    return to_data(StepWritten(True, request=request, response=response))


def services(name: str, call: dict[str, Any]) -> Any:
    """Every write applies and every agent succeeds."""
    if name == RUN_STEP:
        return answered(call, AgentOperation.DO)
    if name == RUN_UNDO:
        return answered(call, AgentOperation.UNDO)
    return to_data(StepWritten(applied=True))


def test_each_step_is_one_activity_and_one_episode_racing_the_deadline_it_wrote() -> None:
    run = drive(ATTEMPT, services)

    assert run.output == {"outcome": "completed"}
    assert [name for name, _ in run.activities] == [RUN_STEP] * 3 + [FINISH_STEPS]
    # the start, one per step, the one that saw finish_steps done
    assert run.episodes == 1 + len(STEPS) + 1
    written = [parse_utc(call["complete_by"]) for name, call in run.activities[:3]]
    assert run.timers == written
    starts = [parse_utc(call["at"]) for _, call in run.activities[:3]]
    assert [d - s for d, s in zip(written, starts, strict=True)] == [timedelta(seconds=30)] * 3


def test_an_undo_is_one_activity_racing_its_own_deadline() -> None:
    undo = replace(ATTEMPT, undo=(Step(1, "charge-payment", "p-1"), Step(0, "reserve-stock")))

    run = drive(undo, services)

    assert run.output == {"outcome": "compensated"}
    assert [name for name, _ in run.activities] == [RUN_UNDO] * 2 + [FINISH_UNDO]
    written = [parse_utc(call["complete_by"]) for _, call in run.activities[:2]]
    starts = [parse_utc(call["at"]) for _, call in run.activities[:2]]
    assert run.timers == written
    assert [d - s for d, s in zip(written, starts, strict=True)] == [timedelta(seconds=20)] * 2


@pytest.mark.parametrize("refused_at", [0, 1, 2])
def test_a_step_the_fence_refused_ends_the_instance_superseded_d4(refused_at: int) -> None:
    def refusing(name: str, call: dict[str, Any]) -> Any:
        if name == RUN_STEP and call["step"]["index"] == refused_at:
            return to_data(StepWritten(applied=False))
        return services(name, call)

    run = drive(ATTEMPT, refusing)

    assert run.output == {"outcome": "superseded"}
    assert [name for name, _ in run.activities] == [RUN_STEP] * (refused_at + 1)
