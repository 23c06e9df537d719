"""When periodic tasks fire: fixed intervals and cron expressions, as pure functions of a time.

Every scheduler must compute the same ticks, or "once per tick" could not be
checked by pid. So ticks are absolute, never relative to when a scheduler
started: `Every(60)` fires at each multiple of 60 s since the Unix epoch, and
a cron expression at the minutes it names, both in UTC. A tick is a timezone-
aware UTC `datetime`; its pid is `envelope.tick_pid(name, tick)`.

Cron: five fields — minute (0-59), hour (0-23), day of month (1-31), month
(1-12 or jan-dec), day of week (0-7 or sun-sat, 0 and 7 are Sunday) — each
``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma list
of those; ``@hourly``, ``@daily``, ``@weekly``, ``@monthly`` and ``@yearly``
are shorthands. As in Vixie cron, when both day fields are restricted a day
matching either one fires.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Protocol

_MONTHS = {name: index for index, name in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), start=1)}
_DAYS = {name: index for index, name in enumerate("sun mon tue wed thu fri sat".split())}
_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


class Schedule(Protocol):
    def last_tick(self, now: datetime) -> datetime:
        """The latest tick at or before `now`."""
        ...

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after `after`."""
        ...


def utc(moment: datetime | float) -> datetime:
    if isinstance(moment, (int, float)):
        return datetime.fromtimestamp(moment, tz=timezone.utc)
    if moment.tzinfo is None:
        raise ValueError("naive datetimes are ambiguous: give a timezone")
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True, slots=True)
class Every:
    """A tick at every multiple of `secs` seconds since the epoch (whole seconds, at least 1)."""

    secs: float

    def __post_init__(self) -> None:
        if self.secs < 1 or self.secs != int(self.secs):
            raise ValueError("every= takes a whole number of seconds, at least 1")

    def last_tick(self, now: datetime) -> datetime:
        stamp = utc(now).timestamp()
        return utc(math.floor(stamp / self.secs) * self.secs)

    def next_tick(self, after: datetime) -> datetime:
        stamp = utc(after).timestamp()
        return utc((math.floor(stamp / self.secs) + 1) * self.secs)


def _parse_value(text: str, low: int, names: dict[str, int] | None) -> int:
    text = text.strip().lower()
    if names and text in names:
        return names[text]
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number")
    return int(text)


def _parse_field(text: str, low: int, high: int, names: dict[str, int] | None = None) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError("an empty list entry")
        range_text, slash, step_text = part.partition("/")
        step = int(step_text) if slash else 1
        if slash and (not step_text.isdigit() or step < 1):
            raise ValueError(f"bad step in {part!r}")
        if range_text == "*":
            start, end = low, high
        elif "-" in range_text:
            first, _, last = range_text.partition("-")
            start, end = _parse_value(first, low, names), _parse_value(last, low, names)
        else:
            start = _parse_value(range_text, low, names)
            end = high if slash else start
        if not (low <= start <= high and low <= end <= high) or start > end:
            raise ValueError(f"{part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression (UTC), parsed once; see the module docstring for the syntax."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is "*"
    any_weekday: bool  # day of week is "*"

    @classmethod
    def parse(cls, expression: str) -> Cron:
        text = _ALIASES.get(expression.strip().lower(), expression)
        fields = text.split()
        if len(fields) != 5:
            raise ValueError(f"cron {expression!r} needs 5 fields: minute hour day-of-month month day-of-week")
        try:
            weekdays = _parse_field(fields[4], 0, 7, _DAYS)
            return cls(
                expression=expression,
                minutes=_parse_field(fields[0], 0, 59),
                hours=_parse_field(fields[1], 0, 23),
                days=_parse_field(fields[2], 1, 31),
                months=_parse_field(fields[3], 1, 12, _MONTHS),
                weekdays=frozenset(day % 7 for day in weekdays),
                any_day=fields[2].strip() == "*",
                any_weekday=fields[4].strip() == "*",
            )
        except ValueError as error:
            raise ValueError(f"cron {expression!r}: {error}") from None

    def _day_matches(self, moment: datetime) -> bool:
        if moment.month not in self.months:
            return False
        in_days = moment.day in self.days
        in_weekdays = (moment.weekday() + 1) % 7 in self.weekdays  # Python: Monday = 0
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return in_weekdays
        if self.any_weekday:
            return in_days
        return in_days or in_weekdays

    def next_tick(self, after: datetime) -> datetime:
        moment = utc(after).replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = moment + timedelta(days=366 * 8)  # Feb 29 on a given weekday can take years
        while moment < limit:
            if not self._day_matches(moment):
                moment = (moment + timedelta(days=1)).replace(hour=0, minute=0)
                continue
            if moment.hour not in self.hours:
                moment = (moment + timedelta(hours=1)).replace(minute=0)
                continue
            if moment.minute not in self.minutes:
                moment += timedelta(minutes=1)
                continue
            return moment
        raise ValueError(f"cron {self.expression!r} never fires")

    def last_tick(self, now: datetime) -> datetime:
        moment = utc(now).replace(second=0, microsecond=0)
        limit = moment - timedelta(days=366 * 8)
        while moment > limit:
            if not self._day_matches(moment):
                moment = moment.replace(hour=23, minute=59) - timedelta(days=1)
                continue
            if moment.hour not in self.hours:
                moment = moment.replace(minute=59) - timedelta(hours=1)
                continue
            if moment.minute not in self.minutes:
                moment -= timedelta(minutes=1)
                continue
            return moment
        raise ValueError(f"cron {self.expression!r} never fired")


def make_schedule(every: float | timedelta | None = None, cron: str | None = None) -> Schedule:
    """`Every` or `Cron` from the keywords of `@app.periodic` (exactly one of them)."""
    if (every is None) == (cron is None):
        raise ValueError("give every= or cron=, exactly one")
    if every is not None:
        secs = every.total_seconds() if isinstance(every, timedelta) else float(every)
        return Every(secs)
    assert cron is not None
    return Cron.parse(cron)
