"""JavaScript ``Date`` arithmetic as Pi uses it: ``new Date(value).getTime()`` and ``toISOString``.

Pi orders tree children by ``new Date(entry.timestamp).getTime()`` and turns entry timestamps
into message timestamps the same way, so an odd timestamp must give the very same number here.

Local time is UTC: a date-time string without an offset is *local* time in JavaScript (date-only
forms are UTC), and the reference oracle runs with ``TZ=UTC``, so both are read as UTC.
"""

import re
from typing import Any

from store.format.datestring import DateFields, read_date_string
from store.format.jsjson import js_string

__all__ = ["js_iso", "parse_iso_date", "parse_js_date"]

_MS_PER_DAY = 86_400_000
_MAX_TIME = 8.64e15  # the Date range: 100,000,000 days either side of the epoch

# The ECMAScript Date Time String Format, the form every Pi timestamp has: read here directly
# (fractions of up to nine digits truncated to milliseconds, T and Z in either case, offsets with
# or without the colon).  Any other text goes through V8's whole reader (store.format.datestring),
# which gives the same fields for these strings and also reads its fallback forms.
_ISO = re.compile(
    r"""
    (?P<year>\+[0-9]{6}|-(?!000000)[0-9]{6}|[0-9]{4})  # -000000 is no year (V8 then reads on)
    (?:-(?P<month>0[1-9]|1[0-2])(?:-(?P<day>0[1-9]|[12][0-9]|3[01]))?)?
    (?:[Tt]
        (?P<hour>[0-9]{2}):(?P<minute>[0-5][0-9])
        (?::(?P<second>[0-5][0-9])(?:\.(?P<fraction>[0-9]{1,9}))?)?
        (?P<zone>[Zz]|(?P<sign>[+-])(?P<off_hour>[01][0-9]|2[0-3]):?(?P<off_minute>[0-5][0-9]))?
    )?
    """,
    re.VERBOSE,
)
_MAX_YEAR = 1_000_000  # V8's MakeDay gives NaN for years beyond this either side


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (any year, day may overflow)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day number from ``_days_from_civil``."""
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def _time_clip(time: float) -> float | None:
    """ECMAScript TimeClip: None (NaN) outside the Date range, else truncated toward zero."""
    if time != time or abs(time) > _MAX_TIME:  # NaN, infinities, huge ints
        return None
    return float(int(time))  # int() also turns -0.0 into 0


def storable_ms(ms: float) -> int:
    """A time value as a 64-bit integer column holds it: exact inside the Date range, else one
    past its edge (still invalid to :func:`js_iso`, still ordered like the value itself)."""
    if abs(ms) > _MAX_TIME:
        edge = int(_MAX_TIME) + 1
        return edge if ms > 0 else -edge
    return int(ms)


def _iso_time(match: re.Match[str]) -> float | None:
    """The time value of an ISO date-time string; None where V8 rejects it (an hour past 24)."""
    year, month, day, hour, minute, second, fraction, _, sign, off_hour, off_minute = match.groups()
    hours, minutes, seconds = int(hour or 0), int(minute or 0), int(second or 0)
    fraction = fraction or "0"
    if hours > 24 or (hours == 24 and (minutes or seconds or int(fraction))):
        return None
    offset = 0 if sign is None else (int(off_hour) * 60 + int(off_minute)) * (60_000 if sign == "+" else -60_000)
    clock = ((hours * 60 + minutes) * 60 + seconds) * 1000 + int(fraction[:3].ljust(3, "0")) - offset
    return _time_clip(_days_from_civil(int(year), int(month or 1), int(day or 1)) * _MS_PER_DAY + clock)


def _parse_string(text: str) -> float | None:
    match = _ISO.fullmatch(text)
    if match is not None:
        return _iso_time(match)
    fields = read_date_string(text)
    return None if fields is None else fields_time(fields)


def fields_time(fields: DateFields) -> float | None:
    """The time value of date-string fields (local time is UTC); None where V8 gives NaN (years
    beyond ±1,000,000 are NaN to V8's MakeDay, whatever the offset)."""
    if abs(fields.year) > _MAX_YEAR:
        return None
    clock = ((fields.hour * 60 + fields.minute) * 60 + fields.second) * 1000 + fields.millisecond
    days = _days_from_civil(fields.year, fields.month, fields.day)
    return _time_clip(days * _MS_PER_DAY + clock - (fields.offset_seconds or 0) * 1000)


def parse_iso_date(text: str) -> float | None:
    """The time value of a date typed by a person: the ISO format only (``2026-01-31``,
    ``2026-01-31T09:00Z``, a space for the T), None for anything else — unlike ``new Date``,
    which would take ``"5"`` for 1 May 2001.  Local time is UTC, as everywhere here."""
    match = _ISO.fullmatch(text) or _ISO.fullmatch(text.replace(" ", "T", 1))
    return None if match is None else _iso_time(match)


def parse_js_date(value: Any) -> float | None:
    """``new Date(value).getTime()`` for a JSON value; None where JavaScript gives NaN.

    Numbers are clipped to the Date range and truncated; null is the epoch, booleans 0/1;
    strings are read as V8 reads them (:mod:`store.format.datestring`); arrays go through their string
    form (``["2025-02-01"]`` is a date) and objects are NaN.  An absent value (``undefined``)
    is NaN in JavaScript: callers handle absence themselves.
    """
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return _time_clip(value)
    if isinstance(value, str):
        return _parse_string(value)
    return _parse_string(js_string(value))


def js_iso(ms: float | None) -> str | None:
    """``Date.prototype.toISOString()`` (also ``toJSON``) of a time value; None when invalid.

    ``ms`` None is an Invalid Date (NaN, as :func:`parse_js_date` returns it): toISOString
    throws a RangeError there, ``JSON.stringify`` writes null, and so does describe.mjs.
    Years outside 0..9999 are written in the extended form ``+YYYYYY`` / ``-YYYYYY``.
    """
    time = None if ms is None else _time_clip(ms)
    if time is None:
        return None
    days, rest = divmod(int(time), _MS_PER_DAY)
    year, month, day = _civil_from_days(days)
    seconds, millis = divmod(rest, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    year_text = f"{year:04d}" if 0 <= year <= 9999 else f"{'+' if year > 0 else '-'}{abs(year):06d}"
    return f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"
