"""A history read from a Durable Task Scheduler replays as the engine recorded it (C7): every
recorded history, streamed as the scheduler's messages (the devhost's emulation of its API)
and read back by Microsoft's ``durabletask`` client, keeps what a replay reads, and the gate
judges it as it judges the recorded one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import durabletask.internal.orchestrator_service_pb2 as pb
import pytest
from devhost.durable.history import HistoryEvent
from devhost.durable.scheduler_api import to_proto
from durabletask.internal.history_helpers import collect_history_events

from domain.agent_messages import AgentOperation
from orchestrators import order_workflow
from tools.replay.gate import judge, load
from tools.replay.scheduler import dtfx_event
from tools.replay.sources import RECORDED, InstanceHistory, from_directory

ROOT = Path(__file__).resolve().parents[3]
REPLAYED_FIELDS = ("EventType", "EventId", "Name", "Input", "Result", "TaskScheduledId", "TimerId")


def streamed(history: InstanceHistory) -> InstanceHistory:
    chunk = pb.HistoryChunk(events=[to_proto(event) for event in history.events])
    events = [dtfx_event(event) for event in collect_history_events([chunk])]
    return InstanceHistory(history.instance_id, events, history.origin)


def replayed(event: HistoryEvent) -> tuple[Any, ...]:
    return tuple(event.get(field) for field in REPLAYED_FIELDS)


def test_a_streamed_history_keeps_every_field_a_replay_reads_c7() -> None:
    for history in from_directory(RECORDED):
        back = streamed(history)
        assert [replayed(e) for e in back.events] == [replayed(e) for e in history.events]
        started = next(e for e in back.events if e.get("Version") is not None)
        assert started["Version"] == "1.0"


async def test_the_gate_judges_a_streamed_history_as_the_recorded_one_c7(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded = from_directory(RECORDED)
    app = load("function_app:app", ROOT)
    assert {v.kind for v in await judge(app, [streamed(h) for h in recorded])} == {
        v.kind for v in await judge(app, recorded)
    }

    renamed = dict(order_workflow._BEGIN)
    renamed[AgentOperation.DO] = ("start_step", order_workflow.RUN_STEP)
    monkeypatch.setattr(order_workflow, "_BEGIN", renamed)

    from_scheduler = [v.detail for v in await judge(app, [streamed(h) for h in recorded])]
    assert from_scheduler == [v.detail for v in await judge(app, recorded)]
    assert any("asks for activity 'start_step'" in detail for detail in from_scheduler)
