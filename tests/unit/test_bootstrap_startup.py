"""Start-up checks: on Azure a state store that cannot work stops the app naming the settings
to change; locally nothing changes; identity-based connections are chosen and logged."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bootstrap
from config import Settings, SettingsError
from domain.ports import StoreMetrics

ROOT = Path(__file__).resolve().parents[2]
FLEX = {"WEBSITE_SKU": "FlexConsumption", "WEBSITE_SITE_NAME": "orders-func"}
LOCAL_ENVIRONMENT = {
    name: value
    for name, value in os.environ.items()
    if name not in bootstrap.AZURE_HOSTING_SETTINGS
}


@pytest.mark.parametrize(
    "platform",
    [
        FLEX,
        {"WEBSITE_INSTANCE_ID": "5f0c1a2b3c4d", "WEBSITE_SITE_NAME": "orders-func"},
        {"CONTAINER_NAME": "orders-func-container", "WEBSITE_SITE_NAME": "orders-func"},
    ],
)
def test_sqlite_on_azure_stops_start_up_naming_the_settings_to_change(
    platform: dict[str, str],
) -> None:
    with pytest.raises(SettingsError) as refused:
        bootstrap.check_settings({**platform, "STATE_STORE": "sqlite"})
    message = str(refused.value)
    assert message.startswith("STATE_STORE=sqlite cannot run on Azure Functions (")
    for setting in (
        "STATE_STORE=cosmos",
        "CosmosConnection__accountEndpoint",
        "CosmosConnection__credential=managedidentity",
        "CosmosConnection__clientId",
        "COSMOS_DATABASE",
        "COSMOS_STATE_CONTAINER",
        "COSMOS_ORDERS_CONTAINER",
    ):
        assert setting in message


def test_sqlite_is_the_default_so_an_unset_store_on_azure_is_refused_too() -> None:
    with pytest.raises(SettingsError, match=r"\(WEBSITE_SKU=FlexConsumption\)"):
        bootstrap.check_settings(FLEX)


@pytest.mark.parametrize(
    "environment",
    [
        {},
        {"CONTAINER_NAME": "a-container-of-another-platform"},
        {"WEBSITE_SKU": "Dynamic"},
        {**FLEX, "FUNCTIONS_CORETOOLS_ENVIRONMENT": "true"},
    ],
)
def test_locally_sqlite_starts_as_before(environment: dict[str, str]) -> None:
    assert bootstrap.check_settings(environment).state_store == "sqlite"


def test_cosmos_on_azure_starts_and_logs_the_identity_of_each_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="app.settings")
    settings = bootstrap.check_settings(
        {
            **FLEX,
            "STATE_STORE": "cosmos",
            "CosmosConnection__accountEndpoint": "https://orders.documents.azure.com:443/",
            "CosmosConnection__credential": "managedidentity",
            "CosmosConnection__clientId": "client-1",
            "ServiceBusConnection__fullyQualifiedNamespace": "orders.servicebus.windows.net",
            "ServiceBusConnection__credential": "managedidentity",
            "ServiceBusConnection__clientId": "client-1",
        }
    )
    assert settings.state_store == "cosmos"
    identity = '"user-assigned managed identity, client id client-1"'
    for connection in ("ServiceBusConnection", "CosmosConnection"):
        assert f"connection identity connection={connection} identity={identity}" in (
            caplog.messages
        )
    # C9: key=value through the app's structured logger, the fields exportable as attributes.
    [budget] = [r for r in caplog.records if r.getMessage().startswith("retry budget ")]
    assert budget.__dict__["retry_budget"] == settings.retry_budget
    assert budget.__dict__["tries_per_request"] == settings.tries_per_request


def test_identity_settings_the_app_cannot_honour_stop_start_up() -> None:
    with pytest.raises(SettingsError, match="ServiceBusConnection__clientCertificate"):
        bootstrap.check_settings(
            {
                "ServiceBusConnection__fullyQualifiedNamespace": "orders.servicebus.windows.net",
                "ServiceBusConnection__tenantId": "tenant",
                "ServiceBusConnection__clientId": "client-1",
                "ServiceBusConnection__clientCertificate": "AB12",
            }
        )


def test_no_sqlite_file_is_opened_on_azure_even_past_start_up(tmp_path: Path) -> None:
    directory = tmp_path / "stores"
    settings = Settings.from_environ({"SQLITE_DIRECTORY": str(directory)})
    with pytest.raises(SettingsError, match="STATE_STORE=sqlite cannot run on Azure"):
        bootstrap.open_stores(settings, StoreMetrics(), FLEX)
    assert not directory.exists()


def run_import(extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import function_app"],
        cwd=ROOT,
        env={**LOCAL_ENVIRONMENT, "PYTHONPATH": str(ROOT), **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_the_app_on_azure_with_sqlite_fails_with_the_message() -> None:
    imported = run_import(FLEX)
    assert imported.returncode != 0
    assert "SettingsError: STATE_STORE=sqlite cannot run on Azure Functions" in imported.stderr
    assert "STATE_STORE=cosmos" in imported.stderr
    locally = run_import({})
    assert locally.returncode == 0, locally.stderr
