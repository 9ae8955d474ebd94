"""JavaScript ``Date`` arithmetic as Pi uses it: ``new Date(value).getTime()`` and ``toISOString``.

Pi orders tree children by ``new Date(entry.timestamp).getTime()`` and turns entry timestamps
into message timestamps the same way, so an odd timestamp must give the very same number here.

Local time is UTC: a date-time string without an offset is *local* time in JavaScript (date-only
forms are UTC), and the reference oracle runs with ``TZ=UTC``, so both are read as UTC.
"""

import re
from typing import Any

from store.format.jsjson import js_string

__all__ = ["js_iso", "parse_js_date"]

_MS_PER_DAY = 86_400_000
_MAX_TIME = 8.64e15  # the Date range: 100,000,000 days either side of the epoch

# The ECMAScript Date Time String Format as V8 reads it (T and Z in either case, fractions of
# any length truncated to milliseconds), plus two variants V8's fallback parser accepts with
# the same meaning: a space instead of the T (years 100 and later: the fallback reads years
# 0-99 as 1950-2049) and an offset without the colon (+0100).  Anything else gives NaN here,
# although V8's fallback accepts more ("Feb 1 2025", "2025/02/01", offsets beyond 23:59 after a
# space...).
_DATE_TIME = re.compile(
    r"""
    (?P<year>[+-][0-9]{6}|[0-9]{4})
    (?:-(?P<month>[0-9]{2})(?:-(?P<day>[0-9]{2}))?)?
    (?:(?P<separator>[Tt ])
        (?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})
        (?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]+))?)?
        (?:[Zz]|(?P<sign>[+-])(?P<off_hour>[0-9]{2}):?(?P<off_minute>[0-9]{2}))?
    )?
    """,
    re.VERBOSE,
)


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


def _parse_string(text: str) -> float | None:
    match = _DATE_TIME.fullmatch(text)
    if match is None or match["year"] == "-000000":
        return None
    year = int(match["year"])
    if match["separator"] == " " and 0 <= year < 100:
        return None
    month = int(match["month"] or 1)
    day = int(match["day"] or 1)
    hour = int(match["hour"] or 0)
    minute = int(match["minute"] or 0)
    second = int(match["second"] or 0)
    millis = int((match["fraction"] or "0")[:3].ljust(3, "0"))
    if not (1 <= month <= 12 and 1 <= day <= 31 and minute <= 59 and second <= 59):
        return None  # V8 checks the day against 31 only: "2025-02-30" is March 2nd
    if hour > 24 or (hour == 24 and (minute or second or millis)):
        return None
    offset = 0
    if match["sign"]:
        off_hour, off_minute = int(match["off_hour"]), int(match["off_minute"])
        if off_hour > 23 or off_minute > 59:
            return None
        offset = (off_hour * 60 + off_minute) * 60_000 * (1 if match["sign"] == "+" else -1)
    days = _days_from_civil(year, month, day)
    return _time_clip(days * _MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis - offset)


def parse_js_date(value: Any) -> float | None:
    """``new Date(value).getTime()`` for a JSON value; None where JavaScript gives NaN.

    Numbers are clipped to the Date range and truncated; null is the epoch, booleans 0/1;
    strings are read as described in the module docstring; arrays go through their string
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
