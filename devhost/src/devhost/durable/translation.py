"""Action -> history translation, sequence ids and the determinism check.

The SDK returns the actions its replay produced (replay schema V2: one list, one entry per
``yield`` of a new task, compound tasks as WhenAll/WhenAny trees).  The Durable extension
turns them into DTFx calls; DTFx numbers every activity, timer and sub-orchestration with
the next sequence id *in the order the calls happen*.  This module replays that numbering:

* top-level actions are awaited one after another (the extension's V2 shim awaits each
  action before it issues the next one), so an action gets its ids only once the previous
  one has completed in the history;
* a ``...WithRetry`` action takes a new id for its retry timer when a failure is replayed
  and another for the next attempt when that timer fires (the SDK's ``RetryAbleTask``
  numbers its children the same way);
* external-event waits take no id;
* when the history (or the end of the action list) shows that the code moved past an
  action that still looks pending here, the next actions are issued anyway (the SDK leaves
  tasks yielded before out of a compound action, e.g. a wait reused in a loop).

Every id the code asks for is checked against the TaskScheduled / TimerCreated /
SubOrchestrationInstanceCreated event the history holds under that id, and every such
event must be asked for again: otherwise the code changed under a running instance and the
instance fails with a ``NonDeterminismError`` (the SDK itself does not check, see
pitfalls.py P4).  Ids the history does not hold yet become new scheduling events.

The engine speaks replay schema V2; ``REPLAY_SCHEMA_VERSION`` says why not V3.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devhost.durable.history import (
    EventType,
    HistoryEvent,
    event_type_name,
    format_timestamp,
    new_event,
    parse_timestamp,
)
from devhost.durable.retry import RetryPolicy

REPLAY_SCHEMA_VERSION = 1
"""The ``upperSchemaVersion`` the engine announces (the SDK's ``ReplaySchema.V2``).

V3 (``upperSchemaVersionNew=2``) only adds "long timers": a timer further away than
``maximumShortTimerDuration`` is split into a chain of shorter timers, a workaround for the
7-day message visibility limit of Azure Storage queues.  SQLite has no such limit, and in
SDK 1.7 cancelling a long timer does not mark the action it emitted as cancelled
(pitfalls.py P7b), so a cancelled long timer would still fire.  V2 is the newest schema
whose timer cancellation works.
"""


class ActionType(enum.IntEnum):
    """The SDK's ``ActionType`` numbers."""

    CALL_ACTIVITY = 0
    CALL_ACTIVITY_WITH_RETRY = 1
    CALL_SUB_ORCHESTRATOR = 2
    CALL_SUB_ORCHESTRATOR_WITH_RETRY = 3
    CONTINUE_AS_NEW = 4
    CREATE_TIMER = 5
    WAIT_FOR_EXTERNAL_EVENT = 6
    CALL_ENTITY = 7
    CALL_HTTP = 8
    SIGNAL_ENTITY = 9
    WHEN_ANY = 11
    WHEN_ALL = 12


class NonDeterminismError(Exception):
    """The orchestrator code no longer matches the history of a running instance."""

    def __init__(self, instance_id: str, sequence_id: int, history_has: str, code_wants: str):
        super().__init__(
            f"Non-deterministic orchestrator: instance '{instance_id}' at sequence id "
            f"{sequence_id}: the history has {history_has} but the code now asks for "
            f"{code_wants}. The orchestrator code changed while this instance was running; "
            "deploy code changes that alter the sequence of activities, timers and "
            "sub-orchestrations under a new orchestrator name (or version), or terminate and "
            "restart the instance."
        )
        self.instance_id = instance_id
        self.sequence_id = sequence_id
        self.history_has = history_has
        self.code_wants = code_wants


class UnsupportedActionError(Exception):
    """An SDK feature the devhost does not emulate (entities, durable HTTP)."""


@dataclass(frozen=True)
class ActivityRequest:
    """A new activity execution to run."""

    task_id: int
    name: str
    input_json: str | None


@dataclass(frozen=True)
class TimerRequest:
    """A new durable timer to arm."""

    timer_id: int
    fire_at: dt.datetime


@dataclass(frozen=True)
class SubOrchestrationRequest:
    """A new sub-orchestration instance to start."""

    task_id: int
    name: str
    instance_id: str
    input_json: str | None
    version: str | None = None
    """The child's orchestration version: the one the action asked for, else the host's
    ``defaultVersion`` (never the parent's)."""


@dataclass(frozen=True)
class ImmediateFailure:
    """A retry attempt scheduled after the retry timeout: it fails without running.

    The SDK's ``RetryAbleTask`` only gives up after ``maxNumberOfAttempts`` attempts, so
    the remaining attempts are failed one by one with the last real failure.
    """

    event: HistoryEvent


@dataclass
class TranslationResult:
    """What one replay's actions require beyond the history the SDK already saw."""

    scheduling_events: list[HistoryEvent] = field(default_factory=list)
    activities: list[ActivityRequest] = field(default_factory=list)
    timers: list[TimerRequest] = field(default_factory=list)
    cancelled_timer_ids: set[int] = field(default_factory=set)
    sub_orchestrations: list[SubOrchestrationRequest] = field(default_factory=list)
    immediate_failures: list[ImmediateFailure] = field(default_factory=list)
    continue_as_new: bool = False
    continue_as_new_input: str | None = None


class _State(enum.Enum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class _Node:
    """A task of the replayed code; a parent is told when a child finishes."""

    def __init__(self) -> None:
        self.parent: _Node | None = None
        self.state = _State.PENDING
        self.failure: HistoryEvent | None = None

    @property
    def done(self) -> bool:
        return self.state is not _State.PENDING

    def activate(self, sim: _Simulation) -> None:
        raise NotImplementedError

    def child_done(self, child: _Node, sim: _Simulation) -> None:
        raise NotImplementedError

    def finish(self, succeeded: bool, sim: _Simulation, failure: HistoryEvent | None) -> None:
        if self.done:
            return
        self.state = _State.SUCCEEDED if succeeded else _State.FAILED
        self.failure = failure
        if self.parent is not None:
            self.parent.child_done(self, sim)


class _Leaf(_Node):
    """A task completed by one history event (an activity, timer or sub-orchestration)."""

    def child_done(self, child: _Node, sim: _Simulation) -> None:
        raise AssertionError("leaves have no children")

    def complete(self, event: HistoryEvent, sim: _Simulation) -> None:
        succeeded = event["EventType"] in (
            EventType.TASK_COMPLETED,
            EventType.TIMER_FIRED,
            EventType.SUB_ORCHESTRATION_COMPLETED,
            EventType.EVENT_RAISED,
        )
        self.finish(succeeded, sim, None if succeeded else event)


class _ActivityLeaf(_Leaf):
    def __init__(self, name: str, input_json: str | None, expired_failure: HistoryEvent | None):
        super().__init__()
        self.name = name
        self.input_json = input_json
        self.expired_failure = expired_failure

    def activate(self, sim: _Simulation) -> None:
        task_id, is_new = sim.claim(EventType.TASK_SCHEDULED, self.name, f"activity '{self.name}'")
        sim.register(task_id, self)
        if not is_new:
            return
        sim.result.scheduling_events.append(
            new_event(
                EventType.TASK_SCHEDULED,
                sim.now,
                task_id,
                Name=self.name,
                Input=self.input_json,
                Version="",
            )
        )
        if self.expired_failure is None:
            sim.result.activities.append(ActivityRequest(task_id, self.name, self.input_json))
        else:
            sim.result.immediate_failures.append(
                ImmediateFailure(sim.failure_event(self.expired_failure, task_id))
            )


class _SubOrchestrationLeaf(_Leaf):
    def __init__(
        self,
        name: str,
        input_json: str | None,
        instance_id: str | None,
        version: str | None,
        expired_failure: HistoryEvent | None,
    ):
        super().__init__()
        self.name = name
        self.input_json = input_json
        self.instance_id = instance_id
        self.version = version
        self.expired_failure = expired_failure

    def activate(self, sim: _Simulation) -> None:
        task_id, is_new = sim.claim(
            EventType.SUB_ORCHESTRATION_CREATED, self.name, f"sub-orchestration '{self.name}'"
        )
        sim.register(task_id, self)
        if not is_new:
            return
        # Durable Functions derives a child id from the parent id and the sequence id.
        child_id = self.instance_id or f"{sim.instance_id}:{task_id}"
        # The version the action carries, else the host's defaultVersion when it is created.
        version = self.version if self.version is not None else sim.default_version
        sim.result.scheduling_events.append(
            new_event(
                EventType.SUB_ORCHESTRATION_CREATED,
                sim.now,
                task_id,
                Name=self.name,
                InstanceId=child_id,
                Input=self.input_json,
                Version=version,
            )
        )
        if self.expired_failure is None:
            sim.result.sub_orchestrations.append(
                SubOrchestrationRequest(task_id, self.name, child_id, self.input_json, version)
            )
        else:
            sim.result.immediate_failures.append(
                ImmediateFailure(sim.failure_event(self.expired_failure, task_id))
            )


class _TimerLeaf(_Leaf):
    def __init__(self, fire_at: dt.datetime, cancelled: bool) -> None:
        super().__init__()
        self.fire_at = fire_at
        self.cancelled = cancelled

    def activate(self, sim: _Simulation) -> None:
        timer_id, is_new = sim.claim(EventType.TIMER_CREATED, None, "a timer")
        sim.register(timer_id, self)
        if self.cancelled:
            sim.result.cancelled_timer_ids.add(timer_id)
        if not is_new:
            return
        sim.result.scheduling_events.append(
            new_event(
                EventType.TIMER_CREATED, sim.now, timer_id, FireAt=format_timestamp(self.fire_at)
            )
        )
        if not self.cancelled:
            sim.result.timers.append(TimerRequest(timer_id, self.fire_at))


class _WaitLeaf(_Leaf):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def activate(self, sim: _Simulation) -> None:
        sim.open_waits[self.name].append(self)


class _CompoundNode(_Node):
    def __init__(self, children: list[_Node], wait_for_all: bool) -> None:
        super().__init__()
        self.children = children
        self.wait_for_all = wait_for_all
        for child in children:
            child.parent = self

    def activate(self, sim: _Simulation) -> None:
        for child in self.children:
            child.activate(sim)
        if not self.children:
            self.finish(True, sim, None)

    def child_done(self, child: _Node, sim: _Simulation) -> None:
        if not self.wait_for_all:
            self.finish(True, sim, None)
        elif child.state is _State.FAILED:
            self.finish(False, sim, child.failure)
        elif all(c.state is _State.SUCCEEDED for c in self.children):
            self.finish(True, sim, None)


class _RetryNode(_Node):
    """``call_*_with_retry``: attempts and retry timers, numbered as they happen."""

    def __init__(self, action: dict[str, Any], is_sub_orchestration: bool) -> None:
        super().__init__()
        self.action = action
        self.is_sub_orchestration = is_sub_orchestration
        self.policy = RetryPolicy.from_action(action["retryOptions"])
        self.failed_attempts = 0
        self.first_attempt_at: dt.datetime | None = None
        self.last_failure: HistoryEvent | None = None
        self.timed_out = False
        self.waiting_timer: _TimerLeaf | None = None

    def activate(self, sim: _Simulation) -> None:
        self.first_attempt_at = sim.now
        self._start_attempt(sim)

    def _start_attempt(self, sim: _Simulation) -> None:
        expired = self.last_failure if self.timed_out else None
        attempt: _Leaf
        if self.is_sub_orchestration:
            attempt = _SubOrchestrationLeaf(
                self.action["functionName"],
                self.action.get("input"),
                self.action.get("instanceId"),
                self.action.get("version"),
                expired,
            )
        else:
            attempt = _ActivityLeaf(self.action["functionName"], self.action.get("input"), expired)
        attempt.parent = self
        attempt.activate(sim)

    def child_done(self, child: _Node, sim: _Simulation) -> None:
        if child is self.waiting_timer:
            self.waiting_timer = None
            if self.failed_attempts >= self.policy.max_number_of_attempts:
                self.finish(False, sim, self.last_failure)
            else:
                self._start_attempt(sim)
            return
        if child.state is _State.SUCCEEDED:
            self.finish(True, sim, None)
            return
        self.failed_attempts += 1
        if not self.timed_out:
            self.last_failure = child.failure
        assert self.first_attempt_at is not None
        self.timed_out = self.timed_out or self.policy.timed_out(self.first_attempt_at, sim.now)
        # DTFx also waits after the last failed attempt; the SDK waits for that timer too.
        delay = (
            dt.timedelta(0)
            if self.timed_out
            else self.policy.delay_after_failure(self.failed_attempts)
        )
        timer = _TimerLeaf(sim.now + delay, cancelled=False)
        timer.parent = self
        self.waiting_timer = timer
        timer.activate(sim)


class _Simulation:
    """Replays the numbering of one orchestration generation against its history."""

    def __init__(
        self, instance_id: str, history: list[HistoryEvent], default_version: str | None
    ) -> None:
        self.instance_id = instance_id
        self.history = history
        self.default_version = default_version
        self.result = TranslationResult()
        self.now = parse_timestamp(history[0]["Timestamp"])
        self.next_sequence_id = 0
        self.scheduled_in_history: dict[int, HistoryEvent] = {
            event["EventId"]: event
            for event in history
            if event["EventType"]
            in (
                EventType.TASK_SCHEDULED,
                EventType.TIMER_CREATED,
                EventType.SUB_ORCHESTRATION_CREATED,
            )
        }
        self.claimed: set[int] = set()
        self.by_id: dict[int, _Leaf] = {}
        self.open_waits: defaultdict[str, list[_WaitLeaf]] = defaultdict(list)
        self.top_level: list[dict[str, Any]] = []
        self.cursor = 0
        self.current: _Node | None = None

    def claim(self, expected: EventType, name: str | None, wanted: str) -> tuple[int, bool]:
        """Take the next sequence id; check it against the history; return (id, is_new)."""
        sequence_id = self.next_sequence_id
        self.next_sequence_id += 1
        recorded = self.scheduled_in_history.get(sequence_id)
        if recorded is None:
            return sequence_id, True
        if recorded["EventType"] != expected or (name is not None and recorded["Name"] != name):
            raise NonDeterminismError(self.instance_id, sequence_id, _describe(recorded), wanted)
        self.claimed.add(sequence_id)
        return sequence_id, False

    def register(self, sequence_id: int, leaf: _Leaf) -> None:
        self.by_id[sequence_id] = leaf

    def failure_event(self, last_failure: HistoryEvent, task_id: int) -> HistoryEvent:
        failed_type = (
            EventType.SUB_ORCHESTRATION_FAILED
            if last_failure["EventType"] == EventType.SUB_ORCHESTRATION_FAILED
            else EventType.TASK_FAILED
        )
        return new_event(
            failed_type,
            self.now,
            TaskScheduledId=task_id,
            Reason=f"Retry timeout exceeded; not retried. Last failure: {last_failure['Reason']}",
            Details=last_failure.get("Details"),
        )

    def run(self, actions: list[dict[str, Any]]) -> TranslationResult:
        self.top_level = actions
        for event in self.history:
            event_type = event["EventType"]
            if event_type == EventType.ORCHESTRATOR_STARTED:
                self.now = max(self.now, parse_timestamp(event["Timestamp"]))
            elif event_type == EventType.EXECUTION_STARTED:
                self._advance()
            elif event_type == EventType.EVENT_RAISED:
                self._deliver_event(event)
            elif event_type in _COMPLETION_ID_KEYS:
                self._complete_task(event, event[_COMPLETION_ID_KEYS[EventType(event_type)]])
        # Whatever the code yielded after the awaited action is pending now (see _catch_up).
        self._catch_up(lambda: False)
        unclaimed = sorted(set(self.scheduled_in_history) - self.claimed)
        if unclaimed:
            first = unclaimed[0]
            raise NonDeterminismError(
                self.instance_id,
                first,
                _describe(self.scheduled_in_history[first]),
                "nothing (the code no longer schedules it at this point)",
            )
        return self.result

    def _deliver_event(self, event: HistoryEvent) -> None:
        name = event["Name"]
        self._catch_up(lambda: bool(self.open_waits.get(name)))
        waits = self.open_waits.get(name)
        if waits:
            # The SDK hands an event to the most recent wait for that name.
            waits.pop().complete(event, self)
            self._advance()

    def _complete_task(self, event: HistoryEvent, sequence_id: int) -> None:
        self._catch_up(lambda: sequence_id in self.by_id)
        leaf = self.by_id.get(sequence_id)
        if leaf is not None and not leaf.done:
            leaf.complete(event, self)
            self._advance()

    def _advance(self) -> None:
        """Issue the next top-level actions while the awaited one has completed."""
        while self.cursor < len(self.top_level) and (self.current is None or self.current.done):
            self._issue_next()

    def _catch_up(self, satisfied: Callable[[], bool]) -> None:
        """Issue further top-level actions, awaited or not, until ``satisfied()``.

        A compound task may contain tasks yielded earlier (a wait reused across loop
        iterations, say); the SDK leaves those out of the compound action, so the awaited
        action can look pending here while the code has already moved on.  The history
        proves it did when it holds a result for a task not issued yet, and the action list
        proves it at the end of the replay.
        """
        while not satisfied() and self.cursor < len(self.top_level):
            self._issue_next()

    def _issue_next(self) -> None:
        action = self.top_level[self.cursor]
        self.cursor += 1
        if action["actionType"] == ActionType.CONTINUE_AS_NEW:
            # Fire-and-forget: the SDK spends a sequence id on it and awaits nothing.
            self.next_sequence_id += 1
            self.result.continue_as_new = True
            self.result.continue_as_new_input = action.get("input")
            self.current = None
            return
        node = _build_node(action)
        self.current = node
        node.activate(self)


_COMPLETION_ID_KEYS: dict[EventType, str] = {
    EventType.TASK_COMPLETED: "TaskScheduledId",
    EventType.TASK_FAILED: "TaskScheduledId",
    EventType.SUB_ORCHESTRATION_COMPLETED: "TaskScheduledId",
    EventType.SUB_ORCHESTRATION_FAILED: "TaskScheduledId",
    EventType.TIMER_FIRED: "TimerId",
}


def _build_node(action: dict[str, Any]) -> _Node:
    action_type = action["actionType"]
    if action_type == ActionType.CALL_ACTIVITY:
        return _ActivityLeaf(action["functionName"], action.get("input"), None)
    if action_type == ActionType.CALL_SUB_ORCHESTRATOR:
        return _SubOrchestrationLeaf(
            action["functionName"],
            action.get("input"),
            action.get("instanceId"),
            action.get("version"),
            None,
        )
    if action_type == ActionType.CALL_ACTIVITY_WITH_RETRY:
        return _RetryNode(action, is_sub_orchestration=False)
    if action_type == ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY:
        return _RetryNode(action, is_sub_orchestration=True)
    if action_type == ActionType.CREATE_TIMER:
        return _TimerLeaf(parse_timestamp(action["fireAt"]), bool(action.get("isCanceled")))
    if action_type == ActionType.WAIT_FOR_EXTERNAL_EVENT:
        return _WaitLeaf(action["externalEventName"])
    if action_type in (ActionType.WHEN_ALL, ActionType.WHEN_ANY):
        children = [_build_node(child) for child in action["compoundActions"]]
        return _CompoundNode(children, wait_for_all=action_type == ActionType.WHEN_ALL)
    try:
        kind = ActionType(action_type).name
    except ValueError:
        kind = f"actionType {action_type}"
    raise UnsupportedActionError(
        f"the devhost durable engine does not support {kind} actions "
        "(durable entities and durable HTTP calls are not emulated)"
    )


def _describe(event: HistoryEvent) -> str:
    kind = event_type_name(event)
    name = event.get("Name")
    return f"{kind} '{name}'" if name else kind


def translate(
    instance_id: str,
    history: list[HistoryEvent],
    state: dict[str, Any],
    default_version: str | None = None,
) -> TranslationResult:
    """Number the actions of an SDK state against ``history`` (current generation).

    ``history`` starts with the OrchestratorStarted event of the first episode and ends with
    the events of the episode being decided. ``default_version`` is the host's
    ``defaultVersion``, the version of new sub-orchestrations whose action names none.
    """
    schema = state.get("schemaVersion")
    actions = state.get("actions") or []
    if schema != REPLAY_SCHEMA_VERSION or len(actions) > 1:
        raise UnsupportedActionError(
            f"the SDK answered with replay schema {schema!r}; the engine speaks schema "
            f"{REPLAY_SCHEMA_VERSION} (one action list)"
        )
    return _Simulation(instance_id, history, default_version).run(actions[0] if actions else [])
