"""The app settings `infra/app-settings.json` holds: every setting config.py declares, at its
default, except those the Bicep sets from a parameter or a resource.

`infra/app/function.bicep` loads that file with `loadJsonContent` and adds the settings that
depend on the deployment (identity connections, service URLs, reply queues). The file is
generated from `config.declarations()`; `tests/infra/test_app_settings.py` fails when it
drifts. Regenerate it with:

    .venv/bin/python -m tests.infra.app_settings
"""

from __future__ import annotations

import json
from pathlib import Path

from config import Declaration, declarations

ROOT = Path(__file__).resolve().parents[2]
APP_SETTINGS_JSON = ROOT / "infra" / "app-settings.json"

SET_BY_BICEP = frozenset(
    {
        "STATE_STORE",  # 'cosmos' in Azure, whatever the local default
        "REPLY_QUEUES",  # from the clientApps parameter (R1)
        "STOCK_SERVICE_URL",
        "PAYMENT_SERVICE_URL",
        "SHIPPING_SERVICE_URL",
        "CONSOLE_AUTH",  # easyauth exactly when App Service authentication is deployed
        "CONSOLE_KEYS",  # from the consoleKeys parameter
    }
)
"""Declared settings whose Azure value comes from a Bicep parameter or resource."""

LOCAL_ONLY = frozenset({"SQLITE_DIRECTORY"})
"""Declared settings that mean nothing in Azure, where the state store is Cosmos DB."""


def setting_text(value: object) -> str:
    """The app-setting text of a declared default, as its parser reads it back."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("no declared setting is a bool")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, tuple):
        return ",".join(str(part) for part in value)
    if isinstance(value, frozenset):
        return ",".join(sorted(str(part) for part in value))
    raise TypeError(f"no text form for a default of type {type(value).__name__}")


def rendered_declarations() -> list[Declaration]:
    return [
        each
        for each in declarations()
        if each.name not in SET_BY_BICEP and each.name not in LOCAL_ONLY
    ]


def expected_app_settings() -> dict[str, str]:
    """The content `infra/app-settings.json` must have."""
    return {each.name: setting_text(each.default) for each in rendered_declarations()}


def render() -> str:
    return json.dumps(expected_app_settings(), indent=2) + "\n"


def main() -> None:
    APP_SETTINGS_JSON.write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    main()
