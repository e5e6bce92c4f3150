"""Six-field NCRONTAB schedules, as Azure Functions timer triggers use them.

Format: ``{second} {minute} {hour} {day} {month} {day-of-week}``. Each field takes ``*``,
numbers, ranges ``a-b``, lists ``a,b`` and steps ``*/n`` / ``a-b/n`` / ``a/n``; months and
days of week also take English names (``Jan``, ``Mon``). Day of week runs 0-6 from Sunday
(7 is accepted as Sunday too).

As in NCrontab, which the Functions host uses, a time matches only when the day of month
AND the day of week both match (classic Unix cron ORs them when both are restricted).
Users bring the STARTER_SCHEDULE / SUPERVISOR_SCHEDULE settings (U7) in this format.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


class ScheduleError(ValueError):
    """The schedule text is not a valid six-field NCRONTAB expression."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0


_FIELDS = (
    _Field("second", 0, 59),
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day-of-week", 0, 7, _DAYS, 0),
)


def _value(text: str, field: _Field, expression: str) -> int:
    lowered = text.lower()
    if lowered in field.names:
        return field.names.index(lowered) + field.name_base
    if not text.isdigit():
        raise ScheduleError(f"{expression!r}: {field.name} value {text!r} is not a number")
    number = int(text)
    if not field.low <= number <= field.high:
        raise ScheduleError(
            f"{expression!r}: {field.name} value {number} is outside {field.low}-{field.high}"
        )
    return number


def _parse_field(text: str, field: _Field, expression: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ScheduleError(f"{expression!r}: empty item in the {field.name} field")
        range_text, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(f"{expression!r}: bad step {step_text!r} in {field.name}")
            step = int(step_text)
        if range_text == "*":
            low, high = field.low, field.high
        elif "-" in range_text:
            first, _, last = range_text.partition("-")
            low, high = _value(first, field, expression), _value(last, field, expression)
            if low > high:
                raise ScheduleError(f"{expression!r}: {field.name} range {range_text} is reversed")
        else:
            low = _value(range_text, field, expression)
            high = field.high if step_text else low
        values.update(range(low, high + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed schedule; ``next_after`` gives the next firing time strictly after a moment."""

    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        parts = expression.split()
        if len(parts) != 6:
            raise ScheduleError(
                f"{expression!r}: NCRONTAB needs six fields "
                "(second minute hour day month day-of-week), "
                f"got {len(parts)}"
            )
        seconds, minutes, hours, days, months, weekdays = (
            _parse_field(p, f, expression) for p, f in zip(parts, _FIELDS, strict=True)
        )
        sunday_as_zero = frozenset(d % 7 for d in weekdays)
        return cls(expression, seconds, minutes, hours, days, months, sunday_as_zero)

    def _day_matches(self, moment: dt.datetime) -> bool:
        # Python's weekday() is Monday=0; NCRONTAB's is Sunday=0.
        return moment.day in self.days and (moment.weekday() + 1) % 7 in self.weekdays

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first matching second after ``moment`` (kept in moment's time zone)."""
        candidate = moment.replace(microsecond=0) + dt.timedelta(seconds=1)
        # Each step jumps to the start of the next month/day/hour/minute that could match,
        # so the loop is bounded by a few thousand iterations even for yearly schedules.
        limit = candidate + dt.timedelta(days=366 * 5)
        while candidate < limit:
            if candidate.month not in self.months:
                year = candidate.year + (candidate.month == 12)
                month = candidate.month % 12 + 1
                candidate = candidate.replace(year=year, month=month, day=1, hour=0, minute=0)
                candidate = candidate.replace(second=0)
            elif not self._day_matches(candidate):
                candidate = (candidate + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0)
            elif candidate.hour not in self.hours:
                candidate = (candidate + dt.timedelta(hours=1)).replace(minute=0, second=0)
            elif candidate.minute not in self.minutes:
                candidate = (candidate + dt.timedelta(minutes=1)).replace(second=0)
            elif candidate.second not in self.seconds:
                candidate += dt.timedelta(seconds=1)
            else:
                return candidate
        raise ScheduleError(f"{self.expression!r} never fires within five years")
