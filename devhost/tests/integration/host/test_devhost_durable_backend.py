"""The Durable backend settings of host.json through the whole devhost: the hub name the app's
durable client sees comes from its ``%SETTING%``, and a host.json the Functions host would
refuse stops ``DevHost.start`` with the host's reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devhost_tests_support.durable import START

from devhost.clock import VirtualClock
from devhost.host import DevHost, HostOptions
from devhost.host_config import HostConfigError
from devhost.settings import AppSettings

pytestmark = pytest.mark.asyncio

APP = "devhost_tests_support.durable_apps.versioning_app:app"
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)
DTS = {"type": "azureManaged", "connectionStringName": "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"}
EMULATOR = "Endpoint=http://localhost:8080;Authentication=None"


def host_on(tmp_path: Path, durable_task: dict[str, Any], settings: dict[str, str]) -> DevHost:
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
    )
    return DevHost(options, AppSettings(settings))


async def test_the_durable_client_works_on_the_hub_its_setting_names(tmp_path: Path) -> None:
    host = host_on(
        tmp_path,
        {"hubName": "%TASKHUB_NAME%", "storageProvider": DTS},
        {"TASKHUB_NAME": "orderprocessing", "DURABLE_TASK_SCHEDULER_CONNECTION_STRING": EMULATOR},
    )
    await host.start()
    try:
        assert host.http is not None
        assert host.management is not None
        binding = json.loads(host.management.client_binding_json())
        assert binding["taskHubName"] == "orderprocessing"
        url = f"http://127.0.0.1:{host.http.port}/api/start/versioned/hub-1"
        async with (
            aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
            session.post(url) as response,
        ):
            assert response.status == 202, await response.text()
            links = await response.json()
        assert "taskHub=orderprocessing" in links["statusQueryGetUri"]
    finally:
        await host.stop()


@pytest.mark.parametrize(
    ("durable_task", "settings", "reason"),
    [
        (
            {"hubName": "%TASKHUB_NAME%"},
            {},
            "names the app setting TASKHUB_NAME, which is not set",
        ),
        (
            {"hubName": "hub", "storageProvider": DTS},
            {},
            "from the app setting DURABLE_TASK_SCHEDULER_CONNECTION_STRING, which is not set",
        ),
        (
            {"storageProvider": {"type": "CosmosDB"}},
            {},
            "Storage provider type (CosmosDB) was not found",
        ),
    ],
)
async def test_a_backend_the_host_would_refuse_stops_the_devhost(
    tmp_path: Path, durable_task: dict[str, Any], settings: dict[str, str], reason: str
) -> None:
    host = host_on(tmp_path, durable_task, settings)
    with pytest.raises(HostConfigError) as refused:
        await host.start()
    await host.stop()
    assert reason in str(refused.value)
    assert not (tmp_path / "data" / "durable.sqlite").exists()
