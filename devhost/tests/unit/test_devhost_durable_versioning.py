"""Orchestration versioning rules: DTFx's version comparison, the match strategies, and
the host.json settings that choose them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devhost.durable.versioning import (
    VersionFailureStrategy,
    Versioning,
    VersionMatchStrategy,
    compare_versions,
    dotnet_version,
)
from devhost.host_config import HostConfig, HostConfigError


@pytest.mark.parametrize(
    ("source", "other", "expected"),
    [
        # DTFx's own VersionSettingsTests rows.
        ("1.0.0", "1.0.0", 0),
        ("1.1.0", "1.0.0", 1),
        ("1.0.0", "1.1.0", -1),
        ("1", "1", 0),
        ("2", "1", 1),
        ("1", "2", -1),
        ("", "1", -1),
        ("1", "", 1),
        ("", "", 0),
        # Empty means None, "" or blank, all equal and older than anything.
        (None, "", 0),
        ("  ", None, 0),
        (None, "0", -1),
        # System.Version needs two to four numbers: "2" and "10" compare as text.
        ("1.10", "1.9", 1),
        ("2", "10", 1),
        ("1.0", "1.0.0", -1),
        ("2025-01-01", "2025-02-01", -1),
        ("v1.0-Release", "V1.0-RELEASE", 0),
    ],
)
def test_versions_compare_as_dtfx_compares_them(
    source: str | None, other: str | None, expected: int
) -> None:
    assert compare_versions(source, other) == expected


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1.0", (1, 0, -1, -1)),
        ("1.2.3.4", (1, 2, 3, 4)),
        (" 1 . +2", (1, 2, -1, -1)),
        ("2", None),
        ("1.2.3.4.5", None),
        ("1.-2", None),
        ("1.2147483648", None),
        ("1.x", None),
    ],
)
def test_system_version_parsing(text: str, parsed: tuple[int, ...] | None) -> None:
    assert dotnet_version(text) == parsed


def test_current_or_older_runs_older_and_equal_versions_only() -> None:
    host = Versioning("2.0")
    assert host.accepts("1.0")
    assert host.accepts("2.0")
    assert host.accepts(None)
    assert not host.accepts("2.1")


def test_without_a_default_version_current_or_older_runs_only_unversioned_instances() -> None:
    """The extension always passes its settings to DTFx: with no defaultVersion every
    instance that has a version is newer than the host."""
    host = Versioning()
    assert host.accepts(None)
    assert host.accepts("")
    assert not host.accepts("1")


def test_strict_compares_the_exact_strings() -> None:
    host = Versioning("2", VersionMatchStrategy.STRICT)
    assert host.accepts("2")
    assert not host.accepts("1")
    assert not host.accepts("2.0")
    assert not Versioning(None, VersionMatchStrategy.STRICT).accepts("")


def test_none_runs_every_version() -> None:
    assert Versioning("1", VersionMatchStrategy.NONE).accepts("9")


def test_new_instances_get_the_requested_version_else_the_default() -> None:
    assert Versioning("2").version_for_new_instance("1") == "1"
    assert Versioning("2").version_for_new_instance("") == ""
    assert Versioning("2").version_for_new_instance(None) == "2"
    assert Versioning().version_for_new_instance(None) is None


def write_host_json(root: Path, durable_task: dict[str, object]) -> None:
    document = {"version": "2.0", "extensions": {"durableTask": durable_task}}
    (root / "host.json").write_text(json.dumps(document), encoding="utf-8")


def test_host_json_defaults_are_the_extensions(tmp_path: Path) -> None:
    versioning = HostConfig.load(tmp_path).durable_task.versioning
    assert versioning == Versioning(
        None, VersionMatchStrategy.CURRENT_OR_OLDER, VersionFailureStrategy.REJECT
    )


def test_host_json_versioning_settings(tmp_path: Path) -> None:
    write_host_json(
        tmp_path,
        {
            "defaultVersion": "2",
            "versionMatchStrategy": "strict",
            "versionFailureStrategy": "FAIL",
        },
    )
    versioning = HostConfig.load(tmp_path).durable_task.versioning
    assert versioning == Versioning("2", VersionMatchStrategy.STRICT, VersionFailureStrategy.FAIL)


def test_a_null_default_version_is_no_default_version(tmp_path: Path) -> None:
    write_host_json(tmp_path, {"defaultVersion": None, "versionMatchStrategy": 0})
    versioning = HostConfig.load(tmp_path).durable_task.versioning
    assert versioning == Versioning(None, VersionMatchStrategy.NONE)


def test_a_numeric_default_version_is_its_text(tmp_path: Path) -> None:
    write_host_json(tmp_path, {"defaultVersion": 2})
    assert HostConfig.load(tmp_path).durable_task.versioning.default_version == "2"


@pytest.mark.parametrize(
    ("durable_task", "message"),
    [
        ({"versionMatchStrategy": "Newest"}, "'Newest' is not one of None, Strict, CurrentOrOlder"),
        ({"versionFailureStrategy": "Retry"}, "'Retry' is not one of Reject, Fail"),
        ({"defaultVersion": ["2"]}, "defaultVersion must be a string"),
    ],
)
def test_bad_versioning_settings_are_reported(
    tmp_path: Path, durable_task: dict[str, object], message: str
) -> None:
    write_host_json(tmp_path, durable_task)
    with pytest.raises(HostConfigError, match=r"host\.json") as raised:
        HostConfig.load(tmp_path)
    assert message in str(raised.value)
