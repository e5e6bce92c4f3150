"""The durableClient binding: the SDK's own DurableOrchestrationClient, unchanged,
against the emulated management API of a running engine."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator

import aiohttp
import azure.durable_functions as df
import azure.functions as func
import pytest
import pytest_asyncio
from devhost_tests_support.durable import EngineFactory, semantics_functions

from devhost import sdk_compat
from devhost.durable import DurableEngine, RuntimeStatus
from devhost.durable.management_http import ManagementApi

pytestmark = pytest.mark.asyncio

SDK_CALL_TIMEOUT = 30


@pytest_asyncio.fixture
async def api(make_engine: EngineFactory) -> AsyncIterator[ManagementApi]:
    engine = make_engine()
    server = ManagementApi(engine)
    await server.start()
    await engine.start()
    yield server
    await server.stop()
    await engine.stop()
    # The SDK keeps one aiohttp session per process, bound to this test's event loop.
    await sdk_compat.close_durable_http_session()


def client_for(api: ManagementApi) -> df.DurableOrchestrationClient:
    return df.DurableOrchestrationClient(api.client_binding_json())


async def finished(
    client: df.DurableOrchestrationClient, instance_id: str
) -> df.DurableOrchestrationStatus:
    """Poll the SDK until the instance is terminal (bounded)."""

    async def poll() -> df.DurableOrchestrationStatus:
        while True:
            status = await client.get_status(instance_id)
            if status.runtime_status in (
                df.OrchestrationRuntimeStatus.Completed,
                df.OrchestrationRuntimeStatus.Failed,
                df.OrchestrationRuntimeStatus.Terminated,
            ):
                return status
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(poll(), SDK_CALL_TIMEOUT)


async def test_start_new_and_get_status(api: ManagementApi) -> None:
    client = client_for(api)

    instance_id = await asyncio.wait_for(
        client.start_new("fan_out", "sdk-fan-out", [4, 5]), SDK_CALL_TIMEOUT
    )
    status = await finished(client, instance_id)

    assert instance_id == "sdk-fan-out"
    assert status.runtime_status == df.OrchestrationRuntimeStatus.Completed
    assert status.output["all"] == [4, 5]
    assert status.input_ == [4, 5]
    assert status.name == "fan_out"
    assert isinstance(status.created_time, dt.datetime)


async def test_start_new_generates_an_id_and_refuses_duplicates(api: ManagementApi) -> None:
    client = client_for(api)

    generated = await asyncio.wait_for(client.start_new("waits_forever"), SDK_CALL_TIMEOUT)
    assert generated
    await asyncio.wait_for(client.start_new("waits_forever", "sdk-dup"), SDK_CALL_TIMEOUT)
    with pytest.raises(Exception, match="'sdk-dup' already exists"):
        await asyncio.wait_for(client.start_new("waits_forever", "sdk-dup"), SDK_CALL_TIMEOUT)


async def test_while_the_backend_is_unavailable_every_call_fails_and_starts_nothing(
    api: ManagementApi,
) -> None:
    """A storage backend outage as the SDK sees it: start_new raises and no instance is
    created; once the backend is back the same start works."""
    client = client_for(api)
    api.unavailable = True

    with pytest.raises(Exception, match="storage backend cannot be reached"):
        await asyncio.wait_for(client.start_new("fan_out", "sdk-outage", [1]), SDK_CALL_TIMEOUT)
    with pytest.raises(Exception, match="503"):
        await asyncio.wait_for(client.get_status("sdk-outage"), SDK_CALL_TIMEOUT)

    api.unavailable = False
    assert await api.engine.get_status("sdk-outage") is None
    await asyncio.wait_for(client.start_new("fan_out", "sdk-outage", [1]), SDK_CALL_TIMEOUT)
    assert (await finished(client, "sdk-outage")).runtime_status == (
        df.OrchestrationRuntimeStatus.Completed
    )


async def test_raise_event_completes_a_waiting_orchestration(api: ManagementApi) -> None:
    client = client_for(api)
    instance_id = await asyncio.wait_for(
        client.start_new("waits_forever", "sdk-event"), SDK_CALL_TIMEOUT
    )

    await asyncio.wait_for(client.raise_event(instance_id, "Go", {"ok": True}), SDK_CALL_TIMEOUT)
    status = await finished(client, instance_id)

    assert status.output == ["started", {"ok": True}]
    with pytest.raises(Exception, match="is gone"):
        await asyncio.wait_for(client.raise_event(instance_id, "Go", 1), SDK_CALL_TIMEOUT)
    with pytest.raises(Exception, match="No instance with ID"):
        await asyncio.wait_for(client.raise_event("sdk-missing", "Go", 1), SDK_CALL_TIMEOUT)


async def test_get_status_by_and_get_status_all(api: ManagementApi) -> None:
    client = client_for(api)
    done = await asyncio.wait_for(client.start_new("sequence", "sdk-done"), SDK_CALL_TIMEOUT)
    await finished(client, done)
    await asyncio.wait_for(client.start_new("waits_forever", "sdk-running"), SDK_CALL_TIMEOUT)

    completed = await asyncio.wait_for(
        client.get_status_by(runtime_status=[df.OrchestrationRuntimeStatus.Completed]),
        SDK_CALL_TIMEOUT,
    )
    everything = await asyncio.wait_for(client.get_status_all(), SDK_CALL_TIMEOUT)
    future = await asyncio.wait_for(
        client.get_status_by(created_time_from=dt.datetime(2031, 1, 1, tzinfo=dt.UTC)),
        SDK_CALL_TIMEOUT,
    )

    assert [s.instance_id for s in completed] == ["sdk-done"]
    assert {s.instance_id for s in everything} == {"sdk-done", "sdk-running"}
    assert future == []


async def test_terminate_and_purge(api: ManagementApi) -> None:
    client = client_for(api)
    instance_id = await asyncio.wait_for(
        client.start_new("waits_forever", "sdk-terminate"), SDK_CALL_TIMEOUT
    )

    await asyncio.wait_for(client.terminate(instance_id, "stop it"), SDK_CALL_TIMEOUT)
    status = await finished(client, instance_id)
    purged = await asyncio.wait_for(client.purge_instance_history(instance_id), SDK_CALL_TIMEOUT)
    purged_again = await asyncio.wait_for(
        client.purge_instance_history(instance_id), SDK_CALL_TIMEOUT
    )

    assert status.runtime_status == df.OrchestrationRuntimeStatus.Terminated
    assert status.output == "stop it"
    assert purged.instances_deleted == 1
    assert purged_again.instances_deleted == 0
    with pytest.raises(Exception, match="No instance with ID"):
        await asyncio.wait_for(client.terminate("sdk-missing", "why"), SDK_CALL_TIMEOUT)


async def test_engine_and_api_report_the_same_status(api: ManagementApi) -> None:
    client = client_for(api)
    engine: DurableEngine = api.engine
    instance_id = await asyncio.wait_for(client.start_new("sequence"), SDK_CALL_TIMEOUT)
    await finished(client, instance_id)

    from_engine = await engine.get_status(instance_id)
    assert from_engine is not None
    assert from_engine.runtime_status is RuntimeStatus.COMPLETED
    check = client.create_http_management_payload(instance_id)
    assert check["statusQueryGetUri"].startswith(api.base_url)
    assert instance_id in check["statusQueryGetUri"]


async def test_a_function_with_a_durable_client_binding_starts_and_links_status(
    api: ManagementApi,
) -> None:
    starter = next(f for f in semantics_functions() if f.get_function_name() == "http_start")
    # create_check_status_response points links at the origin of the triggering request.
    request = func.HttpRequest(
        method="POST", url=f"{api.base_url}/api/orders/start", body=b'{"order": 1}'
    )

    response = await asyncio.wait_for(
        starter.get_user_function()(req=request, client=api.client_binding_json()),
        SDK_CALL_TIMEOUT,
    )
    instance_id = json.loads(response.get_body())["id"]
    await finished(client_for(api), instance_id)
    timeout = aiohttp.ClientTimeout(total=SDK_CALL_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(response.headers["Location"]) as status_response,
    ):
        body = await status_response.json()

    assert response.status_code == 202
    assert status_response.status == 200
    assert body["instanceId"] == instance_id
    assert body["input"] == {"order": 1}
    assert body["runtimeStatus"] == "Completed"
