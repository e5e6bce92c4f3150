"""NCRONTAB schedules for timer triggers (U7: the starter's and supervisor's cadence)."""

import datetime as dt

import pytest

from devhost.ncrontab import CronSchedule, ScheduleError

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * * *", "2026-01-01T00:00:03", "2026-01-01T00:00:05"),
        ("*/5 * * * * *", "2026-01-01T00:00:05", "2026-01-01T00:00:10"),
        ("0 */5 * * * *", "2026-01-01T00:04:59", "2026-01-01T00:05:00"),
        ("0 0 * * * *", "2026-01-01T23:30:00", "2026-01-02T00:00:00"),
        ("30 15 9 * * *", "2026-01-01T09:15:30", "2026-01-02T09:15:30"),
        ("0 0 0 1 * *", "2026-01-15T00:00:00", "2026-02-01T00:00:00"),
        ("0 0 0 29 Feb *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),
        ("0 0 12 * * Mon-Fri", "2026-11-27T12:00:00", "2026-11-30T12:00:00"),
        ("0 0 12 * * 0", "2026-11-27T00:00:00", "2026-11-29T12:00:00"),
        ("0 0 12 * * 7", "2026-11-27T00:00:00", "2026-11-29T12:00:00"),
        ("0 0 0 * Dec *", "2026-12-31T00:00:00", "2027-12-01T00:00:00"),
        ("5,10-12 0 0 * * *", "2026-01-01T00:00:10", "2026-01-01T00:00:11"),
        ("10/20 * * * * *", "2026-01-01T00:00:31", "2026-01-01T00:00:50"),
    ],
)
def test_next_occurrence(expression: str, after: str, expected: str) -> None:
    assert CronSchedule.parse(expression).next_after(at(after)) == at(expected)


def test_day_of_month_and_day_of_week_must_both_match() -> None:
    # The 13th that is also a Friday: NCrontab ANDs the two day fields.
    schedule = CronSchedule.parse("0 0 0 13 * Fri")
    assert schedule.next_after(at("2026-01-01T00:00:00")) == at("2026-02-13T00:00:00")


def test_sub_second_start_is_truncated_not_skipped() -> None:
    moment = at("2026-01-01T00:00:04.900000")
    assert CronSchedule.parse("*/5 * * * * *").next_after(moment) == at("2026-01-01T00:00:05")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * * *", "six fields"),
        ("60 * * * * *", "outside 0-59"),
        ("* * 24 * * *", "outside 0-23"),
        ("* * * 0 * *", "outside 1-31"),
        ("*/0 * * * * *", "bad step"),
        ("5-1 * * * * *", "reversed"),
        ("* * * * Foo *", "not a number"),
        ("1,,2 * * * * *", "empty item"),
    ],
)
def test_invalid_schedules_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        CronSchedule.parse(expression)


def test_schedule_that_never_fires_is_reported() -> None:
    with pytest.raises(ScheduleError, match="never fires"):
        CronSchedule.parse("0 0 0 31 Feb *").next_after(at("2026-01-01T00:00:00"))
