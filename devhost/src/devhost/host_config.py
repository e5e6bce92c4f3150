"""The parts of host.json the devhost honours, with the Functions host's defaults.

- ``extensions.serviceBus``: maxConcurrentCalls, prefetchCount, maxAutoLockRenewalDuration,
  autoCompleteMessages.
- ``extensions.http.routePrefix``.
- ``extensions.durableTask``: maxConcurrentActivityFunctions, maxConcurrentOrchestratorFunctions,
  and orchestration versioning: defaultVersion, versionMatchStrategy, versionFailureStrategy
  (``devhost.durable.versioning``).
- ``extensions.durableTask.hubName``, with ``%SETTING%`` resolved from the app settings as the
  host does (a missing setting is an error naming it); the durableClient binding carries it.
- ``extensions.durableTask.storageProvider``: the devhost keeps the histories in its own
  SQLite backend whatever the provider, but refuses what the host refuses: a ``type`` other
  than the providers the Durable extension knows (AzureStorage, the default; AzureManaged, the
  Durable Task Scheduler; mssql; Netherite, matched ignoring case), and for AzureManaged an
  unset app setting named by ``connectionStringName``
  (default DURABLE_TASK_SCHEDULER_CONNECTION_STRING).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devhost.durable.management_http import DEFAULT_TASK_HUB
from devhost.durable.versioning import (
    Versioning,
    parse_failure_strategy,
    parse_match_strategy,
)

HOST_FILE = "host.json"
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d+))?$")
_EXPRESSION = re.compile(r"%([^%]+)%")

STORAGE_PROVIDERS = ("AzureStorage", "mssql", "Netherite", "AzureManaged")
"""The Durable extension's storage provider types, in the order its error message lists them."""
DEFAULT_STORAGE_PROVIDER = "AzureStorage"
AZURE_MANAGED_CONNECTION = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"
"""The AzureManaged provider's connection setting when ``connectionStringName`` is absent."""


class HostConfigError(ValueError):
    """host.json cannot be read or holds a value of the wrong shape."""


@dataclass(frozen=True)
class ServiceBusOptions:
    max_concurrent_calls: int
    prefetch_count: int = 0
    max_auto_lock_renewal: dt.timedelta = dt.timedelta(minutes=5)
    auto_complete_messages: bool = True


@dataclass(frozen=True)
class DurableTaskOptions:
    max_concurrent_activities: int
    max_concurrent_orchestrations: int
    versioning: Versioning = field(default_factory=Versioning)
    hub_name: str = DEFAULT_TASK_HUB
    storage_provider: str = DEFAULT_STORAGE_PROVIDER
    """The provider host.json names, spelled as the extension spells it."""


@dataclass(frozen=True)
class HostConfig:
    service_bus: ServiceBusOptions
    durable_task: DurableTaskOptions
    route_prefix: str = "api"

    @classmethod
    def load(cls, app_root: Path, settings: Mapping[str, str] | None = None) -> HostConfig:
        """host.json of ``app_root``; ``settings`` are the app settings its ``%NAME%``
        expressions and connection names refer to."""
        path = app_root / HOST_FILE
        document: dict[str, Any] = {}
        if path.exists():
            try:
                document = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as error:
                raise HostConfigError(f"{path}: cannot read host.json: {error}") from error
        return cls.parse(document, str(path), settings)

    @classmethod
    def parse(
        cls,
        document: dict[str, Any],
        where: str = HOST_FILE,
        settings: Mapping[str, str] | None = None,
    ) -> HostConfig:
        values = {} if settings is None else settings
        extensions = _section(document, "extensions", where)
        service_bus = _section(extensions, "serviceBus", where)
        durable = _section(extensions, "durableTask", where)
        http = _section(extensions, "http", where)
        cores = os.cpu_count() or 1
        return cls(
            service_bus=ServiceBusOptions(
                max_concurrent_calls=int(service_bus.get("maxConcurrentCalls", 16 * cores)),
                prefetch_count=int(service_bus.get("prefetchCount", 0)),
                max_auto_lock_renewal=parse_timespan(
                    str(service_bus.get("maxAutoLockRenewalDuration", "00:05:00")), where
                ),
                auto_complete_messages=bool(service_bus.get("autoCompleteMessages", True)),
            ),
            durable_task=DurableTaskOptions(
                max_concurrent_activities=int(
                    durable.get("maxConcurrentActivityFunctions", 10 * cores)
                ),
                max_concurrent_orchestrations=int(
                    durable.get("maxConcurrentOrchestratorFunctions", 10 * cores)
                ),
                versioning=_versioning(durable, where),
                hub_name=_hub_name(durable, where, values),
                storage_provider=_storage_provider(durable, where, values),
            ),
            route_prefix=str(http.get("routePrefix", "api")),
        )


def _versioning(durable: dict[str, Any], where: str) -> Versioning:
    """defaultVersion (null is the same as absent) and the two strategies, whose names the
    host binds ignoring case; the defaults are the extension's (CurrentOrOlder, Reject)."""
    default_version = durable.get("defaultVersion")
    if isinstance(default_version, int) and not isinstance(default_version, bool):
        default_version = str(default_version)
    if default_version is not None and not isinstance(default_version, str):
        raise HostConfigError(
            f'{where}: extensions.durableTask.defaultVersion must be a string like "2", '
            f"not {default_version!r}"
        )
    defaults = Versioning()
    try:
        match = parse_match_strategy(durable.get("versionMatchStrategy", defaults.match_strategy))
        failure = parse_failure_strategy(
            durable.get("versionFailureStrategy", defaults.failure_strategy)
        )
    except ValueError as error:
        raise HostConfigError(f"{where}: extensions.durableTask: {error}") from error
    return Versioning(default_version, match, failure)


def _hub_name(durable: dict[str, Any], where: str, settings: Mapping[str, str]) -> str:
    """hubName with each ``%NAME%`` replaced by the app setting NAME, as the host resolves it."""
    raw = durable.get("hubName")
    if raw is None:
        return DEFAULT_TASK_HUB
    if not isinstance(raw, str):
        raise HostConfigError(f"{where}: extensions.durableTask.hubName must be a string")

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        value = settings.get(name)
        if value is None or not value.strip():
            raise HostConfigError(
                f"{where}: extensions.durableTask.hubName {raw!r} names the app setting "
                f"{name}, which is not set (local.settings.json Values or the environment)"
            )
        return value.strip()

    hub = _EXPRESSION.sub(substitute, raw).strip()
    if not hub:
        raise HostConfigError(f"{where}: extensions.durableTask.hubName must not be empty")
    return hub


def _storage_provider(durable: dict[str, Any], where: str, settings: Mapping[str, str]) -> str:
    """The provider's type as the extension spells it; what the host refuses is refused."""
    provider = _section(durable, "storageProvider", where)
    declared = provider.get("type")
    if declared is None:
        return DEFAULT_STORAGE_PROVIDER
    known = {name.lower(): name for name in STORAGE_PROVIDERS}
    kind = known.get(str(declared).lower())
    if kind is None:
        raise HostConfigError(
            f"{where}: extensions.durableTask.storageProvider: Storage provider type "
            f"({declared}) was not found. Available storage providers: "
            f"{', '.join(STORAGE_PROVIDERS)}."
        )
    if kind == "AzureManaged":
        connection = str(provider.get("connectionStringName") or AZURE_MANAGED_CONNECTION)
        value = settings.get(connection)
        if value is None or not value.strip():
            raise HostConfigError(
                f"{where}: extensions.durableTask.storageProvider type {declared} reads the "
                f"Durable Task Scheduler connection string from the app setting {connection}, "
                "which is not set (local.settings.json Values or the environment); locally "
                "the emulator's is 'Endpoint=http://localhost:8080;Authentication=None'"
            )
    return kind


def _section(document: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    value = document.get(name, {})
    if not isinstance(value, dict):
        raise HostConfigError(f"{where}: '{name}' must be an object")
    return value


def parse_timespan(text: str, where: str) -> dt.timedelta:
    """.NET TimeSpan text as host.json uses it: ``[d.]hh:mm:ss[.fffffff]``."""
    match = _TIMESPAN.match(text.strip())
    if match is None:
        raise HostConfigError(f"{where}: {text!r} is not a TimeSpan like '00:05:00'")
    days, hours, minutes, seconds, fraction = match.groups()
    return dt.timedelta(
        days=int(days or 0),
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds),
        microseconds=int((fraction or "0").ljust(6, "0")[:6]),
    )
