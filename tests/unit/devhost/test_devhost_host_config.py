"""host.json: the devhost honours the host's Service Bus, HTTP and Durable settings."""

import datetime as dt
import os
from pathlib import Path

import pytest

from devhost.host_config import HostConfig, HostConfigError, parse_timespan


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
