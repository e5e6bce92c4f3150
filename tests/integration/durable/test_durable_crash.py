"""Issue 3 crash safety with a real process kill: kill -9 the engine mid-activity, start a
new engine on the same file, and the orchestration completes with its timer and its
early event kept and the unfinished activity run again."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from azure.functions.decorators.function_app import Function

from devhost.durable import DurableEngine, RuntimeStatus, VirtualClock
from devhost.durable.history import EventType
from tests.integration.durable.apps import crash_app
from tests.support.waiting import eventually_sync

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[3]


@cache
def crash_functions() -> tuple[Function, ...]:
    return tuple(crash_app.app.get_functions())


def kill_worker_mid_activity(database: str, markers: Path) -> None:
    """Run the engine in a child process until the activity has started, then SIGKILL it."""
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devhost.durable.worker",
            "--app",
            "tests.integration.durable.apps.crash_app:app",
            "--db",
            database,
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        eventually_sync(
            lambda: (markers / "started-1").exists() or worker.poll() is not None,
            "the worker to start the activity",
            bound=60,
        )
        assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        if worker.stderr:
            worker.stderr.close()


async def test_kill_9_mid_activity_then_resume_on_the_same_file(tmp_path: Path) -> None:
    database = str(tmp_path / "durable.sqlite")
    markers = tmp_path / "markers"
    markers.mkdir()
    client = DurableEngine(crash_functions(), database)
    instance_id = await client.start_new("crash_workflow", "crash-1", {"dir": str(markers)})
    await client.raise_event(instance_id, "Approval", "granted")
    await client.close()

    kill_worker_mid_activity(database, markers)

    resumed = DurableEngine(
        crash_functions(), database, clock=VirtualClock(dt.datetime.now(dt.UTC))
    )
    try:
        pending_timer = resumed.next_timer_at()
        status = await resumed.run_until_complete(instance_id)
        full = await resumed.get_status(instance_id, show_history=True)
    finally:
        await resumed.close()

    assert pending_timer is not None
    assert status.runtime_status is RuntimeStatus.COMPLETED, status.output
    assert status.output == {"step": "finished on run 2", "approval": "granted"}
    assert full is not None
    scheduled = [e for e in full.history or [] if e["EventType"] == EventType.TASK_SCHEDULED]
    assert len(scheduled) == 1
