"""The step workflow with the agent as an activity, through the real SDK replay (E1, E2, D6, C7).

With the CompleteBy budgets in its input, the orchestration picks each deadline itself, and
one activity (``run_step_in_activity``, ``run_undo_in_activity``) makes the fenced write and
runs the agent while a durable timer at that deadline races it: one activity and one episode
per step. An instance whose input carries no budgets was started by older code; it must
replay the path it started on, ``begin_step`` then ``run_agent_in_activity``, or the
upgrade would break it (C7).

``drive`` plays the Durable extension: it replays ``step_workflow`` with
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

from domain.agent_messages import UNDO_SUFFIX, AgentOutcome, AgentResponse
from domain.policies import Timeouts
from domain.records import format_utc, parse_utc
from orchestrators.step_payloads import StepRef, StepsAttempt, StepWritten
from orchestrators.step_workflow import step_workflow

STEPS = ("reserve-stock", "charge-payment", "ship-order")
STARTED_BY_OLDER_CODE = StepsAttempt(
    order_id="o-1", attempt=1, steps=STEPS, agent_transport="activity"
)
ATTEMPT = replace(
    STARTED_BY_OLDER_CODE,
    timeouts=Timeouts(claim_seconds=60.0, step_seconds=30.0, compensation_seconds=20.0),
)
INSTANCE = "o-1:1"
ORDER = {"OrderID": "o-1", "items": [{"sku": "s-1", "quantity": 1}]}
START = datetime(2030, 1, 1, 8, tzinfo=UTC)
STEP_DEADLINE = "2030-01-01T09:00:00.000000Z"  # what an older begin_step wrote


def workflow(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return (yield from step_workflow(context, StepsAttempt.from_dict(context.get_input())))


REPLAY = df.Orchestrator.create(workflow)


@dataclass
class Run:
    """An instance's history as the extension records it, and what it scheduled."""

    attempt: StepsAttempt
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


Answer = Callable[[str, dict[str, Any]], dict[str, Any]]


def drive(attempt: StepsAttempt, answer: Answer) -> Run:
    """Replay episodes until the instance returns; every activity answers in the next one."""
    run = Run(attempt)
    run.history += [
        run.event(12),
        run.event(
            0,
            Name="order_workflow",
            Input=json.dumps(attempt.to_dict()),
            Version="2.0",
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
        "input": json.dumps(run.attempt.to_dict()),
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


def request_for(call: dict[str, Any], deadline: str, *, undo: bool = False) -> dict[str, Any]:
    request_id = f"{INSTANCE}:{call['step']['name']}{UNDO_SUFFIX if undo else ''}"
    return {"requestId": request_id, "deadline": deadline, "order": ORDER}


def succeeded(request: dict[str, Any]) -> dict[str, Any]:
    return AgentResponse(
        request["requestId"], INSTANCE, AgentOutcome.SUCCEEDED, reference="ref"
    ).to_document()


def services(name: str, call: dict[str, Any]) -> dict[str, Any]:
    """Every write applies and every agent succeeds."""
    if name == "run_step_in_activity":
        request = request_for(call, call["complete_by"])
        return StepWritten(True, request=request, response=succeeded(request)).to_dict()
    if name == "begin_step":
        return StepWritten(True, request=request_for(call, STEP_DEADLINE)).to_dict()
    if name == "run_agent_in_activity":
        return succeeded(call)
    return StepWritten(applied=True).to_dict()


def test_each_step_is_one_activity_and_one_episode_racing_the_deadline_it_wrote() -> None:
    run = drive(ATTEMPT, services)

    assert run.output == {"outcome": "completed"}
    assert [name for name, _ in run.activities] == ["run_step_in_activity"] * 3 + ["finish_steps"]
    # the start, one per step, the one that saw finish_steps done
    assert run.episodes == 1 + len(STEPS) + 1
    written = [parse_utc(call["complete_by"]) for name, call in run.activities[:3]]
    assert run.timers == written
    starts = [parse_utc(call["at"]) for _, call in run.activities[:3]]
    assert [d - s for d, s in zip(written, starts, strict=True)] == [timedelta(seconds=30)] * 3


def test_an_instance_started_by_older_code_replays_the_two_activity_path_c7() -> None:
    run = drive(STARTED_BY_OLDER_CODE, services)

    assert run.output == {"outcome": "completed"}
    assert [name for name, _ in run.activities] == [
        "begin_step",
        "run_agent_in_activity",
    ] * 3 + ["finish_steps"]
    assert all(call.get("complete_by") is None for name, call in run.activities)
    assert run.timers == [parse_utc(STEP_DEADLINE)] * 3


def test_an_undo_is_one_activity_racing_its_own_deadline() -> None:
    undo = replace(ATTEMPT, undo=(StepRef(1, "charge-payment", "p-1"), StepRef(0, "reserve-stock")))

    def undoing(name: str, call: dict[str, Any]) -> dict[str, Any]:
        if name == "run_undo_in_activity":
            request = request_for(call, call["complete_by"], undo=True)
            return StepWritten(True, request=request, response=succeeded(request)).to_dict()
        return StepWritten(applied=True).to_dict()

    run = drive(undo, undoing)

    assert run.output == {"outcome": "compensated"}
    assert [name for name, _ in run.activities] == ["run_undo_in_activity"] * 2 + ["finish_undo"]
    written = [parse_utc(call["complete_by"]) for _, call in run.activities[:2]]
    starts = [parse_utc(call["at"]) for _, call in run.activities[:2]]
    assert run.timers == written
    assert [d - s for d, s in zip(written, starts, strict=True)] == [timedelta(seconds=20)] * 2


@pytest.mark.parametrize("refused_at", [0, 1, 2])
def test_a_step_the_fence_refused_ends_the_instance_superseded_d4(refused_at: int) -> None:
    def refusing(name: str, call: dict[str, Any]) -> dict[str, Any]:
        if name == "run_step_in_activity" and call["step"]["index"] == refused_at:
            return StepWritten(applied=False).to_dict()
        return services(name, call)

    run = drive(ATTEMPT, refusing)

    assert run.output == {"outcome": "superseded"}
    assert [name for name, _ in run.activities] == ["run_step_in_activity"] * (refused_at + 1)
