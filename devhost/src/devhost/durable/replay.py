"""One orchestration episode through the SDK's own replay engine.

An episode is what the Durable extension does when an orchestration's queue has messages:
append ``OrchestratorStarted`` and the new events to the history, call the orchestrator
function with the whole history, translate the actions it answers with, and close the
episode with ``OrchestratorCompleted`` (plus ``ExecutionCompleted`` when it finished). As
between the extension and the Python worker, only the call itself runs where the function
code runs (``ReplayFunction``: the orchestration trigger's context JSON in, the SDK's
state out); the history, the translation and the decision stay with the host.

External events are new events like any other, in the order they arrived, whether a wait
for them is open or not: the extension hands an out-of-process SDK the raw history, so the
SDK buffers an early event itself, and its buffering is what apps meet on Azure, including
its known defect (Azure/azure-functions-durable-python#507: an early event is handed to
every later wait of the same name).

Every episode replays the whole history, so its stored events are not decoded and encoded
again for each one: ``PastEvents`` keeps each instance's events as parsed, and the context
the SDK reads is spliced from the stored JSON text, each event marked played.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from devhost.durable.history import (
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

ReplayFunction = Callable[[str, str], Awaitable[dict[str, Any]]]
"""Calls the named orchestrator through the SDK with a context JSON; returns its state."""


class WorkerUnavailableError(RuntimeError):
    """A worker process died with the request in flight; it is run again, nothing is lost."""


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
    translation: TranslationResult = field(default_factory=TranslationResult)


class PastEvents:
    """The stored history of recently replayed instances, each event parsed once.

    Within a generation a history only grows, so an instance's next episode starts with the
    stored events this memo holds: those are taken as they are and only the rest is parsed.
    Anything else (a new generation, a purge and restart) shows as a stored event that differs
    and is parsed afresh from there. At most ``max_instances`` instances are kept, the least
    recently replayed dropped first, and a finished instance is dropped at once. The parsed
    events are shared between episodes: nothing may change them.
    """

    def __init__(self, max_instances: int = 512) -> None:
        self.max_instances = max_instances
        self._instances: OrderedDict[str, _Parsed] = OrderedDict()

    def __len__(self) -> int:
        return len(self._instances)

    def of(self, instance_id: str, stored: list[str]) -> _Parsed:
        """``stored``, parsed, and in the played form the SDK reads."""
        parsed = self._instances.pop(instance_id, None) or _Parsed([], [], [])
        same = 0
        limit = min(len(parsed.stored), len(stored))
        while same < limit and parsed.stored[same] == stored[same]:
            same += 1
        # An engine runs one episode of an instance at a time, so its entry is changed in
        # place: usually nothing is cut and only this episode's new events are appended.
        del parsed.stored[same:], parsed.events[same:], parsed.played[same:]
        for text in stored[same:]:
            event = json.loads(text)
            playable = with_version(event)
            parsed.stored.append(text)
            parsed.events.append(playable)
            parsed.played.append(_played_json(text, event, playable))
        self._instances[instance_id] = parsed
        while len(self._instances) > self.max_instances:
            self._instances.popitem(last=False)
        return parsed

    def forget(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)


@dataclass
class _Parsed:
    stored: list[str]
    events: list[HistoryEvent]
    played: list[str]
    """Each event as the SDK reads it in a replay: its JSON with ``IsPlayed`` true."""


_UNPLAYED = '"IsPlayed": false'
_PLAYED = '"IsPlayed": true'
_LEADING_KEYS = ("EventType", "EventId", "IsPlayed")


def _played_json(text: str, event: HistoryEvent, playable: HistoryEvent) -> str:
    """``text`` (one stored event) with ``IsPlayed`` true, without encoding it again.

    ``history.new_event`` writes the integer ``EventType`` and ``EventId`` before
    ``IsPlayed``, so in such a document the first ``"IsPlayed": false`` is that key; any
    other document, or one ``with_version`` completed, is encoded anew.
    """
    if playable is event and tuple(event)[:3] == _LEADING_KEYS and event["IsPlayed"] is False:
        return text.replace(_UNPLAYED, _PLAYED, 1)
    return json.dumps({**playable, "IsPlayed": True})


async def decide_episode(
    request: EpisodeRequest, replay: ReplayFunction, memo: PastEvents
) -> EpisodeOutcome:
    """Replay ``request`` through the SDK and decide what the episode records.

    ``memo`` keeps parsed histories between the episodes of an engine. A
    ``WorkerUnavailableError`` of ``replay`` propagates: nothing was decided.
    """
    outcome = await _decide_episode(
        request, replay, memo.of(request.instance_id, request.past_json)
    )
    if outcome.runtime_status != "Running":
        memo.forget(request.instance_id)
    return outcome


async def _decide_episode(
    request: EpisodeRequest, replay: ReplayFunction, parsed: _Parsed
) -> EpisodeOutcome:
    episode = [new_event(EventType.ORCHESTRATOR_STARTED, request.now), *request.new_events]
    past = parsed.events
    try:
        context = context_json(
            request.instance_id,
            request.parent_instance_id,
            request.input_json,
            parsed.played,
            episode,
        )
        state = await replay(request.orchestrator, context)
        translation = translate(
            request.instance_id, [*past, *episode], state, request.default_version
        )
    except WorkerUnavailableError:
        raise
    except (NonDeterminismError, UnsupportedActionError) as error:
        logger.error(
            "orchestration failed instance_id=%s name=%s error=%s",
            request.instance_id,
            request.orchestrator,
            error,
        )
        return _failed(request, episode, str(error), None)
    except Exception as error:
        # The SDK itself broke (not the user code, whose failures arrive as a state).
        logger.exception("orchestrator replay crashed instance_id=%s", request.instance_id)
        return _failed(request, episode, _orchestrator_error(request, error), None)
    return _decide(request, episode, state, translation)


def with_version(event: HistoryEvent) -> HistoryEvent:
    """An ExecutionStarted stored without ``Version`` replays as one without a version (the
    SDK reads the key unconditionally); the stored history is left as it is."""
    if event["EventType"] == EventType.EXECUTION_STARTED and "Version" not in event:
        return {**event, "Version": None}
    return event


def context_json(
    instance_id: str,
    parent_instance_id: str | None,
    input_json: str | None,
    played: list[str],
    episode: list[HistoryEvent],
) -> str:
    """The orchestration trigger's context: the history (played events as JSON text, then
    this episode's) and the instance's fields, as one JSON document."""
    rest = json.dumps(
        {
            "instanceId": instance_id,
            "isReplaying": bool(played),
            "parentInstanceId": parent_instance_id,
            "input": input_json,
            "upperSchemaVersion": REPLAY_SCHEMA_VERSION,
        }
    )
    history = ", ".join([*played, *(json.dumps(event) for event in episode)])
    return '{"history": [' + history + "], " + rest[1:]


def _decide(
    request: EpisodeRequest,
    episode: list[HistoryEvent],
    state: dict[str, Any],
    translation: TranslationResult,
) -> EpisodeOutcome:
    custom_status = state.get("customStatus")
    custom_status_json = None if custom_status is None else json.dumps(custom_status)
    error = state.get("error")
    if error is not None:
        return _failed(request, episode, _orchestrator_error(request, error), custom_status_json)
    events = [*episode, *translation.scheduling_events]
    completed = new_event(EventType.ORCHESTRATOR_COMPLETED, request.now)
    if state.get("isDone") and translation.continue_as_new:
        return EpisodeOutcome(
            events=[*events, completed],
            runtime_status="ContinuedAsNew",
            custom_status_json=custom_status_json,
            continue_as_new_input=translation.continue_as_new_input,
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
            translation=translation,
        )
    return EpisodeOutcome(
        events=[*events, completed],
        runtime_status="Running",
        custom_status_json=custom_status_json,
        translation=translation,
    )


def _orchestrator_error(request: EpisodeRequest, error: object) -> str:
    return f"Orchestrator function '{request.orchestrator}' failed: {error}"


def _failed(
    request: EpisodeRequest,
    episode: list[HistoryEvent],
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
    )
