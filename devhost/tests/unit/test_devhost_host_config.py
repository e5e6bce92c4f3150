"""host.json: the devhost honours the host's Service Bus, HTTP and Durable settings, and
refuses the Durable backend settings the host refuses."""

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from devhost.host_config import DEFAULT_TASK_HUB, HostConfig, HostConfigError, parse_timespan


def test_defaults_match_the_functions_host(tmp_path: Path) -> None:
    config = HostConfig.load(tmp_path)
    cores = os.cpu_count() or 1
    assert config.service_bus.max_concurrent_calls == 16 * cores
    assert config.service_bus.prefetch_count == 0
    assert config.service_bus.max_auto_lock_renewal == dt.timedelta(minutes=5)
    assert config.service_bus.auto_complete_messages is True
    assert config.route_prefix == "api"


def test_values_from_host_json(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(
        """{"version": "2.0", "extensions": {
             "serviceBus": {"maxConcurrentCalls": 4, "prefetchCount": 20,
                            "maxAutoLockRenewalDuration": "00:00:30"},
             "http": {"routePrefix": ""},
             "durableTask": {"maxConcurrentActivityFunctions": 3}}}""",
        encoding="utf-8",
    )
    config = HostConfig.load(tmp_path)
    assert (config.service_bus.max_concurrent_calls, config.service_bus.prefetch_count) == (4, 20)
    assert config.service_bus.max_auto_lock_renewal == dt.timedelta(seconds=30)
    assert config.durable_task.max_concurrent_activities == 3
    assert config.route_prefix == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00:05:00", dt.timedelta(minutes=5)),
        ("1.02:03:04", dt.timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("00:00:01.5", dt.timedelta(seconds=1, microseconds=500_000)),
    ],
)
def test_timespans(text: str, expected: dt.timedelta) -> None:
    assert parse_timespan(text, "host.json") == expected


def test_bad_values_are_reported_with_their_place(tmp_path: Path) -> None:
    with pytest.raises(HostConfigError, match="'5 minutes' is not a TimeSpan"):
        parse_timespan("5 minutes", "host.json")
    (tmp_path / "host.json").write_text('{"extensions": []}', encoding="utf-8")
    with pytest.raises(HostConfigError, match="'extensions' must be an object"):
        HostConfig.load(tmp_path)


# --- the Durable backend: hubName and storageProvider, refused where the host refuses ------


def write_durable(tmp_path: Path, durable_task: dict[str, object]) -> Path:
    (tmp_path / "host.json").write_text(
        json.dumps({"version": "2.0", "extensions": {"durableTask": durable_task}}),
        encoding="utf-8",
    )
    return tmp_path


DTS = {"type": "azureManaged", "connectionStringName": "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"}
EMULATOR = "Endpoint=http://localhost:8080;Authentication=None"


def test_the_hub_name_resolves_its_setting_and_the_provider_is_accepted(tmp_path: Path) -> None:
    app = write_durable(tmp_path, {"hubName": "%TASKHUB_NAME%", "storageProvider": DTS})
    config = HostConfig.load(
        app,
        {"TASKHUB_NAME": "orderprocessing", "DURABLE_TASK_SCHEDULER_CONNECTION_STRING": EMULATOR},
    )
    assert config.durable_task.hub_name == "orderprocessing"
    assert config.durable_task.storage_provider == "AzureManaged"


def test_without_hub_name_or_provider_the_defaults_hold(tmp_path: Path) -> None:
    config = HostConfig.load(write_durable(tmp_path, {}))
    assert config.durable_task.hub_name == DEFAULT_TASK_HUB
    assert config.durable_task.storage_provider == "AzureStorage"


def test_a_hub_name_setting_that_is_not_set_is_named(tmp_path: Path) -> None:
    app = write_durable(tmp_path, {"hubName": "%TASKHUB_NAME%"})
    with pytest.raises(HostConfigError) as refused:
        HostConfig.load(app, {})
    assert "hubName '%TASKHUB_NAME%' names the app setting TASKHUB_NAME, which is not set" in str(
        refused.value
    )


def test_the_scheduler_needs_its_connection_setting(tmp_path: Path) -> None:
    app = write_durable(tmp_path, {"storageProvider": {"type": "AzureManaged"}})
    with pytest.raises(HostConfigError) as refused:
        HostConfig.load(app, {"TASKHUB_NAME": "hub"})
    assert "from the app setting DURABLE_TASK_SCHEDULER_CONNECTION_STRING, which is not set" in (
        str(refused.value)
    )
    named = write_durable(tmp_path, {"storageProvider": {**DTS, "connectionStringName": "DTS"}})
    with pytest.raises(HostConfigError, match="from the app setting DTS, which is not set"):
        HostConfig.load(named, {"DURABLE_TASK_SCHEDULER_CONNECTION_STRING": EMULATOR})
    assert HostConfig.load(named, {"DTS": EMULATOR}).durable_task.storage_provider == "AzureManaged"


@pytest.mark.parametrize(
    ("declared", "kind"),
    [("AzureStorage", "AzureStorage"), ("MSSQL", "mssql"), ("netherite", "Netherite")],
)
def test_the_other_known_providers_are_accepted_ignoring_case(
    tmp_path: Path, declared: str, kind: str
) -> None:
    app = write_durable(tmp_path, {"storageProvider": {"type": declared}})
    assert HostConfig.load(app).durable_task.storage_provider == kind


def test_an_unknown_provider_is_refused_with_the_hosts_message(tmp_path: Path) -> None:
    app = write_durable(tmp_path, {"storageProvider": {"type": "Redis"}})
    with pytest.raises(HostConfigError) as refused:
        HostConfig.load(app)
    assert (
        "Storage provider type (Redis) was not found. Available storage providers: "
        "AzureStorage, mssql, Netherite, AzureManaged." in str(refused.value)
    )
