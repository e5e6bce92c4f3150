"""The whole devhost on the example app: every trigger type, virtual time.

Service Bus starts an orchestration, HTTP reads and approves it through the durableClient
binding, a timer trigger ticks, and under the VirtualClock a ten-minute durable timeout
and twenty timer ticks pass without waiting.
"""

import datetime as dt
import importlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from devhost.clock import VirtualClock
from devhost.durable import RuntimeStatus
from devhost.host import DevHost, HostOptions
from devhost.servicebus.server import ServiceBusBroker
from devhost.settings import AppSettings
from devhost.testing import eventually, eventually_true, queue, running_broker

APPS = Path(__file__).parent / "apps"
START = dt.datetime(2030, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)


@pytest.fixture(scope="module")
def broker() -> Iterator[ServiceBusBroker]:
    with running_broker([queue("jobs")]) as running:
        yield running


@pytest.fixture
async def host(
    tmp_path: Path, broker: ServiceBusBroker, request: pytest.FixtureRequest
) -> AsyncIterator[DevHost]:
    options = HostOptions(
        app="every_trigger_app:app",
        app_root=APPS,
        data_dir=tmp_path,
        http_port=0,
        clock=VirtualClock(START),
        worker_processes=getattr(request, "param", 0),
    )
    settings = AppSettings({"SB": broker.connection_string, "JOBS_QUEUE": "jobs"})
    running = DevHost(options, settings)
    await running.start()
    yield running
    await running.stop()
    assert running.listener_failures == []


async def submit(broker: ServiceBusBroker, job: str) -> None:
    async with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        sender = client.get_queue_sender("jobs")
        async with sender:
            await sender.send_messages(ServiceBusMessage(job), timeout=10)


async def status(host: DevHost, job: str) -> dict[str, Any]:
    assert host.http is not None
    url = f"http://127.0.0.1:{host.http.port}/api/jobs/{job}"
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session, session.get(url) as response:
        return {} if response.status == 404 else dict(await response.json())


async def waiting_for_approval(host: DevHost, job: str) -> bool:
    assert host.engine is not None
    current = await host.engine.get_status(job)
    return (
        current is not None
        and current.custom_status is None
        and host.is_idle()
        and (current.runtime_status is RuntimeStatus.RUNNING)
    )


# The same with the function code in a language worker process too (HTTP stays in the devhost).
@pytest.mark.parametrize("host", [0, 1], indirect=True, ids=["in-devhost", "language-worker"])
async def test_service_bus_http_and_durable_client_work_together(
    host: DevHost, broker: ServiceBusBroker
) -> None:
    await submit(broker, "job-1")
    await eventually_true(lambda: waiting_for_approval(host, "job-1"), "job-1 waits")
    assert (await status(host, "job-1"))["status"] == "Running"
    assert host.http is not None
    url = f"http://127.0.0.1:{host.http.port}/api/jobs/job-1/approve"
    async with (
        aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
        session.post(url, data="alice") as response,
    ):
        assert response.status == 202

    async def completed() -> bool:
        return (await status(host, "job-1")).get("status") == "Completed"

    await eventually_true(completed, "job-1 completes")
    assert (await status(host, "job-1"))["output"] == {
        "doubled": 10,
        "outcome": "approved",
        "by": "alice",
    }


async def test_the_status_links_an_http_starter_returns_answer_on_the_http_port_with_their_key(
    host: DevHost,
) -> None:
    """As on Azure, the Durable webhooks are on the host's HTTP port behind the extension's
    key, and create_check_status_response links there: a quickstart's next step works."""
    assert host.http is not None
    assert host.keys is not None
    base = f"http://127.0.0.1:{host.http.port}"
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
        async with session.post(f"{base}/api/jobs", data="job-7") as response:
            assert response.status == 202
            links = await response.json()
        status_uri = links["statusQueryGetUri"]
        assert status_uri.startswith(f"{base}/runtime/webhooks/durabletask/instances/job-7?")
        assert f"code={host.keys.durable_extension}" in status_uri
        await eventually_true(lambda: waiting_for_approval(host, "job-7"), "job-7 waits")
        # A running instance's status answers 202, as the extension's does until it ends.
        async with session.get(status_uri) as response:
            assert response.status == 202
            assert (await response.json())["runtimeStatus"] == "Running"
        # Without the key, the webhooks answer 401, as the host's do.
        async with session.get(status_uri.split("?")[0]) as response:
            assert response.status == 401

        approve = links["sendEventPostUri"].replace("{eventName}", "Approval")
        async with session.post(approve, json="bob") as response:
            assert response.status == 202

        async def completed() -> bool:
            async with session.get(status_uri) as response:
                return bool((await response.json())["runtimeStatus"] == "Completed")

        await eventually_true(completed, "job-7 completes through its webhook links")
        async with session.get(status_uri) as response:
            assert response.status == 200
            assert (await response.json())["output"]["by"] == "bob"


@pytest.mark.parametrize("host", [1], indirect=True, ids=["language-worker"])
async def test_start_returns_once_the_workers_loaded_the_app_and_the_listeners_are_open(
    host: DevHost,
) -> None:
    """As the Functions host reports started once its workers answered the function load and
    its listeners started: a burst sent right after start waits for neither."""
    workers = host.language_workers
    assert workers is not None
    assert len(workers.worker_pids()) == 1
    assert host.listening


async def test_a_listener_that_cannot_open_does_not_hold_up_start(
    tmp_path: Path, broker: ServiceBusBroker
) -> None:
    options = HostOptions(
        app="every_trigger_app:app", app_root=APPS, data_dir=tmp_path, http_port=0
    )
    settings = AppSettings({"SB": broker.connection_string, "JOBS_QUEUE": "no-such-queue"})
    running = DevHost(options, settings)
    try:
        await running.start()
        assert not running.listening
        [failure] = running.listener_failures
        assert "no-such-queue" in str(failure)
    finally:
        await running.stop()


async def test_virtual_time_runs_a_ten_minute_timeout_and_the_timer_schedule(
    host: DevHost, broker: ServiceBusBroker
) -> None:
    app_module = importlib.import_module("every_trigger_app")
    await submit(broker, "job-2")
    await eventually_true(lambda: waiting_for_approval(host, "job-2"), "job-2 waits")
    assert host.engine is not None
    while (await status(host, "job-2")).get("status") != "Completed":
        await eventually(host.is_idle, "the host is idle")
        assert await host.skip_time() is not None, "nothing left to wake up"

    assert (await status(host, "job-2"))["output"]["outcome"] == "timed-out"
    assert host.clock.now() - START >= dt.timedelta(minutes=10)
    ticks = app_module.ticks
    assert len(ticks) >= 20
    assert all(not tick.past_due for tick in ticks)


async def test_a_function_disabled_by_its_app_setting_does_not_trigger(
    tmp_path: Path, broker: ServiceBusBroker
) -> None:
    """``AzureWebJobs.<name>.Disabled`` (or ``AzureWebJobs__<name>__Disabled``) true or 1
    stops the function's trigger, as on the Functions host; the others run."""
    app_module = importlib.import_module("every_trigger_app")
    options = HostOptions(
        app="every_trigger_app:app",
        app_root=APPS,
        data_dir=tmp_path,
        http_port=0,
        clock=VirtualClock(START),
    )
    settings = AppSettings(
        {
            "SB": broker.connection_string,
            "JOBS_QUEUE": "jobs",
            "AzureWebJobs.submit_job.Disabled": "true",
            "AzureWebJobs__tick__Disabled": "1",
            "AzureWebJobs.approve_job.Disabled": "false",
        }
    )
    running = DevHost(options, settings)
    await running.start()
    try:
        ticks_before = len(app_module.ticks)
        await submit(broker, "job-disabled")
        assert running.listener_restarts == {}
        assert await running.skip_time() is None, "no timer left to wake up"
        assert len(app_module.ticks) == ticks_before
        assert await status(running, "job-disabled") == {}
        assert running.engine is not None
        assert await running.engine.get_status("job-disabled") is None
        assert broker.active_counts()["jobs"] == 1
    finally:
        await running.stop()


async def test_the_host_names_the_queues_its_triggers_listen_to(host: DevHost) -> None:
    """A test that moves time itself checks these for waiting messages: the names are the
    resolved binding expressions (``%JOBS_QUEUE%``), one per Service Bus trigger."""
    assert host.listened_queues() == ["jobs"]
