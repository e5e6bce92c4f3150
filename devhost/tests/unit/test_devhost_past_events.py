"""The episode's context: stored history events parsed once per instance and marked played.

An episode must hand the SDK exactly the history the stored events say, however the memo of
parsed events was reached: first replay, a grown history, a new generation, an evicted or
finished instance, or a stored event written in another shape.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

from devhost.durable.history import EventType, execution_started, new_event
from devhost.durable.replay import (
    EpisodeOutcome,
    EpisodeRequest,
    PastEvents,
    ReplayFunction,
    decide_episode,
)

NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def _stored(*events: dict[str, Any]) -> list[str]:
    return [json.dumps(event) for event in events]


def _first_generation() -> list[str]:
    return _stored(
        new_event(EventType.ORCHESTRATOR_STARTED, NOW),
        execution_started(NOW, "hello", "i-1", '"x"', version=None),
        new_event(EventType.TASK_SCHEDULED, NOW, 0, Name="say", Input='"IsPlayed": false'),
        new_event(EventType.ORCHESTRATOR_COMPLETED, NOW),
    )


def _request(past: list[str], instance_id: str = "i-1") -> EpisodeRequest:
    completed = new_event(EventType.TASK_COMPLETED, NOW, TaskScheduledId=0, Result='"hi"')
    return EpisodeRequest(
        instance_id=instance_id,
        orchestrator="hello",
        input_json='"x"',
        parent_instance_id=None,
        past_json=past,
        new_events=[completed],
        now=NOW,
    )


# What the SDK answers for the history above: the activity the history holds, still running.
SAY = {"actionType": 0, "functionName": "say", "input": '"IsPlayed": false'}


def decide(request: EpisodeRequest, replay: ReplayFunction, memo: PastEvents) -> EpisodeOutcome:
    return asyncio.run(decide_episode(request, replay, memo))


class Recorder:
    """The orchestrator as the SDK would run it: keeps each context, answers 'running'."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, Any]] = []

    async def __call__(self, name: str, context_json: str) -> dict[str, Any]:
        self.contexts.append(json.loads(context_json))
        return {"isDone": False, "actions": [[SAY]], "schemaVersion": 1}


def _expected_history(past: list[str]) -> list[dict[str, Any]]:
    return [{**json.loads(text), "IsPlayed": True} for text in past]


def test_the_sdk_reads_every_stored_event_played_and_unchanged_otherwise() -> None:
    past = _first_generation()
    recorder = Recorder()
    decide(_request(past), recorder, PastEvents())

    (context,) = recorder.contexts
    history = context["history"]
    assert history[: len(past)] == _expected_history(past)
    # The episode's own events are new: not played.
    assert [event["IsPlayed"] for event in history[len(past) :]] == [False, False]
    assert context["isReplaying"] is True
    assert context["instanceId"] == "i-1"
    assert context["input"] == '"x"'


def test_a_grown_history_replays_the_events_kept_and_the_new_ones() -> None:
    memo = PastEvents()
    past = _first_generation()
    recorder = Recorder()
    decide(_request(past[:2]), recorder, memo)
    decide(_request(past), recorder, memo)

    assert recorder.contexts[1]["history"][: len(past)] == _expected_history(past)


def test_a_new_generation_under_the_same_instance_id_is_parsed_afresh() -> None:
    memo = PastEvents()
    recorder = Recorder()
    decide(_request(_first_generation()), recorder, memo)
    later = NOW + dt.timedelta(minutes=5)
    second = _stored(
        new_event(EventType.ORCHESTRATOR_STARTED, later),
        execution_started(later, "hello", "i-1", '"y"', version="2.0"),
    )
    decide(_request(second), recorder, memo)

    assert recorder.contexts[1]["history"][:2] == _expected_history(second)


def test_an_event_stored_without_version_or_in_another_key_order_still_replays() -> None:
    started = execution_started(NOW, "hello", "i-1", '"x"', version=None)
    del started["Version"]  # written before the engine stored versions
    reordered = {"Timestamp": "2026-12-01T09:00:00.000000Z", "EventId": -1, "EventType": 13}
    reordered["IsPlayed"] = False
    past = _stored(new_event(EventType.ORCHESTRATOR_STARTED, NOW), started, reordered)
    recorder = Recorder()
    decide(_request(past), recorder, PastEvents())

    history = recorder.contexts[0]["history"]
    assert history[1] == {**started, "Version": None, "IsPlayed": True}
    assert history[2] == {**reordered, "IsPlayed": True}


def test_the_memo_keeps_at_most_its_bound_and_drops_finished_instances() -> None:
    memo = PastEvents(max_instances=2)
    recorder = Recorder()
    for instance in ("a", "b", "c"):
        decide(_request(_first_generation(), instance), recorder, memo)
    assert len(memo) == 2

    async def finished(name: str, context_json: str) -> dict[str, Any]:
        return {"isDone": True, "actions": [[SAY]], "output": 1, "schemaVersion": 1}

    outcome = decide(_request(_first_generation(), "c"), finished, memo)
    assert outcome.runtime_status == "Completed"
    assert len(memo) == 1
