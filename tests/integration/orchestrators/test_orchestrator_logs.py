"""The orchestrator logs how an instance ended once, never on replay (C9).

The real SDK replays ``order_workflow`` (workflow version 1) over a
history as the Durable extension records it (built by ``test_early_agent_answers``): when
the episode that ends the instance is new, one structured record names the instance and its
outcome; when every event of that history was played before, the same code runs again and
logs nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import azure.durable_functions as df
import pytest

from adapters.codec import to_data
from orchestrators.order_workflow import order_workflow
from tests.integration.orchestrators.test_early_agent_answers import ATTEMPT, INSTANCE, history

ORCHESTRATOR_LOGGER = "app.orchestrator"
REPLAY = df.Orchestrator.create(order_workflow.build().get_user_function().orchestrator_function)


def run(events: list[dict[str, Any]]) -> dict[str, Any]:
    started = {
        "EventType": 0,  # ExecutionStarted: carries the version the instance was started with
        "EventId": -1,
        "IsPlayed": True,
        "Timestamp": events[0]["Timestamp"],
        "Name": "order_workflow",
        "Version": "1.0",
        "Input": json.dumps(to_data(ATTEMPT)),
    }
    context = {
        "history": [events[0], started, *events[1:]],
        "instanceId": INSTANCE,
        "isReplaying": False,
        "parentInstanceId": None,
        "input": json.dumps(to_data(ATTEMPT)),
        "upperSchemaVersion": 1,
    }
    state: dict[str, Any] = json.loads(REPLAY(json.dumps(context)))
    assert state.get("error") is None
    return state


def ended_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == ORCHESTRATOR_LOGGER]


def test_the_episode_that_ends_an_instance_logs_its_outcome_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=ORCHESTRATOR_LOGGER)
    events = list(history((False, False, False)))
    for event in events[:-2]:  # earlier episodes were played; the last one is new
        event["IsPlayed"] = True

    state = run(events)

    assert state["isDone"] is True
    (record,) = ended_records(caplog)
    assert record.getMessage() == (
        "orchestration ended instance.id=o-1:1 order.id=o-1 attempt=1 outcome=completed"
    )
    assert record.__dict__["order.id"] == "o-1"
    assert record.__dict__["attempt"] == 1


def test_a_replay_of_played_events_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ORCHESTRATOR_LOGGER)
    events = list(history((False, False, False)))
    for event in events:
        event["IsPlayed"] = True

    state = run(events)

    assert state["isDone"] is True
    assert ended_records(caplog) == []
