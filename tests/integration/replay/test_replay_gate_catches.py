"""The replay gate catches each change that would break an order in flight, naming the first
history event and the action that disagree, while a version bump that keeps the old path
passes (C7). Each change is made to the app's own orchestrator module, as a deployment
would change it, and judged against the recorded histories."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from domain.agent_messages import AgentOperation
from orchestrators import order_workflow
from orchestrators.payloads import Attempt
from tools.replay.command import BROKEN, CANNOT_RUN, CLEAN, main
from tools.replay.gate import judge, load
from tools.replay.sources import RECORDED, from_directory
from tools.replay.verdicts import RULE, Kind, Verdict

ROOT = Path(__file__).resolve().parents[3]
QUEUE_PAIR = next(RECORDED.glob("v1/queue-pair"))
ACTIVITY = next(RECORDED.glob("v1/activity"))


async def verdicts(folder: Path) -> list[Verdict]:
    return await judge(load("function_app:app", ROOT), from_directory(folder))


def broken(found: list[Verdict]) -> list[Verdict]:
    return [verdict for verdict in found if verdict.kind is not Kind.CLEAN]


def one_step_fewer(context: Any, attempt: Attempt) -> order_workflow.Outcome:
    """The workflow with its last step removed."""
    return (
        yield from order_workflow.run_attempt(
            context, dataclasses.replace(attempt, steps=attempt.steps[:-1])
        )
    )


class TimerFirst:
    """The orchestration context with every race listed the other way round: in the activity
    shape, the timer before the activity it races, which the SDK then schedules first (a
    reordering of two actions)."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def task_any(self, tasks: list[Any]) -> Any:
        return self._context.task_any(list(reversed(tasks)))


def timer_first(context: Any, attempt: Attempt) -> order_workflow.Outcome:
    return (yield from order_workflow.run_attempt(TimerFirst(context), attempt))


async def test_a_renamed_activity_is_caught_at_its_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renamed = dict(order_workflow._BEGIN)
    renamed[AgentOperation.DO] = ("start_step", order_workflow.RUN_STEP)
    monkeypatch.setattr(order_workflow, "_BEGIN", renamed)

    found = broken(await verdicts(QUEUE_PAIR))

    assert found
    for verdict in found:
        assert verdict.kind is Kind.NON_DETERMINISTIC
        assert "the history has TASK_SCHEDULED 'begin_step'" in verdict.detail
        assert "the code now asks for activity 'start_step'" in verdict.detail


async def test_a_removed_step_is_caught_where_the_history_begins_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(order_workflow.WORKFLOWS, 1, one_step_fewer)

    by_id = {verdict.instance_id: verdict for verdict in await verdicts(QUEUE_PAIR)}

    happy = by_id["order-2-00000:1"]
    assert happy.kind is Kind.NON_DETERMINISTIC
    assert "the history has TASK_SCHEDULED 'begin_step'" in happy.detail
    assert "the code now asks for activity 'finish_steps'" in happy.detail
    # An order whose first step failed never reached the last one: it still replays.
    assert by_id["order-1-00003:1"].kind is Kind.CLEAN


async def test_a_changed_timer_is_caught_where_the_history_has_an_activity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    called = order_workflow._called

    def after_a_pause(context: Any, activity: str, write: Any) -> Generator[Any, Any, Any]:
        yield context.create_timer(context.current_utc_datetime + dt.timedelta(seconds=1))
        return (yield from called(context, activity, write))

    monkeypatch.setattr(order_workflow, "_called", after_a_pause)

    found = broken(await verdicts(QUEUE_PAIR))

    assert len(found) == len(list(QUEUE_PAIR.glob("*.json")))
    assert all("the code now asks for a timer" in verdict.detail for verdict in found)


async def test_a_reordered_activity_and_timer_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(order_workflow.WORKFLOWS, 1, timer_first)

    found = broken(await verdicts(ACTIVITY))

    assert len(found) == len(list(ACTIVITY.glob("*.json")))
    for verdict in found:
        assert re.search(
            r"at sequence id 0: the history has TASK_SCHEDULED 'run_(step|undo)_in_activity' "
            r"but the code now asks for a timer",
            verdict.detail,
        ), verdict.detail


async def test_a_version_bump_that_keeps_the_old_path_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(order_workflow.WORKFLOWS, 2, one_step_fewer)

    assert broken(await verdicts(QUEUE_PAIR)) == []
    assert broken(await verdicts(ACTIVITY)) == []


def test_dropping_the_old_version_leaves_its_orders_unserved(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(order_workflow, "WORKFLOWS", {2: order_workflow.run_attempt})

    code = main(["--histories", str(QUEUE_PAIR)])

    out = capsys.readouterr().out
    assert code == BROKEN
    assert "unserved version" in out
    assert "started as version '1.0', which this code no longer serves (it serves 2.0)" in out
    assert out.rstrip().endswith(RULE)


def test_the_exit_codes_say_clean_broken_or_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--histories", str(ACTIVITY)]) == CLEAN
    assert f"{len(list(ACTIVITY.glob('*.json')))} of " in capsys.readouterr().out

    assert main(["--histories", str(tmp_path / "missing")]) == CANNOT_RUN
    assert "no such directory" in capsys.readouterr().err

    summary = json.loads(next(ACTIVITY.glob("*.json")).read_text(encoding="utf-8"))
    for event in summary["historyEvents"]:
        event.pop("EventId", None)
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    assert main(["--histories", str(tmp_path)]) == CANNOT_RUN
    assert "summarised history" in capsys.readouterr().err
