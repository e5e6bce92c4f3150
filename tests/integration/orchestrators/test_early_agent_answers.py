"""The step workflow through the real SDK replay with agent answers in Azure's order (E2, E3).

On Azure the Durable extension gives the Python SDK every raised event in the order it
arrived, and an agent often answers before the orchestrator has opened its wait (the
request leaves inside ``begin_step``, whose completion the orchestrator has not replayed
yet). The SDK buffers such an early event and hands it to every later wait of the same name
(azure-functions-durable-python#507), so the workflow names each wait after its request
(``agent_response_event``). These histories are built as the extension would record them
and replayed by ``azure.durable_functions`` itself, with no devhost in between.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import azure.durable_functions as df
import pytest

from adapters.codec import from_data, to_data
from domain.agent_messages import AgentOutcome, AgentRequest, AgentResponse
from domain.contracts import Order, OrderItem
from domain.policies import Timeouts
from domain.records import format_utc
from orchestrators.order_workflow import BEGIN_STEP, FINISH_STEPS, run_attempt
from orchestrators.payloads import Attempt, StepWritten

INSTANCE = "o-1:1"
STEPS = ("reserve-stock", "charge-payment", "ship-order")
TIMEOUTS = Timeouts(claim_seconds=60, step_seconds=30, compensation_seconds=60)
ATTEMPT = Attempt(
    order_id="o-1", attempt=1, steps=STEPS, agent_transport="servicebus", timeouts=TIMEOUTS
)
ORDER = Order("o-1", "c-1", (OrderItem("s-1", 1),), "EUR")
START = datetime(2030, 1, 1, 8, tzinfo=UTC)
CLOCK = (START + timedelta(milliseconds=tick) for tick in count())


def workflow(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return (yield from run_attempt(context, from_data(context.get_input(), Attempt)))


REPLAY = df.Orchestrator.create(workflow)


def event(event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
    return {
        "EventType": event_type,
        "EventId": event_id,
        "IsPlayed": False,
        "Timestamp": format_utc(next(CLOCK)),
        **fields,
    }


def started() -> dict[str, Any]:
    return event(12)


def completed() -> dict[str, Any]:
    return event(13)


def scheduled(task_id: int, name: str) -> dict[str, Any]:
    return event(4, task_id, Name=name, Input="{}")


def task_done(task_id: int, result: Any) -> dict[str, Any]:
    return event(5, TaskScheduledId=task_id, Result=json.dumps(result))


def timer_created(timer_id: int) -> dict[str, Any]:
    return event(10, timer_id, FireAt="2030-01-01T09:00:00.000000Z")


def answer(step: str) -> dict[str, Any]:
    response = AgentResponse(
        f"{INSTANCE}:{step}", INSTANCE, AgentOutcome.SUCCEEDED, reference=f"ref-{step}"
    )
    return event(15, Name=response.event_name, Input=json.dumps(to_data(response)))


def begun(step: str) -> Any:
    request = AgentRequest(INSTANCE, step, ORDER, datetime(2030, 1, 1, 9, tzinfo=UTC))
    return to_data(StepWritten(applied=True, request=request))


def history(early: tuple[bool, ...]) -> Iterator[dict[str, Any]]:
    """A fault-free run of every step; `early[k]`: step k's answer arrived before the
    completion of the activity that sent its request."""
    yield started()
    yield event(
        0,
        Name="order_workflow",
        Input=json.dumps(to_data(ATTEMPT)),
        Version="1.0",
        OrchestrationInstance={"InstanceId": INSTANCE},
        ParentInstance=None,
    )
    yield scheduled(0, BEGIN_STEP)
    yield completed()
    for index, step in enumerate(STEPS):
        begin_id, timer_id, following = 2 * index, 2 * index + 1, 2 * index + 2
        following_name = BEGIN_STEP if index + 1 < len(STEPS) else FINISH_STEPS
        yield started()
        if early[index]:
            yield answer(step)
        yield task_done(begin_id, begun(step))
        yield timer_created(timer_id)
        if early[index]:
            yield scheduled(following, following_name)
            yield completed()
            continue
        yield completed()
        yield started()
        yield answer(step)
        yield scheduled(following, following_name)
        yield completed()
    yield started()
    yield task_done(2 * len(STEPS), to_data(StepWritten(applied=True)))


def replay(events: list[dict[str, Any]]) -> dict[str, Any]:
    context = {
        "history": events,
        "instanceId": INSTANCE,
        "isReplaying": False,
        "parentInstanceId": None,
        "input": json.dumps(to_data(ATTEMPT)),
        "upperSchemaVersion": 1,
    }
    state: dict[str, Any] = json.loads(REPLAY(json.dumps(context)))
    return state


@pytest.mark.parametrize(
    "early",
    [
        (False, False, False),
        (True, True, True),
        (True, False, False),
        (False, True, False),
        (True, False, True),
    ],
    ids=["all-late", "all-early", "first-early", "middle-early", "alternating"],
)
def test_every_step_takes_its_own_answer_whenever_it_arrived_e3(early: tuple[bool, ...]) -> None:
    state = replay(list(history(early)))

    assert state.get("error") is None
    assert state["isDone"] is True
    assert state["output"] == {"outcome": "completed"}
    scheduled_names = [
        action.get("functionName")
        for group in state["actions"]
        for step in group
        for action in step.get("compoundActions", [step])
    ]
    assert scheduled_names.count(BEGIN_STEP) == len(STEPS)
    assert scheduled_names.count(FINISH_STEPS) == 1
