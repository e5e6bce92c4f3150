"""The devhost's Durable Functions engine: scheduler, activities, timers, client operations.

Orchestrations run through the SDK's own replay engine (``replay.py``), their
state lives in SQLite (``store.py``), activities run at least once with the worker's
(de)serialisation in a bounded pool, timers follow an injectable clock (``clock.py``),
and the client operations of the ``durableClient`` binding are async methods here.

The engine makes no assumption about how functions are triggered: a host drives it either
with the background loop (``start``/``stop``) or step by step (``run_until_idle``,
``advance_to_next_timer``), deciding itself when virtual time may jump
(``has_runnable_work``, ``next_timer_at``).  One engine per database file. Each episode and
activity runs inside a host span, child of the trace context the instance started with (C9).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import traceback
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from azure.functions.decorators.function_app import Function

from devhost.clock import Clock, RealClock, VirtualClock
from devhost.durable.history import (
    EventType,
    HistoryEvent,
    OrchestrationStatusCode,
    execution_started,
    format_timestamp,
    new_event,
)
from devhost.durable.registry import FunctionRegistry, UnknownFunctionError
from devhost.durable.replay import (
    EpisodeOutcome,
    EpisodeRequest,
    PastEvents,
    WorkerUnavailableError,
    decide_episode,
)
from devhost.durable.status import (
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidInstanceIdError,
    OrchestrationStatus,
    RuntimeStatus,
    decode_json,
)
from devhost.durable.store import (
    ActivityWorkItem,
    DueTimer,
    DurableStore,
    InboxMessage,
    InstanceRecord,
)
from devhost.durable.translation import SubOrchestrationRequest
from devhost.durable.versioning import (
    VERSION_MISMATCH_OUTPUT,
    VersionFailureStrategy,
    Versioning,
    execution_version,
)
from devhost.durable.workers import (
    ActivityRunner,
    InProcessActivities,
    InProcessOrchestrators,
    OrchestratorRunner,
)
from devhost.invocation import FunctionError
from devhost.sdk_compat import df_dumps
from devhost.telemetry import host_span

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENT_ACTIVITIES = 10
# Episodes of different instances replay concurrently (one at a time per instance); enough
# in flight to keep worker processes busy while the engine commits finished ones.
MAX_CONCURRENT_EPISODES = 16
# How long an instance waits before its episode is run again after a worker process died.
WORKER_RETRY_SECONDS = 1.0
_TERMINAL = {s.value for s in RuntimeStatus if s.is_terminal}
_FORBIDDEN_ID_CHARACTERS = set("/\\#?")


class EngineStalledError(RuntimeError):
    """``run_until_complete`` found an instance that nothing can move forward."""


@dataclass(frozen=True)
class _PreparedEpisode:
    """An episode read and ready to replay; its commit consumes exactly what was read."""

    record: InstanceRecord
    message_ids: list[int]
    buffered_ids: list[int]
    """Events raised before the instance started, which this episode's new events hold."""
    request: EpisodeRequest
    version: str | None
    """The orchestration version of the instance (its ExecutionStarted ``Version``)."""


class DurableEngine:
    """Runs the orchestrations and activities of one app on one SQLite database."""

    def __init__(
        self,
        functions: Iterable[Function],
        database: str = ":memory:",
        *,
        clock: Clock | None = None,
        max_concurrent_activities: int = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
        orchestrators: OrchestratorRunner | None = None,
        activities: ActivityRunner | None = None,
        versioning: Versioning | None = None,
    ) -> None:
        """``orchestrators`` decides episodes and ``activities`` runs activities; by default
        both run in this process (activities on a bounded thread pool or the event loop).
        ``versioning`` is host.json's defaultVersion and version strategies (``versioning.py``);
        by default the extension's: no defaultVersion, CurrentOrOlder, Reject."""
        if max_concurrent_activities < 1:
            raise ValueError("max_concurrent_activities must be at least 1")
        self.registry = FunctionRegistry.from_functions(functions)
        self._orchestrators = orchestrators or InProcessOrchestrators(self.registry)
        self._past_events = PastEvents()
        self.clock: Clock = clock or RealClock()
        self.versioning = versioning or Versioning()
        self.store = DurableStore(database)
        self.max_concurrent_activities = max_concurrent_activities
        self._executor = ThreadPoolExecutor(
            max_workers=max_concurrent_activities, thread_name_prefix="durable-activity"
        )
        self._activities = activities or InProcessActivities(self.registry, self._executor)
        self._running: dict[int, asyncio.Task[None]] = {}
        self._episodes: dict[str, asyncio.Task[None]] = {}
        # Instances whose version this host rejects (versionFailureStrategy Reject), with
        # that version. Their messages wait for a host whose version fits; the versioning
        # settings change only with a restart, so this engine does not try them again (a new
        # engine on the file does); a new instance under the same id is tried.
        self._rejected: dict[str, str | None] = {}
        # Scanning the inbox and the work items on every wake-up was a tenth of the devhost's
        # CPU under load: scan again only when something was posted or added, or when an
        # episode or activity ended (it may leave messages, or free a slot).
        self._inbox_seen_at: int | None = None
        self._work_seen_at: int | None = None
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self.clock.on_change(self._wake.set)

    # -- client operations (the durableClient binding) ---------------------------------

    async def start_new(
        self,
        name: str,
        instance_id: str | None = None,
        input: Any = None,
        version: str | None = None,
        trace_parent: Mapping[str, str] | None = None,
    ) -> str:
        """Schedule a new instance of orchestrator ``name``; return its instance id.

        ``trace_parent`` is the W3C carrier the durable client sent (its ``traceparent`` and
        ``tracestate`` headers): every episode and activity of the instance, and of its
        sub-orchestrations, is traced as its child (C9).

        A non-terminal instance with the same id is an error (as in Durable Functions);
        a terminal one is replaced, history included. The instance's orchestration version
        is ``version``, else the host's ``defaultVersion`` (None when there is none).
        """
        self.registry.orchestrator(name)
        instance_id = instance_id or uuid.uuid4().hex
        _validate_instance_id(instance_id)
        input_json = None if input is None else df_dumps(input)
        with self.store.transaction():
            existing = self.store.get_instance(instance_id)
            if existing is not None and existing.runtime_status not in _TERMINAL:
                raise InstanceAlreadyExistsError(instance_id, existing.runtime_status)
            if existing is not None:
                self.store.delete_instance(instance_id)
            version = self.versioning.version_for_new_instance(version)
            self._create_instance(instance_id, name, input_json, None, version)
            self.store.set_trace_context(instance_id, trace_parent or {})
        logger.info(
            "orchestration scheduled instance_id=%s name=%s version=%s", instance_id, name, version
        )
        self._wake.set()
        return instance_id

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        """Send an external event; unknown instance -> ``InstanceNotFoundError``.

        Events for a completed, failed or terminated instance are dropped and logged.
        """
        with self.store.transaction():
            record = self._require(instance_id)
            if record.runtime_status in _TERMINAL:
                logger.warning(
                    "external event dropped instance_id=%s event=%s reason=instance is %s",
                    instance_id,
                    event_name,
                    record.runtime_status,
                )
                return
            event = new_event(
                EventType.EVENT_RAISED,
                self.clock.now(),
                Name=event_name,
                Input=None if event_data is None else df_dumps(event_data),
            )
            self.store.post(instance_id, record.execution_id, event)
        self._wake.set()

    async def get_status(
        self, instance_id: str, show_history: bool = False, show_input: bool = True
    ) -> OrchestrationStatus | None:
        """The status of an instance, or None if it does not exist."""
        record = self.store.get_instance(instance_id)
        if record is None:
            return None
        return self._status(record, show_history, show_input)

    async def get_status_by(
        self,
        runtime_status: Iterable[RuntimeStatus | str] | None = None,
        created_time_from: dt.datetime | None = None,
        created_time_to: dt.datetime | None = None,
    ) -> list[OrchestrationStatus]:
        """Statuses of the instances matching every given filter."""
        statuses = None if runtime_status is None else [_status_name(s) for s in runtime_status]
        records = self.store.query_instances(statuses, created_time_from, created_time_to)
        return [self._status(record, False, True) for record in records]

    async def terminate(self, instance_id: str, reason: str) -> bool:
        """Terminate a pending or running instance; its pending work is discarded.

        Returns False (and changes nothing) when the instance had already finished.
        """
        with self.store.transaction():
            record = self._require(instance_id)
            if record.runtime_status in _TERMINAL:
                return False
            now = self.clock.now()
            output_json = df_dumps(reason)
            self.store.append_history(
                instance_id,
                [
                    new_event(EventType.EXECUTION_TERMINATED, now, Input=output_json),
                    new_event(
                        EventType.EXECUTION_COMPLETED,
                        now,
                        OrchestrationStatus=int(OrchestrationStatusCode.TERMINATED),
                        Result=output_json,
                    ),
                ],
            )
            finished = replace(
                record,
                runtime_status=RuntimeStatus.TERMINATED.value,
                output_json=output_json,
                last_updated_time=now,
            )
            self._finish(finished)
        self._rejected.pop(instance_id, None)
        logger.info("orchestration terminated instance_id=%s reason=%s", instance_id, reason)
        return True

    async def purge_instance_history(self, instance_id: str) -> int:
        """Delete an instance and its history; return how many instances were deleted."""
        with self.store.transaction():
            if self.store.get_instance(instance_id) is None:
                return 0
            self.store.delete_instance(instance_id)
        self._rejected.pop(instance_id, None)
        return 1

    # -- what a host-level scheduler needs ---------------------------------------------

    def has_runnable_work(self) -> bool:
        """Whether anything can happen without time moving (messages, activities, due timers)."""
        if (
            self._running
            or self._episodes
            or self.store.has_messages(excluding=self._rejected)
            or self.store.work_items(excluding=self._running, limit=1)
        ):
            return True
        next_timer = self.store.next_timer_at()
        return next_timer is not None and next_timer <= self.clock.now()

    def next_timer_at(self) -> dt.datetime | None:
        """When the earliest armed timer fires, or None."""
        return self.store.next_timer_at()

    async def run_until_idle(self) -> None:
        """Do all the work possible without moving time: episodes, activities, due timers."""
        self._require_not_serving()
        while True:
            if self._step():
                continue
            in_flight = [*self._running.values(), *self._episodes.values()]
            if in_flight:
                await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                continue
            return

    async def advance_to_next_timer(self) -> dt.datetime | None:
        """Virtual time only: jump to the next timer, then run until idle.

        Returns the new time, or None when no timer is armed (time does not move).
        """
        clock = self._virtual_clock()
        await self.run_until_idle()
        next_timer = self.store.next_timer_at()
        if next_timer is None:
            return None
        clock.advance_to(next_timer)
        await self.run_until_idle()
        return clock.now()

    async def run_until_complete(
        self, instance_id: str, max_timer_jumps: int = 10_000
    ) -> OrchestrationStatus:
        """Virtual time only: run, skipping time, until ``instance_id`` finishes."""
        for _ in range(max_timer_jumps):
            await self.run_until_idle()
            status = await self.get_status(instance_id)
            if status is None:
                raise InstanceNotFoundError(instance_id)
            if status.runtime_status.is_terminal:
                return status
            if await self.advance_to_next_timer() is None:
                if instance_id in self._rejected:
                    detail = self._version_detail(self._rejected[instance_id])
                    raise EngineStalledError(
                        f"instance '{instance_id}' is {status.runtime_status.value} and this "
                        f"host does not run its version ({detail}, "
                        "versionFailureStrategy Reject)"
                    )
                raise EngineStalledError(
                    f"instance '{instance_id}' is {status.runtime_status.value} and nothing "
                    "can move it forward: no messages, no activities, no timers (it waits "
                    "for an external event that was not raised)"
                )
        raise EngineStalledError(
            f"instance '{instance_id}' did not finish within {max_timer_jumps} timer jumps"
        )

    # -- background mode ---------------------------------------------------------------

    async def start(self) -> None:
        """Run the engine in the background until ``stop``."""
        self._require_not_serving()
        self._loop_task = asyncio.create_task(self._serve(), name="durable-engine")

    async def stop(self) -> None:
        """Stop the background loop; cancel running async activities and unfinished replays.

        A cancelled replay has committed nothing: its messages wait for the next engine.
        """
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        tasks = [*self._running.values(), *self._episodes.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()
        self._episodes.clear()
        self._inbox_seen_at = self._work_seen_at = None

    async def close(self) -> None:
        """Stop and release the database; unfinished activities re-run on the next engine."""
        await self.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        await self._orchestrators.close()
        self.store.close()

    async def _serve(self) -> None:
        try:
            await self._serve_forever()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("durable engine loop stopped database=%s", self.store.path)
            raise

    async def _serve_forever(self) -> None:
        while True:
            self._wake.clear()
            if self._step():
                await asyncio.sleep(0)
                continue
            timeout = None
            next_timer = self.store.next_timer_at()
            if next_timer is not None:
                timeout = self.clock.seconds_until(next_timer)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _require_not_serving(self) -> None:
        if self._loop_task is not None:
            raise RuntimeError("the engine runs in the background; stop() it before stepping")

    def _virtual_clock(self) -> VirtualClock:
        if not isinstance(self.clock, VirtualClock):
            raise TypeError("time can only be skipped with a VirtualClock")
        return self.clock

    # -- one scheduling pass -----------------------------------------------------------

    def _step(self) -> bool:
        """Fire due timers, start the episodes of instances with messages, dispatch activities."""
        progressed = self._fire_due_timers()
        posts = self.store.posts
        if self._inbox_seen_at != posts:
            self._inbox_seen_at = posts
            for instance_id in self.store.instances_with_messages():
                if len(self._episodes) >= MAX_CONCURRENT_EPISODES:
                    self._inbox_seen_at = None  # the rest waits for a free slot
                    break
                if instance_id in self._episodes or instance_id in self._rejected:
                    # One episode at a time per instance (its end rescans); a rejected
                    # version waits for another host.
                    continue
                self._episodes[instance_id] = asyncio.create_task(
                    self._episode(instance_id), name=f"episode-{instance_id}"
                )
                progressed = True
        return self._dispatch_activities() or progressed

    def _fire_due_timers(self) -> bool:
        due = self.store.due_timers(self.clock.now())
        for timer in due:
            self._fire(timer)
        return bool(due)

    def _fire(self, timer: DueTimer) -> None:
        with self.store.transaction():
            self.store.remove_timer(timer)
            self.store.post(
                timer.instance_id,
                timer.execution_id,
                new_event(
                    EventType.TIMER_FIRED,
                    self.clock.now(),
                    TimerId=timer.timer_id,
                    FireAt=format_timestamp(timer.fire_at),
                ),
            )

    async def _episode(self, instance_id: str) -> None:
        try:
            await self._run_episode(instance_id)
        except asyncio.CancelledError:
            raise
        except WorkerUnavailableError as error:
            logger.warning(
                "episode postponed instance_id=%s reason=worker process died: %s",
                instance_id,
                error,
            )
            await asyncio.sleep(WORKER_RETRY_SECONDS)
        except Exception:
            # Left in the inbox, the messages are tried again; the engine goes on.
            logger.exception("episode failed instance_id=%s", instance_id)
            await asyncio.sleep(WORKER_RETRY_SECONDS)
        finally:
            self._episodes.pop(instance_id, None)
            self._inbox_seen_at = None
            self._wake.set()

    async def _run_episode(self, instance_id: str) -> None:
        """Read, replay (maybe in a worker process), then commit only if nothing moved.

        No transaction is held across the replay and nothing is written before it: the
        inbox messages leave in the commit, so a crash or a dead worker during the replay
        loses none, and a terminate, purge or restart meanwhile makes the commit drop the
        outcome instead (the next episode sees the messages again).
        """
        prepared = self._prepare_episode(instance_id)
        if prepared is None:
            return
        with host_span(
            prepared.record.name,
            parent=self.store.trace_context(instance_id),
            attributes={
                "faas.name": prepared.record.name,
                "faas.trigger": "orchestrationTrigger",
                "durable.instance_id": instance_id,
                "faas.invocation_id": str(uuid.uuid4()),
            },
        ):
            outcome = await decide_episode(
                prepared.request, self._orchestrators.replay, self._past_events
            )
        with self.store.transaction():
            if self.store.get_instance(instance_id) != prepared.record:
                logger.info(
                    "episode discarded instance_id=%s reason=instance changed during the replay",
                    instance_id,
                )
                return
            self._consume_into_history(prepared.message_ids, prepared.buffered_ids)
            self._commit(prepared.record, outcome, prepared.version)

    def _consume_without_replay(self, instance_id: str, messages: list[InboxMessage]) -> None:
        """Take the inbox of an instance not started yet: raised events go to the buffer for
        its first episode, the rest is dropped."""
        for message in messages:
            if message.event["EventType"] == EventType.EVENT_RAISED:
                self.store.buffer_event(instance_id, message.event)
        self.store.remove_messages([m.message_id for m in messages])

    def _consume_into_history(self, message_ids: list[int], buffer_ids: list[int]) -> None:
        """Take the inbox messages and buffered events an episode's history now holds."""
        self.store.remove_messages(message_ids)
        self.store.remove_buffered_events(buffer_ids)

    def _prepare_episode(self, instance_id: str) -> _PreparedEpisode | None:
        """What the next episode replays; None when there is nothing to replay.

        Messages no episode will take (for a finished, purged or earlier instance) are
        dropped here, and events raised before the instance's first episode are buffered.
        """
        with self.store.transaction():
            messages = self.store.messages(instance_id)
            record = self.store.get_instance(instance_id)
            if record is None or record.runtime_status in _TERMINAL:
                self.store.remove_messages([m.message_id for m in messages])
                logger.warning(
                    "messages dropped instance_id=%s reason=%s events=%s",
                    instance_id,
                    "instance was purged"
                    if record is None
                    else f"instance is {record.runtime_status}",
                    [m.event.get("Name") or m.event["EventType"] for m in messages],
                )
                return None
            new_events: list[HistoryEvent] = []
            stale: list[int] = []
            for message in messages:
                # Raised events join the history of the current generation in the order they
                # arrived, a wait open for them or not: as on Azure, where the extension hands
                # the SDK the raw history and the SDK buffers early events itself.
                if (
                    message.event["EventType"] == EventType.EVENT_RAISED
                    or message.execution_id == record.execution_id
                ):
                    new_events.append(message.event)
                else:
                    stale.append(message.message_id)  # for an earlier generation
            past = self.store.history_json(instance_id)
            if not past and not execution_version(new_events)[0]:
                # Not started yet: raised events wait in the buffer for the first episode.
                self._consume_without_replay(instance_id, messages)
                return None
            self.store.remove_messages(stale)
            buffered = self.store.buffered_events(instance_id)
            if not new_events and not buffered:
                return None
            # Events raised before the first episode follow its ExecutionStarted.
            after_start = next(
                (
                    index + 1
                    for index, event in enumerate(new_events)
                    if event["EventType"] == EventType.EXECUTION_STARTED
                ),
                0,
            )
            new_events[after_start:after_start] = [event.event for event in buffered]
            version = self._instance_version(past, new_events)
            if not self.versioning.accepts(version):
                if self.versioning.failure_strategy is VersionFailureStrategy.REJECT:
                    self._reject(record, version)
                    return None
                # The new events, raised ones and buffered ones included, go into the
                # failed history: nothing is buffered again.
                self._consume_into_history(
                    [m.message_id for m in messages], [event.buffer_id for event in buffered]
                )
                self._commit_failure_without_replay(
                    record, new_events, VERSION_MISMATCH_OUTPUT, self._version_detail(version)
                )
                return None
            try:
                self.registry.orchestrator(record.name)
            except UnknownFunctionError as error:
                self._consume_into_history(
                    [m.message_id for m in messages], [event.buffer_id for event in buffered]
                )
                self._commit_failure_without_replay(record, new_events, str(error))
                return None
        request = EpisodeRequest(
            instance_id=instance_id,
            orchestrator=record.name,
            input_json=record.input_json,
            parent_instance_id=record.parent_instance_id,
            past_json=past,
            new_events=new_events,
            now=self.clock.now(),
            default_version=self.versioning.default_version,
        )
        consumed = [m.message_id for m in messages if m.message_id not in stale]
        return _PreparedEpisode(
            record, consumed, [event.buffer_id for event in buffered], request, version
        )

    @staticmethod
    def _instance_version(past: list[str], new_events: list[HistoryEvent]) -> str | None:
        """The Version of the current generation's ExecutionStarted: among the new events of
        its first episode, else in its history (right after the first OrchestratorStarted)."""
        found, version = execution_version(new_events)
        if found:
            return version
        for stored in past[:4]:
            found, version = execution_version([json.loads(stored)])
            if found:
                return version
        return None

    def _version_detail(self, version: str | None) -> str:
        return (
            f"instance version {version!r}, host defaultVersion "
            f"{self.versioning.default_version!r}, versionMatchStrategy "
            f"{self.versioning.match_strategy.value}"
        )

    def _reject(self, record: InstanceRecord, version: str | None) -> None:
        """versionFailureStrategy Reject: leave the instance and its messages as they are."""
        self._rejected[record.instance_id] = version
        logger.warning(
            "orchestration not run instance_id=%s name=%s reason=version mismatch (%s); "
            "its messages wait for a host whose defaultVersion accepts it",
            record.instance_id,
            record.name,
            self._version_detail(version),
        )

    def _commit(self, record: InstanceRecord, outcome: EpisodeOutcome, version: str | None) -> None:
        instance_id, execution_id = record.instance_id, record.execution_id
        now = self.clock.now()
        self.store.append_history(instance_id, outcome.events)
        plan = outcome.translation
        for activity in plan.activities:
            self.store.add_work(
                instance_id, execution_id, activity.task_id, activity.name, activity.input_json
            )
        for timer in plan.timers:
            self.store.add_timer(instance_id, execution_id, timer.timer_id, timer.fire_at)
        self.store.cancel_timers(instance_id, execution_id, plan.cancelled_timer_ids)
        for failure in plan.immediate_failures:
            self.store.post(instance_id, execution_id, failure.event)
        for child in plan.sub_orchestrations:
            self._start_sub_orchestration(record, child)
        custom_status = outcome.custom_status_json or record.custom_status_json
        updated = replace(
            record,
            runtime_status=outcome.runtime_status,
            custom_status_json=custom_status,
            last_updated_time=now,
        )
        if outcome.runtime_status == RuntimeStatus.CONTINUED_AS_NEW:
            self._continue_as_new(updated, outcome.continue_as_new_input, version)
        elif outcome.runtime_status in _TERMINAL:
            self._finish(replace(updated, output_json=outcome.output_json))
            logger.info(
                "orchestration finished instance_id=%s name=%s status=%s",
                instance_id,
                record.name,
                outcome.runtime_status,
            )
        else:
            self.store.put_instance(updated)

    def _commit_failure_without_replay(
        self,
        record: InstanceRecord,
        new_events: list[dict[str, Any]],
        message: str,
        detail: str | None = None,
    ) -> None:
        now = self.clock.now()
        output_json = df_dumps(message)
        self.store.append_history(
            record.instance_id,
            [
                new_event(EventType.ORCHESTRATOR_STARTED, now),
                *new_events,
                new_event(EventType.ORCHESTRATOR_COMPLETED, now),
                new_event(
                    EventType.EXECUTION_COMPLETED,
                    now,
                    OrchestrationStatus=int(OrchestrationStatusCode.FAILED),
                    Result=output_json,
                ),
            ],
        )
        self._finish(
            replace(
                record,
                runtime_status=RuntimeStatus.FAILED.value,
                output_json=output_json,
                last_updated_time=now,
            )
        )
        logger.error(
            "orchestration failed instance_id=%s error=%s%s",
            record.instance_id,
            message,
            "" if detail is None else f" ({detail})",
        )

    def _continue_as_new(
        self, record: InstanceRecord, input_json: str | None, version: str | None
    ) -> None:
        """New generation: fresh history and execution id, the same orchestration version (as
        DTFx: the SDK's continue_as_new names no new one). Events the old generation's history
        holds go with it, as the extension's ContinueAsNew does for an out-of-process app
        (preserveUnprocessedEvents false); events raised from now on reach the new one."""
        self.store.delete_history(record.instance_id)
        self.store.clear_execution_state(record.instance_id)
        generation = replace(
            record, execution_id=uuid.uuid4().hex, input_json=input_json, output_json=None
        )
        self.store.put_instance(generation)
        self.store.post(
            record.instance_id,
            generation.execution_id,
            execution_started(
                self.clock.now(),
                record.name,
                record.instance_id,
                input_json,
                record.parent_instance_id,
                version=version,
            ),
        )

    def _finish(self, record: InstanceRecord) -> None:
        """Store a terminal status, drop pending work, tell the parent orchestration."""
        self.store.put_instance(record)
        self.store.clear_execution_state(record.instance_id)
        dropped = self.store.discard_buffered_events(record.instance_id)
        if dropped:
            logger.warning(
                "external events dropped instance_id=%s events=%s reason=instance is %s",
                record.instance_id,
                dropped,
                record.runtime_status,
            )
        self._notify_parent(record)

    def _notify_parent(self, child: InstanceRecord) -> None:
        if child.parent_instance_id is None or child.parent_task_id is None:
            return
        parent = self.store.get_instance(child.parent_instance_id)
        if (
            parent is None
            or parent.execution_id != child.parent_execution_id
            or parent.runtime_status in _TERMINAL
        ):
            return
        now = self.clock.now()
        if child.runtime_status == RuntimeStatus.COMPLETED:
            event = new_event(
                EventType.SUB_ORCHESTRATION_COMPLETED,
                now,
                TaskScheduledId=child.parent_task_id,
                Result=child.output_json,
            )
        else:
            event = new_event(
                EventType.SUB_ORCHESTRATION_FAILED,
                now,
                TaskScheduledId=child.parent_task_id,
                Reason=(
                    f"Sub-orchestration '{child.name}' (instance '{child.instance_id}') "
                    f"{child.runtime_status.lower()}: {decode_json(child.output_json)}"
                ),
                Details="",
            )
        self.store.post(parent.instance_id, parent.execution_id, event)

    def _start_sub_orchestration(
        self, parent: InstanceRecord, request: SubOrchestrationRequest
    ) -> None:
        existing = self.store.get_instance(request.instance_id)
        problem = None
        if existing is not None and existing.runtime_status not in _TERMINAL:
            problem = str(InstanceAlreadyExistsError(request.instance_id, existing.runtime_status))
        elif request.name not in self.registry.orchestrators:
            problem = str(
                UnknownFunctionError(
                    "orchestrator", request.name, sorted(self.registry.orchestrators)
                )
            )
        if problem is not None:
            self.store.post(
                parent.instance_id,
                parent.execution_id,
                new_event(
                    EventType.SUB_ORCHESTRATION_FAILED,
                    self.clock.now(),
                    TaskScheduledId=request.task_id,
                    Reason=f"Sub-orchestration '{request.name}' could not start: {problem}",
                    Details="",
                ),
            )
            return
        if existing is not None:
            self.store.delete_instance(request.instance_id)
        self._create_instance(
            request.instance_id,
            request.name,
            request.input_json,
            (parent.instance_id, parent.execution_id, request.task_id),
            request.version,
        )
        self.store.set_trace_context(
            request.instance_id, self.store.trace_context(parent.instance_id)
        )

    def _create_instance(
        self,
        instance_id: str,
        name: str,
        input_json: str | None,
        parent: tuple[str, str, int] | None,
        version: str | None,
    ) -> None:
        now = self.clock.now()
        self._rejected.pop(instance_id, None)
        record = InstanceRecord(
            instance_id=instance_id,
            name=name,
            execution_id=uuid.uuid4().hex,
            input_json=input_json,
            output_json=None,
            custom_status_json=None,
            runtime_status=RuntimeStatus.PENDING.value,
            created_time=now,
            last_updated_time=now,
            parent_instance_id=parent[0] if parent else None,
            parent_execution_id=parent[1] if parent else None,
            parent_task_id=parent[2] if parent else None,
        )
        self.store.put_instance(record)
        self.store.post(
            instance_id,
            record.execution_id,
            execution_started(
                now, name, instance_id, input_json, record.parent_instance_id, version=version
            ),
        )

    # -- activities --------------------------------------------------------------------

    def _dispatch_activities(self) -> bool:
        dispatched = False
        added = self.store.work_added
        if self._work_seen_at == added:
            return False
        self._work_seen_at = added
        free = self.max_concurrent_activities - len(self._running)
        pending = self.store.work_items(excluding=self._running, limit=free + 1)
        if len(pending) > free:
            self._work_seen_at = None  # the rest waits for a free slot
        for item in pending[:free]:
            self._running[item.work_id] = asyncio.create_task(
                self._execute(item), name=f"activity-{item.name}-{item.work_id}"
            )
            dispatched = True
        return dispatched

    async def _execute(self, item: ActivityWorkItem) -> None:
        try:
            try:
                self.registry.activity(item.name)  # an unknown name fails here, wherever it runs
                with host_span(
                    item.name,
                    parent=self.store.trace_context(item.instance_id),
                    attributes={
                        "faas.name": item.name,
                        "faas.trigger": "activityTrigger",
                        "durable.instance_id": item.instance_id,
                        "faas.invocation_id": str(uuid.uuid4()),
                    },
                ):
                    result_json = await self._activities.run_activity(item.name, item.input_json)
            except asyncio.CancelledError:
                raise
            except WorkerUnavailableError as error:
                # Not a failure of the activity: the work item stays and runs again.
                logger.warning(
                    "activity postponed instance_id=%s activity=%s reason=worker process died: %s",
                    item.instance_id,
                    item.name,
                    error,
                )
                await asyncio.sleep(WORKER_RETRY_SECONDS)
            except Exception as error:
                self._report_activity(item, None, error)
            else:
                self._report_activity(item, result_json, None)
        finally:
            self._running.pop(item.work_id, None)
            self._work_seen_at = None
            self._wake.set()

    def _report_activity(
        self, item: ActivityWorkItem, result_json: str | None, error: Exception | None
    ) -> None:
        """Remove the work item and post its outcome in one transaction (at-least-once)."""
        now = self.clock.now()
        if error is None:
            event = new_event(
                EventType.TASK_COMPLETED, now, TaskScheduledId=item.task_id, Result=result_json
            )
        else:
            logger.warning(
                "activity failed instance_id=%s activity=%s task_id=%s error=%r",
                item.instance_id,
                item.name,
                item.task_id,
                error,
            )
            if isinstance(error, FunctionError):  # raised in a worker process
                summary, details = error.summary, error.details
            else:
                summary = f"{type(error).__name__}: {error}"
                details = "".join(traceback.format_exception(error))
            event = new_event(
                EventType.TASK_FAILED,
                now,
                TaskScheduledId=item.task_id,
                Reason=f"Activity function '{item.name}' failed: {summary}",
                Details=details,
            )
        with self.store.transaction():
            if not self.store.remove_work(item.work_id):
                return
            record = self.store.get_instance(item.instance_id)
            if (
                record is None
                or record.execution_id != item.execution_id
                or record.runtime_status in _TERMINAL
            ):
                logger.info(
                    "activity result dropped instance_id=%s activity=%s reason=instance moved on",
                    item.instance_id,
                    item.name,
                )
                return
            self.store.post(item.instance_id, item.execution_id, event)

    # -- helpers -----------------------------------------------------------------------

    def _require(self, instance_id: str) -> InstanceRecord:
        record = self.store.get_instance(instance_id)
        if record is None:
            raise InstanceNotFoundError(instance_id)
        return record

    def _status(
        self, record: InstanceRecord, show_history: bool, show_input: bool
    ) -> OrchestrationStatus:
        return OrchestrationStatus(
            name=record.name,
            instance_id=record.instance_id,
            created_time=record.created_time,
            last_updated_time=record.last_updated_time,
            input=decode_json(record.input_json) if show_input else None,
            output=decode_json(record.output_json),
            runtime_status=RuntimeStatus(record.runtime_status),
            custom_status=decode_json(record.custom_status_json),
            history=self.store.history(record.instance_id) if show_history else None,
        )


def _status_name(status: RuntimeStatus | str | Any) -> str:
    value = getattr(status, "value", status)
    return RuntimeStatus(str(value)).value


def _validate_instance_id(instance_id: str) -> None:
    if len(instance_id) > 256:
        raise InvalidInstanceIdError(instance_id, "longer than 256 characters")
    bad = _FORBIDDEN_ID_CHARACTERS.intersection(instance_id)
    if bad or any(ord(c) < 32 for c in instance_id):
        raise InvalidInstanceIdError(
            instance_id, "must not contain '/', '\\', '#', '?' or control characters"
        )
