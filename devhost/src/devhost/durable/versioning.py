"""Orchestration versioning as the Durable extension applies it (host.json ``defaultVersion``,
``versionMatchStrategy``, ``versionFailureStrategy``): the engine's version check.

Every new orchestration instance carries a version in its ExecutionStarted event: the one its
client or parent asked for, else the host's ``defaultVersion`` (None when there is none; the
orchestrator reads it as ``context.version``). Before each episode the host compares that
version with its own ``defaultVersion`` (DTFx ``TaskOrchestrationDispatcher``):

- ``None``: no check;
- ``Strict``: the versions must be the same string (DTFx compares with ``!=``, so a missing
  version and ``""`` differ);
- ``CurrentOrOlder`` (the extension's default): the instance's version must not be newer,
  by DTFx's ``VersioningSettings.CompareVersions`` (``compare_versions`` below).

An instance that does not match is either left alone, its messages kept for a host whose
version fits (``Reject``, the default), or failed without running its code (``Fail``) with
DTFx's failure, ``VersionMismatch: Orchestration version did not comply with Worker
Versioning``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeVar

from devhost.durable.history import EventType, HistoryEvent

VERSION_MISMATCH_OUTPUT = (
    "VersionMismatch: Orchestration version did not comply with Worker Versioning"
)
"""The output of an instance failed by ``Fail`` (DTFx's ``FailureDetails.ToString()``)."""

_INT32_MAX = 2**31 - 1
_E = TypeVar("_E", bound=enum.StrEnum)
# The characters .NET's NumberStyles.Integer lets surround a number.
_DOTNET_WHITESPACE = " \t\n\v\f\r"


class VersionMatchStrategy(enum.StrEnum):
    """``versionMatchStrategy``: which instance versions a host runs."""

    NONE = "None"
    STRICT = "Strict"
    CURRENT_OR_OLDER = "CurrentOrOlder"


class VersionFailureStrategy(enum.StrEnum):
    """``versionFailureStrategy``: what happens to an instance whose version does not match."""

    REJECT = "Reject"
    FAIL = "Fail"


_MATCH_NUMBERS = {
    0: VersionMatchStrategy.NONE,
    1: VersionMatchStrategy.STRICT,
    2: VersionMatchStrategy.CURRENT_OR_OLDER,
}
_FAILURE_NUMBERS = {0: VersionFailureStrategy.REJECT, 1: VersionFailureStrategy.FAIL}


@dataclass(frozen=True)
class Versioning:
    """A host's versioning settings; the defaults are the extension's."""

    default_version: str | None = None
    match_strategy: VersionMatchStrategy = VersionMatchStrategy.CURRENT_OR_OLDER
    failure_strategy: VersionFailureStrategy = VersionFailureStrategy.REJECT

    def version_for_new_instance(self, requested: str | None) -> str | None:
        """The version a new instance or sub-orchestration gets: the requested one, else the
        host's ``defaultVersion``."""
        return requested if requested is not None else self.default_version

    def accepts(self, instance_version: str | None) -> bool:
        """Whether this host runs an instance of ``instance_version``."""
        if self.match_strategy is VersionMatchStrategy.STRICT:
            return instance_version == self.default_version
        if self.match_strategy is VersionMatchStrategy.CURRENT_OR_OLDER:
            return compare_versions(instance_version, self.default_version) <= 0
        return True


def parse_match_strategy(value: Any) -> VersionMatchStrategy:
    """A ``versionMatchStrategy`` value as the host binds it: a name in any case, or its
    number."""
    return _parse_enum(value, VersionMatchStrategy, _MATCH_NUMBERS)


def parse_failure_strategy(value: Any) -> VersionFailureStrategy:
    """A ``versionFailureStrategy`` value as the host binds it: a name in any case, or its
    number."""
    return _parse_enum(value, VersionFailureStrategy, _FAILURE_NUMBERS)


def _parse_enum(value: Any, kind: type[_E], numbers: dict[int, _E]) -> _E:
    text = str(value).strip()
    for member in kind:
        if member.value.lower() == text.lower():
            return member
    number = _dotnet_int(text)
    if number is not None and number in numbers:
        return numbers[number]
    names = ", ".join(member.value for member in kind)
    raise ValueError(f"{value!r} is not one of {names}")


def compare_versions(source: str | None, other: str | None) -> int:
    """DTFx ``VersioningSettings.CompareVersions``: negative, zero or positive as ``source`` is
    older than, equal to or newer than ``other``.

    Empty (None, empty or blank) versions are equal and older than any other version; two
    versions that both parse as .NET ``System.Version`` (two to four numbers, so ``"2"``
    does not) compare as such; anything else compares as text, ordinal and ignoring case.
    """
    if source is None or not source.strip():
        return 0 if other is None or not other.strip() else -1
    if other is None or not other.strip():
        return 1
    parsed_source, parsed_other = dotnet_version(source), dotnet_version(other)
    if parsed_source is not None and parsed_other is not None:
        return _sign(parsed_source, parsed_other)
    return _sign(_ordinal_ignore_case_key(source), _ordinal_ignore_case_key(other))


def dotnet_version(text: str) -> tuple[int, int, int, int] | None:
    """``System.Version.TryParse``: major.minor[.build[.revision]] as a comparable tuple
    (an absent build or revision is -1, as in .NET), or None when .NET would not parse it."""
    parts = text.split(".")
    if not 2 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        number = _dotnet_int(part)
        if number is None or number < 0:
            return None
        numbers.append(number)
    numbers.extend([-1] * (4 - len(numbers)))
    return numbers[0], numbers[1], numbers[2], numbers[3]


def execution_version(events: list[HistoryEvent]) -> tuple[bool, str | None]:
    """(found, version) of the ExecutionStarted event among ``events``; an event stored
    without a ``Version`` has none."""
    for event in events:
        if event["EventType"] == EventType.EXECUTION_STARTED:
            return True, event.get("Version")
    return False, None


def _dotnet_int(text: str) -> int | None:
    """``int.TryParse(text, NumberStyles.Integer, InvariantCulture)``."""
    body = text.strip(_DOTNET_WHITESPACE)
    negative = body[:1] == "-"
    if body[:1] in ("+", "-"):
        body = body[1:]
    if not body or any(not "0" <= c <= "9" for c in body):
        return None
    number = -int(body) if negative else int(body)
    return number if -_INT32_MAX - 1 <= number <= _INT32_MAX else None


def _ordinal_ignore_case_key(text: str) -> tuple[int, ...]:
    """.NET ``StringComparison.OrdinalIgnoreCase``: UTF-16 code units after simple
    (one-to-one) upper-casing."""
    upper = "".join(u if len(u := c.upper()) == 1 else c for c in text)
    data = upper.encode("utf-16-be", "surrogatepass")
    return tuple(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))


def _sign(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return int(a > b) - int(a < b)
