"""Broker config from the official emulator's Config.json: parsing, defaults, errors."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from devhost.servicebus.config import (
    ConfigError,
    QueueSettings,
    load_config,
    parse_config,
    parse_duration,
)

# The sample shipped with the official Service Bus emulator (trimmed to what matters here).
EMULATOR_SAMPLE: dict[str, Any] = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "sbemulatorns",
                "Queues": [
                    {
                        "Name": "queue.1",
                        "Properties": {
                            "DeadLetteringOnMessageExpiration": False,
                            "DefaultMessageTimeToLive": "PT1H",
                            "DuplicateDetectionHistoryTimeWindow": "PT20S",
                            "ForwardDeadLetteredMessagesTo": "",
                            "ForwardTo": "",
                            "LockDuration": "PT1M",
                            "MaxDeliveryCount": 3,
                            "RequiresDuplicateDetection": False,
                            "RequiresSession": False,
                        },
                    }
                ],
                "Topics": [
                    {
                        "Name": "topic.1",
                        "Properties": {"DefaultMessageTimeToLive": "PT1H"},
                        "Subscriptions": [],
                    }
                ],
            }
        ],
        "Logging": {"Type": "File"},
    }
}


def _document(queues: list[dict[str, Any]]) -> dict[str, Any]:
    return {"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": queues}]}}


def _queue_with(**properties: Any) -> dict[str, Any]:
    return _document([{"Name": "orders", "Properties": properties}])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT1M", timedelta(minutes=1)),
        ("PT20S", timedelta(seconds=20)),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("P1D", timedelta(days=1)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("PT1H30M", timedelta(hours=1, minutes=30)),
        ("P2W", timedelta(weeks=2)),
        ("00:01:00", timedelta(minutes=1)),
        ("1.00:00:00", timedelta(days=1)),
        ("00:00:30.5", timedelta(seconds=30, milliseconds=500)),
        (
            "P10675199DT2H48M5.4775807S",
            timedelta(days=10675199, seconds=10085, microseconds=477581),
        ),
    ],
)
def test_durations_in_iso8601_and_timespan_forms_are_understood(
    text: str, expected: timedelta
) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "P", "PT", "1M", "PT1X", "P1DT", "25:00:00", "-PT1M", "soon"])
def test_unreadable_durations_are_refused_with_examples_of_valid_ones(text: str) -> None:
    with pytest.raises(ConfigError, match="PT1M"):
        parse_duration(text)


def test_durations_in_years_or_months_are_refused_as_ambiguous() -> None:
    with pytest.raises(ConfigError, match="days instead"):
        parse_duration("P1M")


def test_the_official_emulator_sample_config_loads_unchanged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        config = parse_config(EMULATOR_SAMPLE)

    assert config.namespace == "sbemulatorns"
    assert config.queues == {
        "queue.1": QueueSettings(
            name="queue.1",
            lock_duration=timedelta(minutes=1),
            max_delivery_count=3,
            requires_duplicate_detection=False,
            duplicate_detection_window=timedelta(seconds=20),
            default_message_ttl=timedelta(hours=1),
            dead_lettering_on_message_expiration=False,
        )
    }
    assert "topics_unsupported" in caplog.text
    assert "topic.1" in caplog.text


def test_omitted_properties_take_the_real_services_defaults() -> None:
    config = parse_config(_document([{"Name": "orders"}]))

    settings = config.queues["orders"]
    assert settings.lock_duration == timedelta(minutes=1)
    assert settings.max_delivery_count == 10
    assert settings.requires_duplicate_detection is False
    assert settings.duplicate_detection_window == timedelta(minutes=10)
    assert settings.default_message_ttl is None
    assert settings.dead_lettering_on_message_expiration is False
    assert settings.max_message_size == 256 * 1024


def test_the_services_never_expires_ttl_means_no_expiry() -> None:
    config = parse_config(_queue_with(DefaultMessageTimeToLive="P10675199DT2H48M5.4775807S"))

    assert config.queues["orders"].default_message_ttl is None


def test_a_larger_message_size_limit_can_be_configured_in_kilobytes() -> None:
    config = parse_config(_queue_with(MaxMessageSizeInKilobytes=1024))

    assert config.queues["orders"].max_message_size == 1024 * 1024


def test_queue_lookup_is_case_insensitive_and_keeps_the_configured_name() -> None:
    config = parse_config(_document([{"Name": "Orders"}]))

    settings = config.settings_for("ORDERS")
    assert settings is not None
    assert settings.name == "Orders"
    assert config.settings_for("missing") is None


def test_auto_create_gives_unknown_queues_default_settings() -> None:
    config = parse_config(_document([]), auto_create=True)

    assert config.settings_for("anything") == QueueSettings(name="anything")


@pytest.mark.parametrize(
    ("properties", "names"),
    [
        ({"RequiresSession": True}, "RequiresSession"),
        ({"ForwardTo": "other"}, "ForwardTo"),
        ({"ForwardDeadLetteredMessagesTo": "other"}, "ForwardDeadLetteredMessagesTo"),
        ({"MaxDeliveryCount": "3"}, "MaxDeliveryCount"),
        ({"MaxDeliveryCount": 0}, "MaxDeliveryCount"),
        ({"LockDuration": "PT0S"}, "LockDuration"),
        ({"LockDuration": "one minute"}, "LockDuration"),
        ({"RequiresDuplicateDetection": "yes"}, "RequiresDuplicateDetection"),
    ],
)
def test_unusable_properties_are_refused_naming_the_queue_and_property(
    properties: dict[str, Any], names: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(_queue_with(**properties))

    assert "'orders'" in str(raised.value)
    assert repr(names) in str(raised.value)


def test_unknown_properties_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = parse_config(_queue_with(Colour="blue", MaxSizeInMegabytes=1024))

    assert config.queues["orders"].max_delivery_count == 10
    assert "property=Colour" in caplog.text
    assert "MaxSizeInMegabytes" not in caplog.text


def test_a_queue_defined_twice_in_different_case_is_refused() -> None:
    with pytest.raises(ConfigError, match="defined twice"):
        parse_config(_document([{"Name": "orders"}, {"Name": "ORDERS"}]))


@pytest.mark.parametrize(
    ("document", "hint"),
    [
        ({}, "UserConfig"),
        ({"UserConfig": {"Namespaces": []}}, "exactly one namespace"),
        ({"UserConfig": {"Namespaces": [{"Queues": []}]}}, "Name"),
        (_document([{"Name": ""}]), "Queues[0].Name"),
        (_document([{"Name": "orders/$deadletterqueue"}]), "no '$'"),
    ],
)
def test_malformed_documents_say_what_is_missing(document: dict[str, Any], hint: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(document)

    assert hint in str(raised.value)


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(EMULATOR_SAMPLE), encoding="utf-8")

    config = load_config(path, auto_create=True)

    assert set(config.queues) == {"queue.1"}
    assert config.auto_create is True


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(_queue_with(RequiresSession=True)), encoding="utf-8")

    with pytest.raises(ConfigError) as raised:
        load_config(path)

    assert str(path) in str(raised.value)
    assert "RequiresSession" in str(raised.value)


def test_load_config_reports_invalid_json_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "Config.json"
    path.write_text('{\n  "UserConfig": ,\n}', encoding="utf-8")

    with pytest.raises(ConfigError, match="line 2"):
        load_config(path)


def test_load_config_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.json")
