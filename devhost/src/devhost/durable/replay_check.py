"""A whole stored history replayed through today's orchestrator code, as the engine replays it.

The engine replays an instance's history at each episode and fails the instance when the code
asks for other activities, timers or sub-orchestrations than the history recorded
(``translation.NonDeterminismError``). ``check_history`` does the same replay once, over a
finished or running instance's whole history, without running anything: what it finds is
what the engine would raise at that instance's next episode, because it is the same SDK call
and the same translation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devhost.durable.history import DTFX_NAMES, EventType, HistoryEvent, OrchestrationStatusCode
from devhost.durable.replay import ReplayFunction, context_json, with_version
from devhost.durable.translation import (
    NonDeterminismError,
    UnsupportedActionError,
    translate,
)


class UnreadableHistoryError(ValueError):
    """A history that does not begin an orchestration the way the engine records one."""


@dataclass(frozen=True)
class HistoryCheck:
    """What replaying one instance's history found.

    ``mismatch`` is the engine's own error when the code asks for something else than the
    history holds; ``failure`` the error the code raised in the replay where the recorded run
    went on. Both None: it replays cleanly.
    """

    instance_id: str
    orchestrator: str
    version: str | None
    mismatch: NonDeterminismError | None = None
    failure: str | None = None

    @property
    def clean(self) -> bool:
        return self.mismatch is None and self.failure is None


def started_event(history: list[HistoryEvent]) -> HistoryEvent:
    """The history's ExecutionStarted, which names the orchestrator, its input and version."""
    for event in history:
        if event.get("EventType") == EventType.EXECUTION_STARTED:
            return event
    raise UnreadableHistoryError("the history has no ExecutionStarted event")


async def check_history(
    instance_id: str,
    history: list[HistoryEvent],
    replay: ReplayFunction,
    default_version: str | None = None,
) -> HistoryCheck:
    """Replay ``history`` (events as the engine stores them) through ``replay`` and translate
    the actions the code answers with against it."""
    started = started_event(history)
    name = str(started.get("Name"))
    version = started.get("Version")
    parent = (started.get("ParentInstance") or {}).get("OrchestrationInstance") or {}
    # Every event is a past one: the whole history is replayed in one call.
    played = [json.dumps({**with_version(event), "IsPlayed": True}) for event in history]
    context = context_json(instance_id, parent.get("InstanceId"), started.get("Input"), played, [])
    state = await replay(name, context)
    try:
        translate(instance_id, history, state, default_version)
    except NonDeterminismError as mismatch:
        return HistoryCheck(instance_id, name, version, mismatch=mismatch)
    except UnsupportedActionError as unsupported:
        return HistoryCheck(instance_id, name, version, failure=str(unsupported))
    error = state.get("error")
    if error is not None and not _ended_failed(history):
        return HistoryCheck(instance_id, name, version, failure=str(error))
    return HistoryCheck(instance_id, name, version)


def _ended_failed(history: list[HistoryEvent]) -> bool:
    """The recorded run itself ended in failure, so a replay that fails repeats it."""
    return any(
        event.get("EventType") == EventType.EXECUTION_COMPLETED
        and event.get("OrchestrationStatus") == OrchestrationStatusCode.FAILED
        for event in history
    )


def as_stored(event: dict[str, Any]) -> HistoryEvent:
    """An event shown with its ``EventType`` by name, DTFx's (``TaskScheduled``) or the
    engine's (``TASK_SCHEDULED``), in the engine's stored form."""
    kind = event.get("EventType")
    if isinstance(kind, str):
        for member in EventType:
            if kind in (member.name, DTFX_NAMES.get(member)):
                return {**event, "EventType": int(member)}
        raise UnreadableHistoryError(f"unknown history event type {kind!r}")
    return event
