"""The language worker's fast timestamp parse returns exactly what the Durable SDK's would."""

from __future__ import annotations

import datetime as dt

import pytest
from dateutil.parser import parse as dateutil_parse

from devhost.durable.history import format_timestamp
from devhost.language_worker import history_timestamp


@pytest.mark.parametrize(
    "text",
    [
        format_timestamp(dt.datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=dt.UTC)),
        format_timestamp(dt.datetime(2026, 2, 28, 23, 59, 59, tzinfo=dt.UTC)),
        format_timestamp(dt.datetime(2024, 2, 29, 0, 0, 0, 1, tzinfo=dt.UTC)),
        # Not the engine's fixed form: dateutil reads these as the SDK always did.
        "2026-11-29T12:00:00Z",
        "2026-11-29T12:00:00.1234567Z",
        "2026-11-29T12:00:00.123456+02:00",
        "2026-11-29T12:00:00.123456",
        "2026-11-29 12:00:00.123456Z",
    ],
)
def test_same_moment_and_timezone_as_dateutil(text: str) -> None:
    fast, slow = history_timestamp(text), dateutil_parse(text)
    assert fast == slow
    assert type(fast.tzinfo) is type(slow.tzinfo)
    assert fast.utcoffset() == slow.utcoffset()
    assert repr(fast) == repr(slow)


def test_an_impossible_date_in_the_fixed_form_fails_as_dateutil_does() -> None:
    with pytest.raises(ValueError, match="out of range"):
        dateutil_parse("2026-02-30T12:00:00.000000Z")
    with pytest.raises(ValueError, match="out of range"):
        history_timestamp("2026-02-30T12:00:00.000000Z")
