"""The parts of host.json the devhost honours, with the Functions host's defaults.

- ``extensions.serviceBus``: maxConcurrentCalls, prefetchCount, maxAutoLockRenewalDuration,
  autoCompleteMessages.
- ``extensions.http.routePrefix``.
- ``extensions.durableTask``: maxConcurrentActivityFunctions, maxConcurrentOrchestratorFunctions,
  and orchestration versioning: defaultVersion, versionMatchStrategy, versionFailureStrategy
  (``devhost.durable.versioning``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devhost.durable.versioning import (
    Versioning,
    parse_failure_strategy,
    parse_match_strategy,
)

HOST_FILE = "host.json"
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d+))?$")


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


@dataclass(frozen=True)
class HostConfig:
    service_bus: ServiceBusOptions
    durable_task: DurableTaskOptions
    route_prefix: str = "api"

    @classmethod
    def load(cls, app_root: Path) -> HostConfig:
        path = app_root / HOST_FILE
        document: dict[str, Any] = {}
        if path.exists():
            try:
                document = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as error:
                raise HostConfigError(f"{path}: cannot read host.json: {error}") from error
        return cls.parse(document, str(path))

    @classmethod
    def parse(cls, document: dict[str, Any], where: str = HOST_FILE) -> HostConfig:
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
