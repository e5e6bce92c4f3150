"""Orchestration versioning through the whole devhost: host.json's defaultVersion,
versionMatchStrategy and versionFailureStrategy, ``start_new(version=)`` from an HTTP starter
through the SDK's client and the emulated management API, ``context.version`` in the
orchestrator, sub-orchestration versions, and restarts of the host on the same data with
another defaultVersion.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devhost_tests_support.durable import START

from devhost.clock import VirtualClock
from devhost.durable import DurableEngine, EngineStalledError, OrchestrationStatus, RuntimeStatus
from devhost.durable.history import EventType
from devhost.durable.versioning import VERSION_MISMATCH_OUTPUT, Versioning
from devhost.host import DevHost, HostOptions
from devhost.settings import AppSettings
from devhost.testing import eventually, eventually_true

pytestmark = pytest.mark.asyncio

APP = "devhost_tests_support.durable_apps.versioning_app:app"
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)


@asynccontextmanager
async def running_host(
    tmp_path: Path, durable_task: dict[str, Any], worker_processes: int = 0
) -> AsyncIterator[DevHost]:
    """The devhost on the versioning app with ``durable_task`` as host.json's
    ``extensions.durableTask``; every host of a test shares its data directory."""
    app_root = tmp_path / "app"
    app_root.mkdir(exist_ok=True)
    (app_root / "host.json").write_text(
        json.dumps({"version": "2.0", "extensions": {"durableTask": durable_task}}),
        encoding="utf-8",
    )
    options = HostOptions(
        app=APP,
        app_root=app_root,
        data_dir=tmp_path / "data",
        http_port=0,
        clock=VirtualClock(START),
        worker_processes=worker_processes,
    )
    host = DevHost(options, AppSettings({}))
    await host.start()
    try:
        yield host
    finally:
        await host.stop()


async def start(
    host: DevHost, name: str, instance_id: str, version: str | None = None, body: Any = None
) -> dict[str, Any]:
    """Start through the app's HTTP starter (the SDK's start_new); the check-status links."""
    assert host.http is not None
    url = f"http://127.0.0.1:{host.http.port}/api/start/{name}/{instance_id}"
    params = {} if version is None else {"version": version}
    async with (
        aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
        session.post(url, params=params, json=body) as response,
    ):
        assert response.status == 202, await response.text()
        return dict(await response.json())


async def status_of(host: DevHost, instance_id: str) -> OrchestrationStatus:
    assert host.engine is not None
    status = await host.engine.get_status(instance_id, show_history=True)
    assert status is not None
    return status


async def reaches(
    host: DevHost, instance_id: str, condition: Callable[[OrchestrationStatus], bool], what: str
) -> OrchestrationStatus:
    async def reached() -> bool:
        return condition(await status_of(host, instance_id))

    await eventually_true(reached, f"{instance_id} {what}")
    return await status_of(host, instance_id)


async def finished(host: DevHost, instance_id: str) -> OrchestrationStatus:
    return await reaches(host, instance_id, lambda s: s.runtime_status.is_terminal, "finishes")


async def waiting_for_continue(host: DevHost, instance_id: str) -> OrchestrationStatus:
    """The instance ran its step and waits for its "Continue" event, and the host is idle."""

    def waits(status: OrchestrationStatus) -> bool:
        history = status.history or []
        return host.is_idle() and any(e["EventType"] == EventType.TASK_COMPLETED for e in history)

    return await reaches(host, instance_id, waits, "waits for Continue")


def started_version(status: OrchestrationStatus) -> Any:
    [started] = [e for e in status.history or [] if e["EventType"] == EventType.EXECUTION_STARTED]
    return started["Version"]


def scheduled(status: OrchestrationStatus) -> list[str]:
    return [e["Name"] for e in status.history or [] if e["EventType"] == EventType.TASK_SCHEDULED]


async def test_instances_started_with_versions_1_and_2_take_their_own_branches(
    tmp_path: Path,
) -> None:
    async with running_host(tmp_path, {"defaultVersion": "2"}) as host:
        await start(host, "versioned", "order-v1", version="1")
        await start(host, "versioned", "order-v2", version="2")
        v1, v2 = await finished(host, "order-v1"), await finished(host, "order-v2")

    assert v1.runtime_status is RuntimeStatus.COMPLETED, v1.output
    assert v1.output == {"version": "1", "step": "v1"}
    assert scheduled(v1) == ["step_v1"]
    assert started_version(v1) == "1"
    assert v2.output == {"version": "2", "step": "v2"}
    assert scheduled(v2) == ["step_v2"]


async def test_the_default_version_applies_when_the_starter_names_none(tmp_path: Path) -> None:
    async with running_host(tmp_path, {"defaultVersion": "2"}) as host:
        await start(host, "versioned", "order")
        status = await finished(host, "order")

    assert status.output == {"version": "2", "step": "v2"}
    assert started_version(status) == "2"


async def test_without_a_default_version_context_version_is_none_and_status_has_no_version(
    tmp_path: Path,
) -> None:
    """The documented value for an instance with no version is null: None in Python. The
    status API reports no version (neither the extension's HTTP status nor the SDK's
    DurableOrchestrationStatus has the field)."""
    async with running_host(tmp_path, {}) as host:
        await start(host, "versioned", "order")
        status = await finished(host, "order")
        assert host.management is not None
        url = f"{host.management.base_url}/runtime/webhooks/durabletask/instances/order"
        async with (
            aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
            session.get(url) as response,
        ):
            body = await response.json()

    assert status.output == {"version": None, "step": "unversioned"}
    assert started_version(status) is None
    assert body["runtimeStatus"] == "Completed"
    assert not {key for key in body if "version" in key.lower()}


@pytest.mark.parametrize("worker_processes", [0, 1], ids=["in-devhost", "language-worker"])
async def test_a_sub_orchestration_gets_the_version_it_asks_for_else_the_hosts_default(
    tmp_path: Path, worker_processes: int
) -> None:
    """Not the parent's: the sample's and the extension's rule (explicit version, else the
    defaultVersion of the host that creates the child)."""
    async with running_host(tmp_path, {"defaultVersion": "2"}, worker_processes) as host:
        assert (host.language_workers is not None) == bool(worker_processes)
        await start(host, "paused", "parent", version="1", body={"child_version": "0.9"})
        await waiting_for_continue(host, "parent")
        assert host.engine is not None
        await host.engine.raise_event("parent", "Continue")
        status = await finished(host, "parent")
        explicit_child = await status_of(host, "parent:1")

    assert status.output == {
        "version": "1",
        "step": "v1",
        "explicit_child": "0.9",
        "default_child": "2",
    }
    created = [
        e["Version"]
        for e in status.history or []
        if e["EventType"] == EventType.SUB_ORCHESTRATION_CREATED
    ]
    assert created == ["0.9", "2"]
    assert started_version(explicit_child) == "0.9"


async def test_an_instance_keeps_its_version_when_the_host_restarts_with_a_newer_default(
    tmp_path: Path,
) -> None:
    """The extension's ExistingOrchestrationVersionIsImmutable: started under defaultVersion
    "1", resumed by a host with "2", it stays "1" and replays its v1 step; only the children
    it starts after the restart get "2"."""
    async with running_host(tmp_path, {"defaultVersion": "1"}) as first:
        await start(first, "paused", "order")
        await waiting_for_continue(first, "order")
    async with running_host(tmp_path, {"defaultVersion": "2"}) as second:
        assert second.engine is not None
        await second.engine.raise_event("order", "Continue")
        status = await finished(second, "order")

    assert status.runtime_status is RuntimeStatus.COMPLETED, status.output
    assert status.output == {
        "version": "1",
        "step": "v1",
        "explicit_child": "2",
        "default_child": "2",
    }


async def test_continue_as_new_keeps_the_version(tmp_path: Path) -> None:
    async with running_host(tmp_path, {"defaultVersion": "2"}) as host:
        await start(host, "renewing", "renewing", version="1")
        status = await reaches(
            host, "renewing", lambda s: s.runtime_status is RuntimeStatus.COMPLETED, "completes"
        )

    assert status.output == {"version": "1", "generation": 1}
    assert started_version(status) == "1"


async def test_reject_leaves_a_newer_instance_pending_until_a_host_of_its_version_runs_it(
    tmp_path: Path,
) -> None:
    """CurrentOrOlder with Reject (the defaults): a host whose defaultVersion is "2" does not
    run a version "3" instance, runs the others, and is idle; restarted on the same data
    with defaultVersion "3", it runs it."""
    async with running_host(tmp_path, {"defaultVersion": "2"}) as old:
        await start(host=old, name="versioned", instance_id="newer", version="3")
        await start(host=old, name="versioned", instance_id="current", version="2")
        await finished(old, "current")
        await eventually(old.is_idle, "the old host is idle")
        pending = await status_of(old, "newer")
        assert pending.runtime_status is RuntimeStatus.PENDING
        assert pending.history == []
    async with running_host(
        tmp_path,
        {
            "defaultVersion": "3",
            "versionMatchStrategy": "CurrentOrOlder",
            "versionFailureStrategy": "Reject",
        },
    ) as caught_up:
        status = await finished(caught_up, "newer")

    assert status.runtime_status is RuntimeStatus.COMPLETED, status.output
    assert status.output == {"version": "3", "step": "v2"}


async def test_fail_fails_a_newer_instance_without_running_its_code(tmp_path: Path) -> None:
    """versionFailureStrategy Fail: the instance fails with DTFx's VersionMismatch failure;
    a child that fails so fails its parent's task."""
    settings = {"defaultVersion": "2", "versionFailureStrategy": "Fail"}
    async with running_host(tmp_path, settings) as host:
        await start(host, "versioned", "newer", version="3")
        await start(host, "paused", "parent", version="2", body={"child_version": "3"})
        await waiting_for_continue(host, "parent")
        assert host.engine is not None
        await host.engine.raise_event("parent", "Continue")
        newer, parent = await finished(host, "newer"), await finished(host, "parent")
        child = await status_of(host, "parent:1")

    assert newer.runtime_status is RuntimeStatus.FAILED
    assert newer.output == VERSION_MISMATCH_OUTPUT
    assert scheduled(newer) == []
    assert child.runtime_status is RuntimeStatus.FAILED
    assert child.output == VERSION_MISMATCH_OUTPUT
    assert parent.runtime_status is RuntimeStatus.FAILED
    assert "VersionMismatch" in parent.output


async def test_strict_runs_only_the_hosts_own_version(tmp_path: Path) -> None:
    settings = {
        "defaultVersion": "2",
        "versionMatchStrategy": "Strict",
        "versionFailureStrategy": "Fail",
    }
    async with running_host(tmp_path, settings) as host:
        await start(host, "versioned", "older", version="1")
        await start(host, "versioned", "same", version="2")
        older, same = await finished(host, "older"), await finished(host, "same")

    assert older.runtime_status is RuntimeStatus.FAILED
    assert older.output == VERSION_MISMATCH_OUTPUT
    assert same.output == {"version": "2", "step": "v2"}


def rewrite_execution_started(database: Path, instance_id: str, sql: str) -> None:
    """Apply ``sql`` (a JSON1 expression over ``event``) to the stored ExecutionStarted."""
    with sqlite3.connect(database) as connection:
        updated = connection.execute(
            f"UPDATE history SET event = {sql} "
            "WHERE instance_id = ? AND json_extract(event, '$.EventType') = ?",
            (instance_id, int(EventType.EXECUTION_STARTED)),
        ).rowcount
    assert updated == 1


async def test_histories_stored_without_a_version_replay_unchanged(tmp_path: Path) -> None:
    """Instances from before versioning: an ExecutionStarted stored with Version "" (what the
    devhost wrote) or without the field replays as it was recorded (context.version is ""
    or None, the unversioned step again) on a host that now has a defaultVersion, which
    CurrentOrOlder lets run them."""
    async with running_host(tmp_path, {}) as before:
        await start(before, "paused", "empty")
        await start(before, "paused", "missing")
        await waiting_for_continue(before, "empty")
        await waiting_for_continue(before, "missing")
    database = tmp_path / "data" / "durable.sqlite"
    rewrite_execution_started(database, "empty", "json_set(event, '$.Version', '')")
    rewrite_execution_started(database, "missing", "json_remove(event, '$.Version')")

    async with running_host(tmp_path, {"defaultVersion": "2"}) as after:
        assert after.engine is not None
        await after.engine.raise_event("empty", "Continue")
        await after.engine.raise_event("missing", "Continue")
        empty, missing = await finished(after, "empty"), await finished(after, "missing")

    assert empty.runtime_status is RuntimeStatus.COMPLETED, empty.output
    assert empty.output == {
        "version": "",
        "step": "unversioned",
        "explicit_child": "2",
        "default_child": "2",
    }
    assert missing.runtime_status is RuntimeStatus.COMPLETED, missing.output
    assert missing.output["version"] is None
    assert missing.output["step"] == "unversioned"


async def test_the_engine_reports_an_instance_it_will_not_run_and_stays_idle() -> None:
    """On the engine alone: a rejected instance is no runnable work, and waiting for it
    names the versions instead of waiting forever."""
    # A fresh app object: get_functions() may be called once per app, and hosts reload it.
    module = importlib.reload(importlib.import_module(APP.partition(":")[0]))
    engine = DurableEngine(
        module.app.get_functions(), clock=VirtualClock(START), versioning=Versioning("2")
    )
    try:
        await engine.start_new("versioned", "newer", version="3")
        with pytest.raises(
            EngineStalledError,
            match=r"does not run its version \(instance version '3', host defaultVersion '2'",
        ):
            await engine.run_until_complete("newer")
        status = await engine.get_status("newer")
        assert status is not None
        assert status.runtime_status is RuntimeStatus.PENDING
        assert not engine.has_runnable_work()
    finally:
        await engine.close()
