"""App settings for the devhost: local.settings.json ``Values`` plus the environment.

Functions code reads its settings from environment variables, as it does on Azure, so the
devhost exports the merged settings into the process environment before importing the app.
The process environment wins over local.settings.json, so a test or CI run can override one
setting without editing the file. Binding expressions ``%NAME%`` resolve against the same
merged view.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

LOCAL_SETTINGS_FILE = "local.settings.json"
_EXPRESSION = re.compile(r"%([^%]+)%")


class SettingsError(ValueError):
    """A setting is missing or local.settings.json cannot be read."""


@dataclass(frozen=True)
class AppSettings:
    values: Mapping[str, str]

    @classmethod
    def load(cls, app_root: Path, environ: Mapping[str, str] | None = None) -> AppSettings:
        environment = os.environ if environ is None else environ
        merged = dict(_read_local_settings(app_root / LOCAL_SETTINGS_FILE))
        merged.update(environment)
        return cls(merged)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def function_disabled(self, function_name: str) -> bool:
        """Whether ``AzureWebJobs.<name>.Disabled`` (or ``AzureWebJobs__<name>__Disabled``,
        the form Linux environments accept) is ``true`` or ``1``: as on the Functions host,
        the function's trigger does not run."""
        for name in (
            f"AzureWebJobs.{function_name}.Disabled",
            f"AzureWebJobs__{function_name}__Disabled",
        ):
            if self.values.get(name, "").strip().lower() in ("true", "1"):
                return True
        return False

    def export(self, environ: MutableMapping[str, str] | None = None) -> Callable[[], None]:
        """Make every setting visible to function code through ``os.environ``.

        The merged values already rank the environment first, so writing them back changes
        only what local.settings.json (or the caller) supplied. Returns a function that puts
        the environment back as it was, for hosts that stop inside a longer-lived process.
        """
        target = os.environ if environ is None else environ
        previous = {name: target.get(name) for name in self.values}
        target.update(self.values)

        def restore() -> None:
            for name, value in previous.items():
                if value is None:
                    target.pop(name, None)
                else:
                    target[name] = value

        return restore

    def resolve(self, text: str, *, where: str) -> str:
        """Replace each ``%NAME%`` in a binding value with the setting's value."""

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            value = self.values.get(name)
            if value is None:
                raise SettingsError(
                    f"{where}: the binding expression %{name}% names a setting that is not in "
                    f"{LOCAL_SETTINGS_FILE} Values or the environment"
                )
            return value

        return _EXPRESSION.sub(substitute, text)


def _read_local_settings(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SettingsError(f"{path}: cannot read app settings: {error}") from error
    values = document.get("Values", {}) if isinstance(document, dict) else None
    if not isinstance(values, dict):
        raise SettingsError(f"{path}: 'Values' must be an object of setting names to strings")
    return {str(name): str(value) for name, value in values.items()}
