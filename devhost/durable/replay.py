"""One orchestration episode through the SDK's own replay engine.

An episode is what the Durable extension does when an orchestration's queue has messages:
append ``OrchestratorStarted`` and the new events to the history, call the orchestrator
function with the whole history, translate the actions it answers with, and close the
episode with ``OrchestratorCompleted`` (plus ``ExecutionCompleted`` when it finished).

External events are delivered here, one per open wait, in the order they were raised.
That is DTFx's buffering semantics and the workaround for the SDK's buffered-event bug
(Azure/azure-functions-durable-python#507, pitfalls.py P2c/P2d): the SDK keeps at most one
early event per name and hands it to every later wait, so the engine never lets the SDK see
an ``EventRaised`` before the wait for it is open.  An event nobody waits for stays
buffered (also across ``continue_as_new``) until a wait opens.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devhost.durable.history import (
    BufferedEvent,
    EventType,
    HistoryEvent,
    OrchestrationStatusCode,
    new_event,
)
from devhost.durable.translation import (
    REPLAY_SCHEMA_VERSION,
    NonDeterminismError,
    TranslationResult,
    UnsupportedActionError,
    translate,
)

ReplayFunction = Callable[[str, str], dict[str, Any]]
"""Calls the named orchestrator through the SDK with a context JSON; returns its state."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeRequest:
    """Everything one episode reads."""

    instance_id: str
    orchestrator: str
    input_json: str | None
    parent_instance_id: str | None
    past_json: list[str]
    """The history so far as stored, one JSON document per event (decoded where it replays)."""
    new_events: list[HistoryEvent]
    buffered_events: list[BufferedEvent]
    now: dt.datetime
    default_version: str | None = None
    """The host's ``defaultVersion``: the version of sub-orchestrations started without one."""


@dataclass
class EpisodeOutcome:
    """What one episode decided; the engine commits it in one transaction."""

    events: list[HistoryEvent]
    runtime_status: str
    output_json: str | None = None
    custom_status_json: str | None = None
    continue_as_new_input: str | None = None
    delivered_buffer_ids: list[int] = field(default_factory=list)
    translation: TranslationResult = field(default_factory=TranslationResult)


def decide_episode(request: EpisodeRequest, replay: ReplayFunction) -> EpisodeOutcome:
    """Replay ``request`` through the SDK, delivering buffered events to open waits."""
    episode = [new_event(EventType.ORCHESTRATOR_STARTED, request.now), *request.new_events]
    remaining = list(request.buffered_events)
    delivered: list[int] = []
    past: list[HistoryEvent] = [_with_version(json.loads(event)) for event in request.past_json]
    while True:
        try:
            state = replay(request.orchestrator, _context_json(request, past, episode))
            translation = translate(
                request.instance_id, [*past, *episode], state, request.default_version
            )
        except (NonDeterminismError, UnsupportedActionError) as error:
            logger.error(
                "orchestration failed instance_id=%s name=%s error=%s",
                request.instance_id,
                request.orchestrator,
                error,
            )
            return _failed(request, episode, delivered, str(error), None)
        except Exception as error:
            # The SDK itself broke (not the user code, whose failures arrive as a state).
            logger.exception("orchestrator replay crashed instance_id=%s", request.instance_id)
            return _failed(request, episode, delivered, _orchestrator_error(request, error), None)
        if state.get("isDone") or state.get("error") is not None:
            break
        to_deliver = _deliverable(remaining, translation.outstanding_waits)
        if not to_deliver:
            break
        for buffered in to_deliver:
            episode.append({**buffered.event, "IsPlayed": False})
            delivered.append(buffered.buffer_id)
            remaining.remove(buffered)
    return _decide(request, episode, delivered, state, translation)


def _with_version(event: HistoryEvent) -> HistoryEvent:
    """An ExecutionStarted stored without ``Version`` replays as one without a version (the
    SDK reads the key unconditionally); the stored history is left as it is."""
    if event["EventType"] == EventType.EXECUTION_STARTED and "Version" not in event:
        return {**event, "Version": None}
    return event


def _deliverable(
    remaining: list[BufferedEvent], outstanding_waits: dict[str, int]
) -> list[BufferedEvent]:
    """The oldest buffered events that open waits can take, at most one per wait."""
    capacity = Counter(outstanding_waits)
    chosen: list[BufferedEvent] = []
    for buffered in remaining:
        if capacity[buffered.name] > 0:
            capacity[buffered.name] -= 1
            chosen.append(buffered)
    return chosen


def _context_json(
    request: EpisodeRequest, past: list[HistoryEvent], episode: list[HistoryEvent]
) -> str:
    played = [{**event, "IsPlayed": True} for event in past]
    return json.dumps(
        {
            "history": [*played, *episode],
            "instanceId": request.instance_id,
            "isReplaying": bool(played),
            "parentInstanceId": request.parent_instance_id,
            "input": request.input_json,
            "upperSchemaVersion": REPLAY_SCHEMA_VERSION,
        }
    )


def _decide(
    request: EpisodeRequest,
    episode: list[HistoryEvent],
    delivered: list[int],
    state: dict[str, Any],
    translation: TranslationResult,
) -> EpisodeOutcome:
    custom_status = state.get("customStatus")
    custom_status_json = None if custom_status is None else json.dumps(custom_status)
    error = state.get("error")
    if error is not None:
        return _failed(
            request, episode, delivered, _orchestrator_error(request, error), custom_status_json
        )
    events = [*episode, *translation.scheduling_events]
    completed = new_event(EventType.ORCHESTRATOR_COMPLETED, request.now)
    if state.get("isDone") and translation.continue_as_new:
        return EpisodeOutcome(
            events=[*events, completed],
            runtime_status="ContinuedAsNew",
            custom_status_json=custom_status_json,
            continue_as_new_input=translation.continue_as_new_input,
            delivered_buffer_ids=delivered,
            translation=translation,
        )
    if state.get("isDone"):
        output_json = json.dumps(state.get("output"))
        finished = new_event(
            EventType.EXECUTION_COMPLETED,
            request.now,
            OrchestrationStatus=int(OrchestrationStatusCode.COMPLETED),
            Result=output_json,
        )
        return EpisodeOutcome(
            events=[*events, completed, finished],
            runtime_status="Completed",
            output_json=output_json,
            custom_status_json=custom_status_json,
            delivered_buffer_ids=delivered,
            translation=translation,
        )
    return EpisodeOutcome(
        events=[*events, completed],
        runtime_status="Running",
        custom_status_json=custom_status_json,
        delivered_buffer_ids=delivered,
        translation=translation,
    )


def _orchestrator_error(request: EpisodeRequest, error: object) -> str:
    return f"Orchestrator function '{request.orchestrator}' failed: {error}"


def _failed(
    request: EpisodeRequest,
    episode: list[HistoryEvent],
    delivered: list[int],
    message: str,
    custom_status_json: str | None,
) -> EpisodeOutcome:
    output_json = json.dumps(message)
    finished = new_event(
        EventType.EXECUTION_COMPLETED,
        request.now,
        OrchestrationStatus=int(OrchestrationStatusCode.FAILED),
        Result=output_json,
    )
    return EpisodeOutcome(
        events=[*episode, new_event(EventType.ORCHESTRATOR_COMPLETED, request.now), finished],
        runtime_status="Failed",
        output_json=output_json,
        custom_status_json=custom_status_json,
        delivered_buffer_ids=delivered,
    )
