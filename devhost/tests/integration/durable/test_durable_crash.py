"""The engine's crash safety with a real process kill: kill -9 `python -m devhost start`
mid-activity, start again on the same data, and the orchestration completes with its timer
and its early event kept and the unfinished activity run again; with function code in the devhost
and in a language worker process (``--worker-processes 1``)."""

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
from devhost_tests_support import DURABLE_APPS, TESTS_ROOT
from devhost_tests_support.durable_apps import crash_app

from devhost.durable import DurableEngine, RuntimeStatus, VirtualClock
from devhost.durable.history import EventType
from devhost.testing import eventually_sync

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

APPS = DURABLE_APPS


@cache
def crash_functions() -> tuple[Function, ...]:
    return tuple(crash_app.app.get_functions())


def kill_devhost_mid_activity(data_dir: Path, markers: Path, worker_processes: int) -> None:
    """Run `python -m devhost start` on the app until the activity has started, then SIGKILL it."""
    devhost = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devhost",
            "start",
            "--app",
            "crash_app:app",
            "--app-root",
            str(APPS),
            "--data",
            str(data_dir),
            "--http-port",
            "0",
            "--worker-processes",
            str(worker_processes),
        ],
        cwd=TESTS_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        eventually_sync(
            lambda: (markers / "started-1").exists() or devhost.poll() is not None,
            "the devhost to start the activity",
            bound=60,
        )
        assert devhost.poll() is None, devhost.stderr.read().decode() if devhost.stderr else ""
    finally:
        os.kill(devhost.pid, signal.SIGKILL)
        devhost.wait(timeout=30)
        if devhost.stderr:
            devhost.stderr.close()


def _language_workers_of(app: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"devhost.language_worker" in command and app.encode() in command:
            pids.append(int(entry.name))
    return pids


@pytest.mark.parametrize("worker_processes", [0, 1], ids=["in-devhost", "language-worker"])
async def test_kill_9_mid_activity_then_resume_on_the_same_file(
    tmp_path: Path, worker_processes: int
) -> None:
    data_dir = tmp_path / "devhost"
    data_dir.mkdir()
    database = str(data_dir / "durable.sqlite")  # where `devhost start --data` keeps histories
    markers = tmp_path / "markers"
    markers.mkdir()
    client = DurableEngine(crash_functions(), database)
    instance_id = await client.start_new("crash_workflow", "crash-1", {"dir": str(markers)})
    await client.raise_event(instance_id, "Approval", "granted")
    await client.close()

    kill_devhost_mid_activity(data_dir, markers, worker_processes)
    # A worker whose devhost died exits, even with its activity blocked in a thread.
    eventually_sync(lambda: not _language_workers_of("crash_app:app"), "orphaned workers to exit")

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
