"""Broker entities from the official Service Bus emulator's ``Config.json``.

A user's existing emulator config works unchanged: ``UserConfig`` -> ``Namespaces`` -> ``Queues`` ->
``Name`` + ``Properties``, ISO-8601 durations such as ``PT1M`` (and .NET TimeSpan text such as
``00:01:00``). Omitted properties take the real service's defaults. Features that would change
behaviour but are not implemented (sessions, auto-forwarding) are refused rather than ignored.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, overload

logger = logging.getLogger(__name__)

STANDARD_TIER_MAX_MESSAGE_SIZE = 262_144

# TimeSpan.MaxValue ("P10675199DT2H48M5.4775807S") is how the service spells "never expires".
_NEVER_EXPIRES_DAYS = 10_675_199

_ISO_DURATION = re.compile(
    r"P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)
_ISO_CALENDAR_UNITS = re.compile(r"P(?:\d+(?:\.\d+)?[YM])")
_TIMESPAN = re.compile(
    r"(?:(?P<days>\d+)\.)?(?P<hours>\d{1,2}):(?P<minutes>\d{1,2})"
    r"(?::(?P<seconds>\d{1,2})(?:\.(?P<fraction>\d{1,7}))?)?"
)

# Properties of the emulator's queue schema that do not change this broker's behaviour.
_INERT_PROPERTIES = frozenset(
    {
        "AutoDeleteOnIdle",
        "EnableBatchedOperations",
        "EnableExpress",
        "EnablePartitioning",
        "MaxSizeInMegabytes",
        "Status",
        "UserMetadata",
    }
)


class ConfigError(ValueError):
    """The broker configuration cannot be used; the message says where and what is wrong."""


def parse_duration(text: str) -> timedelta:
    """Parse an ISO-8601 duration ("PT1M", "P1DT2H", "PT0.5S") or .NET TimeSpan ("1.00:00:00")."""
    if not isinstance(text, str):
        raise ConfigError(f"expected a duration string such as 'PT1M', got {text!r}")
    candidate = text.strip()
    iso = _ISO_DURATION.fullmatch(candidate)
    if iso is not None and candidate not in ("P", "PT") and not candidate.endswith("T"):
        parts = {name: float(value) for name, value in iso.groupdict().items() if value}
        return timedelta(
            weeks=parts.get("weeks", 0),
            days=parts.get("days", 0),
            hours=parts.get("hours", 0),
            minutes=parts.get("minutes", 0),
            seconds=parts.get("seconds", 0),
        )
    if _ISO_CALENDAR_UNITS.match(candidate):
        raise ConfigError(
            f"duration {text!r} uses years or months, whose length is ambiguous; "
            "write it in days instead (e.g. 'P30D')"
        )
    span = _TIMESPAN.fullmatch(candidate)
    if span is not None:
        hours, minutes = int(span["hours"]), int(span["minutes"])
        seconds = int(span["seconds"] or 0)
        if hours > 23 or minutes > 59 or seconds > 59:
            raise ConfigError(
                f"duration {text!r} is not a valid TimeSpan (hh < 24, mm and ss < 60); "
                "write e.g. '1.01:00:00' or the ISO-8601 form 'PT25H' / 'PT1M'"
            )
        fraction = span["fraction"] or "0"
        return timedelta(
            days=int(span["days"] or 0),
            hours=hours,
            minutes=minutes,
            seconds=seconds,
            microseconds=round(int(fraction) / 10 ** len(fraction) * 1_000_000),
        )
    raise ConfigError(
        f"duration {text!r} is neither ISO-8601 (e.g. 'PT1M', 'PT20S', 'P1DT2H') "
        "nor a TimeSpan (e.g. '00:01:00', '1.00:00:00')"
    )


@dataclass(frozen=True)
class QueueSettings:
    """One queue's behaviour; defaults are the real service's (Standard tier)."""

    name: str
    lock_duration: timedelta = timedelta(minutes=1)
    max_delivery_count: int = 10
    requires_duplicate_detection: bool = False
    duplicate_detection_window: timedelta = timedelta(minutes=10)
    default_message_ttl: timedelta | None = None
    dead_lettering_on_message_expiration: bool = False
    max_message_size: int = STANDARD_TIER_MAX_MESSAGE_SIZE


@dataclass(frozen=True)
class BrokerConfig:
    """The namespace's entities, keyed by lower-cased queue name (names are case-insensitive)."""

    namespace: str
    queues: Mapping[str, QueueSettings] = field(default_factory=dict)
    auto_create: bool = False

    def settings_for(self, name: str) -> QueueSettings | None:
        """Settings of queue ``name`` (any case); defaults if unknown and auto_create, else None."""
        settings = self.queues.get(name.lower())
        if settings is None and self.auto_create:
            return QueueSettings(name=name)
        return settings


def load_config(path: str | os.PathLike[str], *, auto_create: bool = False) -> BrokerConfig:
    """Read an emulator Config.json file; every ConfigError names the file."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{os.fspath(path)}: config file not found") from None
    except OSError as error:
        raise ConfigError(f"{os.fspath(path)}: cannot read config file: {error}") from error
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{os.fspath(path)}: not valid JSON (line {error.lineno}, column {error.colno}): "
            f"{error.msg}"
        ) from error
    try:
        return parse_config(document, auto_create=auto_create)
    except ConfigError as error:
        raise ConfigError(f"{os.fspath(path)}: {error}") from error


def parse_config(document: Mapping[str, Any], *, auto_create: bool = False) -> BrokerConfig:
    """Build a BrokerConfig from a parsed emulator Config.json document."""
    user_config = _require_mapping(document, "UserConfig", "the document")
    namespaces = user_config.get("Namespaces")
    if not isinstance(namespaces, list) or len(namespaces) != 1:
        raise ConfigError(
            "UserConfig.Namespaces must be a list with exactly one namespace "
            "(the emulator supports one), "
            f"got {_describe(namespaces)}"
        )
    namespace = namespaces[0]
    where = "UserConfig.Namespaces[0]"
    if not isinstance(namespace, Mapping):
        raise ConfigError(f"{where} must be an object, got {_describe(namespace)}")
    namespace_name = namespace.get("Name")
    if not isinstance(namespace_name, str) or not namespace_name.strip():
        raise ConfigError(f"{where}.Name must be a non-empty string, got {namespace_name!r}")
    _warn_about_topics(namespace.get("Topics"), where)

    queue_entries = namespace.get("Queues", [])
    if not isinstance(queue_entries, list):
        raise ConfigError(f"{where}.Queues must be a list, got {_describe(queue_entries)}")
    queues: dict[str, QueueSettings] = {}
    for index, entry in enumerate(queue_entries):
        settings = _parse_queue(entry, f"{where}.Queues[{index}]")
        key = settings.name.lower()
        if key in queues:
            raise ConfigError(
                f"queue {settings.name!r} is defined twice "
                f"(queue names are case-insensitive; first as {queues[key].name!r})"
            )
        queues[key] = settings
    return BrokerConfig(namespace=namespace_name, queues=queues, auto_create=auto_create)


def _parse_queue(entry: object, where: str) -> QueueSettings:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be an object, got {_describe(entry)}")
    name = entry.get("Name")
    if not isinstance(name, str) or not name.strip() or "$" in name or name != name.strip("/"):
        raise ConfigError(
            f"{where}.Name must be a queue name (non-empty, no '$', no leading/trailing '/'), "
            f"got {name!r}"
        )
    properties = entry.get("Properties", {})
    if not isinstance(properties, Mapping):
        raise ConfigError(f"queue {name!r}: Properties must be an object")
    reader = _PropertyReader(name, properties)
    defaults = QueueSettings(name=name)

    reader.refuse_if("RequiresSession", lambda value: value is True, "sessions are not supported")
    for forward in ("ForwardTo", "ForwardDeadLetteredMessagesTo"):
        reader.refuse_if(forward, lambda value: bool(value), "auto-forwarding is not supported")
    max_size_kb = reader.positive_int("MaxMessageSizeInKilobytes", None)
    ttl = reader.duration("DefaultMessageTimeToLive", None)
    settings = QueueSettings(
        name=name,
        lock_duration=reader.duration("LockDuration", defaults.lock_duration),
        max_delivery_count=reader.positive_int("MaxDeliveryCount", defaults.max_delivery_count),
        requires_duplicate_detection=reader.boolean(
            "RequiresDuplicateDetection", defaults.requires_duplicate_detection
        ),
        duplicate_detection_window=reader.duration(
            "DuplicateDetectionHistoryTimeWindow", defaults.duplicate_detection_window
        ),
        default_message_ttl=None if ttl is None or ttl.days >= _NEVER_EXPIRES_DAYS else ttl,
        dead_lettering_on_message_expiration=reader.boolean(
            "DeadLetteringOnMessageExpiration", defaults.dead_lettering_on_message_expiration
        ),
        max_message_size=max_size_kb * 1024 if max_size_kb else defaults.max_message_size,
    )
    reader.warn_about_unknown()
    return settings


class _PropertyReader:
    """Reads one queue's Properties, naming the queue and property in every error."""

    _known = frozenset(
        {
            "LockDuration",
            "MaxDeliveryCount",
            "RequiresDuplicateDetection",
            "DuplicateDetectionHistoryTimeWindow",
            "DefaultMessageTimeToLive",
            "DeadLetteringOnMessageExpiration",
            "RequiresSession",
            "ForwardTo",
            "ForwardDeadLetteredMessagesTo",
            "MaxMessageSizeInKilobytes",
        }
    )

    def __init__(self, queue: str, properties: Mapping[str, Any]) -> None:
        self._queue = queue
        self._properties = properties

    def _error(self, prop: str, problem: str) -> ConfigError:
        return ConfigError(f"queue {self._queue!r}: property {prop!r}: {problem}")

    @overload
    def duration(self, prop: str, default: timedelta) -> timedelta: ...
    @overload
    def duration(self, prop: str, default: None) -> timedelta | None: ...
    def duration(self, prop: str, default: timedelta | None) -> timedelta | None:
        value = self._properties.get(prop)
        if value is None:
            return default
        try:
            parsed = parse_duration(value)
        except ConfigError as error:
            raise self._error(prop, str(error)) from None
        if parsed <= timedelta(0):
            raise self._error(prop, f"must be a positive duration, got {value!r}")
        return parsed

    @overload
    def positive_int(self, prop: str, default: int) -> int: ...
    @overload
    def positive_int(self, prop: str, default: None) -> int | None: ...
    def positive_int(self, prop: str, default: int | None) -> int | None:
        value = self._properties.get(prop)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self._error(prop, f"must be a whole number >= 1, got {value!r}")
        return value

    def boolean(self, prop: str, default: bool) -> bool:
        value = self._properties.get(prop)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._error(prop, f"must be true or false, got {value!r}")
        return value

    def refuse_if(self, prop: str, unsupported: Callable[[Any], bool], why: str) -> None:
        value = self._properties.get(prop)
        if value is not None and unsupported(value):
            raise self._error(prop, f"{why} by this broker (got {value!r}); remove it or unset it")

    def warn_about_unknown(self) -> None:
        for prop in self._properties:
            if prop not in self._known and prop not in _INERT_PROPERTIES:
                logger.warning(
                    "servicebus_config_unknown_property queue=%s property=%s action=ignored",
                    self._queue,
                    prop,
                )


def _warn_about_topics(topics: object, where: str) -> None:
    if topics is None:
        return
    if not isinstance(topics, list):
        raise ConfigError(f"{where}.Topics must be a list, got {_describe(topics)}")
    if topics:
        names = [t.get("Name") if isinstance(t, Mapping) else t for t in topics]
        logger.warning(
            "servicebus_config_topics_unsupported count=%d names=%s action=ignored",
            len(topics),
            names,
        )


def _require_mapping(document: object, key: str, where: str) -> Mapping[str, Any]:
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where} must be a JSON object, got {_describe(document)}")
    value = document.get(key)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must have an object '{key}', got {_describe(value)}")
    return value


def _describe(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"{type(value).__name__} {value!r}"[:120]
