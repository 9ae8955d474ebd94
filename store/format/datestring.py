"""Date strings read the way V8 reads them for ``new Date(text)`` and ``Date.parse``.

V8 first tries the ECMAScript Date Time String Format (``2025-02-01T09:00:00.000Z`` and its
shorter forms).  Where the text leaves that format part-way without breaking it, V8 carries on
with a permissive "legacy" reader modelled on Safari's, which is why ``"Feb 1 2025"``,
``"Sat, 01 Feb 2025 09:00:00 GMT"``, ``"2025/02/01"``, ``"2025-02-01 09:00"`` and even
``"2/3"`` (3 February 2001) are dates in Node.  Pi orders tree children and stamps messages with
whatever Node makes of an entry's ``timestamp``, so this module reproduces that reader rule for
rule (tokens, the three field collectors, their defaults) and returns the fields it finds;
:mod:`store.format.jsdate` turns them into a time value.

The reader works on UTF-16 code units, as V8 does: a character is a "word" character when its
code unit is ``'A'`` (0x41) or above and not white space — any other non-ASCII text included —,
a NUL ends the text, and a numeral's value is its first nine digits after its leading zeros
(so ``.0123456789`` is 123 milliseconds in Node, ``.012345678`` is 12).  Where this differs from
the published V8 sources, it follows what the oracle's Node 22 does.
"""

from dataclasses import dataclass
from enum import Enum, auto

__all__ = ["DateFields", "read_date_string"]

_MAX_DIGITS = 9  # digits of a numeral that count after its leading zeros; the rest are skipped
_SMI_MAX = 2**31 - 1  # the largest offset in seconds V8 accepts (wrapping 32-bit arithmetic)


@dataclass(frozen=True, slots=True)
class DateFields:
    """What a date string says: calendar fields and the UTC offset in seconds (None: local time).

    ``month`` is 1-12 and ``day`` 1-31 (the day is not checked against the month: 30 February
    is 2 March); ``hour`` may be 24 when the rest of the time is zero.
    """

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    millisecond: int
    offset_seconds: int | None


class _Kind(Enum):
    NUMBER = auto()
    SYMBOL = auto()
    WORD = auto()
    SPACE = auto()
    OTHER = auto()
    END = auto()


class _Word(Enum):
    """What a word means; UNKNOWN words are still words (ignored before the first number)."""

    UNKNOWN = auto()
    MONTH = auto()
    ZONE = auto()
    SEPARATOR = auto()
    AM_PM = auto()


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    value: int = 0  # a number's value, a symbol's code unit, a keyword's value
    length: int = 0  # characters in a number or a word
    word: _Word = _Word.UNKNOWN

    def is_symbol(self, char: str) -> bool:
        return self.kind is _Kind.SYMBOL and self.value == ord(char)

    def is_sign(self) -> bool:
        return self.kind is _Kind.SYMBOL and self.value in (0x2B, 0x2D)

    def sign(self) -> int:
        return 1 if self.value == 0x2B else -1

    def is_number(self, length: int | None = None) -> bool:
        return self.kind is _Kind.NUMBER and (length is None or self.length == length)

    def is_zulu(self) -> bool:
        return self.kind is _Kind.WORD and self.word is _Word.ZONE and self.length == 1 and self.value == 0


_END = _Token(_Kind.END)
_OTHER = _Token(_Kind.OTHER, length=1)
_SPACE = _Token(_Kind.SPACE, length=1)


def _keywords() -> dict[tuple[int, int, int], tuple[_Word, int]]:
    """Keywords by their first three lower-cased code units (zero-padded)."""
    table: list[tuple[str, _Word, int]] = [
        *((name, _Word.MONTH, number) for number, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)),
        ("am", _Word.AM_PM, 0), ("pm", _Word.AM_PM, 12),
        ("ut", _Word.ZONE, 0), ("utc", _Word.ZONE, 0), ("z", _Word.ZONE, 0), ("gmt", _Word.ZONE, 0),
        ("cdt", _Word.ZONE, -5), ("cst", _Word.ZONE, -6), ("edt", _Word.ZONE, -4), ("est", _Word.ZONE, -5),
        ("mdt", _Word.ZONE, -6), ("mst", _Word.ZONE, -7), ("pdt", _Word.ZONE, -7), ("pst", _Word.ZONE, -8),
        ("t", _Word.SEPARATOR, 0),
    ]
    keyed = {}
    for name, word, value in table:
        units = [ord(char) for char in name] + [0] * (3 - len(name))
        keyed[(units[0], units[1], units[2])] = (word, value)
    return keyed


_KEYWORDS = _keywords()
_SYMBOLS = frozenset(map(ord, ":-+.)"))
_SPACES = frozenset((0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20))
# White space at or above 'A' (Unicode Zs and the BOM); the line terminators U+2028/U+2029 are
# word characters to V8's reader.
_WIDE_SPACES = frozenset((0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000, 0xFEFF))


class _Scanner:
    """Tokens of the text with one token of look-ahead (``peek``)."""

    def __init__(self, units: list[int]) -> None:
        self._units = units
        self._pos = 0
        self._next = self._scan()

    def _char(self) -> int:
        return self._units[self._pos] if self._pos < len(self._units) else 0

    def _scan(self) -> _Token:
        char = self._char()
        if char == 0:
            return _END
        if 0x30 <= char <= 0x39:
            value = length = significant = 0
            while 0x30 <= (char := self._char()) <= 0x39:
                if (value or char != 0x30) and significant < _MAX_DIGITS:  # leading zeros only count in the length
                    value = value * 10 + char - 0x30
                    significant += 1
                length += 1
                self._pos += 1
            return _Token(_Kind.NUMBER, value, length)
        if char in _SYMBOLS:
            self._pos += 1
            return _Token(_Kind.SYMBOL, char, 1)
        if char >= 0x41 and char not in _WIDE_SPACES:
            prefix = [0, 0, 0]
            length = 0
            while (char := self._char()) >= 0x41 and char not in _WIDE_SPACES:
                if length < 3:
                    prefix[length] = char | 0x20  # lower case for ASCII letters; nothing else can match
                length += 1
                self._pos += 1
            word, value = _KEYWORDS.get((prefix[0], prefix[1], prefix[2]), (_Word.UNKNOWN, 0))
            if length > 3 and word is not _Word.MONTH:  # only month names may run on ("February")
                word, value = _Word.UNKNOWN, 0
            return _Token(_Kind.WORD, value, length, word)
        if char in _SPACES or char in _WIDE_SPACES:
            self._pos += 1
            return _SPACE
        if char == 0x28:  # "(": skip a balanced group, or to the end
            depth = 0
            while True:
                char = self._char()
                depth += (char == 0x28) - (char == 0x29)
                self._pos += 1
                if depth <= 0 or self._char() == 0:
                    return _OTHER
        self._pos += 1
        return _OTHER

    def peek(self) -> _Token:
        return self._next

    def next(self) -> _Token:
        token = self._next
        self._next = self._scan()
        return token

    def skip(self, char: str) -> bool:
        if self._next.is_symbol(char):
            self._next = self._scan()
            return True
        return False


def _is_minute(n: int) -> bool:
    return 0 <= n <= 59


def _is_month(n: int) -> bool:
    return 1 <= n <= 12


def _is_day(n: int) -> bool:
    return 1 <= n <= 31


class _Day:
    """Up to three numbers and a named month; which is the year is decided at the end."""

    def __init__(self) -> None:
        self.parts: list[int] = []
        self.named_month: int | None = None
        self.iso = False  # a complete ISO date: always year, month, day

    def add(self, n: int) -> bool:
        if len(self.parts) >= 3:
            return False
        self.parts.append(n)
        return True

    def fields(self) -> tuple[int, int, int] | None:
        if not self.parts:
            return None
        first, second, third = self.parts + [1] * (3 - len(self.parts))
        if self.named_month is None:
            if self.iso or not _is_day(first):
                year, month, day = first, second, third
            else:
                month, day, year = first, second, third
        else:
            month = self.named_month
            year, day = (first, second) if not _is_day(first) else (second, first)
        if not self.iso:
            if 0 <= year <= 49:
                year += 2000
            elif 50 <= year <= 99:
                year += 1900
        if not (_is_month(month) and _is_day(day)):
            return None
        return year, month, day


class _Time:
    """Hour, minute, second, millisecond in order, and an am/pm adjustment."""

    def __init__(self) -> None:
        self.parts: list[int] = []
        self.hour_offset: int | None = None

    def empty(self) -> bool:
        return not self.parts

    def expects(self, n: int) -> bool:
        index = len(self.parts)
        return (index in (1, 2) and _is_minute(n)) or (index == 3 and 0 <= n <= 999)

    def add(self, n: int) -> bool:
        if len(self.parts) >= 4:
            return False
        self.parts.append(n)
        return True

    def add_last(self, n: int) -> None:
        self.add(n)
        self.parts += [0] * (4 - len(self.parts))

    def fields(self) -> tuple[int, int, int, int] | None:
        hour, minute, second, millisecond = self.parts + [0] * (4 - len(self.parts))
        if self.hour_offset is not None:
            if not 0 <= hour <= 12:
                return None
            hour = hour % 12 + self.hour_offset
        in_range = 0 <= hour <= 23 and _is_minute(minute) and _is_minute(second) and 0 <= millisecond <= 999
        if not in_range and (hour, minute, second, millisecond) != (24, 0, 0, 0):
            return None
        return hour, minute, second, millisecond


class _Zone:
    """A UTC offset: sign, hours, minutes (None until given)."""

    def __init__(self) -> None:
        self.sign: int | None = None
        self.hours: int | None = None
        self.minutes: int | None = None

    def set_hours(self, signed_hours: int) -> None:
        self.sign = -1 if signed_hours < 0 else 1
        self.hours = abs(signed_hours)
        self.minutes = 0

    def expects_minutes(self, n: int) -> bool:
        return self.hours is not None and self.minutes is None and _is_minute(n)

    def is_utc(self) -> bool:
        return self.hours == 0 and self.minutes == 0

    def offset_seconds(self) -> tuple[bool, int | None]:
        """(valid, seconds east of UTC or None for local time)."""
        if self.sign is None:
            return True, None
        total = ((self.hours or 0) * 3600 + (self.minutes or 0) * 60) % 2**32  # V8 adds as uint32
        if total > _SMI_MAX:
            return False, None
        return True, total * self.sign


def _milliseconds(token: _Token) -> int:
    """The first three digits of a fraction, from the numeral's value and its digit count."""
    value, length = token.value, min(token.length, _MAX_DIGITS)
    if length < 3:
        return value * 10 ** (3 - length)
    return value // 10 ** (length - 3)


def _read_iso(scanner: _Scanner, day: _Day, time: _Time, zone: _Zone) -> _Token | None:
    """As much of the ISO format as the text has.  Returns the end token when the text is all
    ISO, None when it breaks the format past the point of no return (a ``T``: not a date), else
    the first token the fallback reader must take."""
    if scanner.peek().is_sign():
        sign = scanner.next()
        if not scanner.peek().is_number(6):
            return sign
        year = scanner.next().value
        if sign.sign() < 0 and year == 0:
            return sign  # -000000 is not a year; the six zeros are dropped
        day.add(sign.sign() * year)
    elif scanner.peek().is_number(4):
        day.add(scanner.next().value)
    else:
        return scanner.next()
    if scanner.skip("-"):
        if not (scanner.peek().is_number(2) and _is_month(scanner.peek().value)):
            return scanner.next()
        day.add(scanner.next().value)
        if scanner.skip("-"):
            if not (scanner.peek().is_number(2) and _is_day(scanner.peek().value)):
                return scanner.next()
            day.add(scanner.next().value)
    separator = scanner.peek()
    if not (separator.kind is _Kind.WORD and separator.word is _Word.SEPARATOR):
        if separator.kind is not _Kind.END:
            return scanner.next()
    elif not _read_iso_time(scanner, time, zone):
        return None
    if zone.hours is None and time.empty():
        zone.set_hours(0)  # a date without a time is UTC; a date-time without an offset is local
    day.iso = True
    return _END


def _two_digit_part(token: _Token, midnight: bool) -> bool:
    """A minute or second of the ISO time: two digits, 00-59, 00 after hour 24."""
    return token.is_number(2) and _is_minute(token.value) and not (midnight and token.value > 0)


def _read_iso_time(scanner: _Scanner, time: _Time, zone: _Zone) -> bool:
    """``THH:mm[:ss[.sss]][Z|±hh:mm|±hhmm]`` to the end of the text; False where it is not."""
    scanner.next()
    hour = scanner.peek()
    if not (hour.is_number(2) and hour.value <= 24):
        return False
    midnight = hour.value == 24  # 24:00[:00[.000]] only
    time.add(scanner.next().value)
    if not scanner.skip(":"):
        return False
    if not _two_digit_part(scanner.peek(), midnight):
        return False
    time.add(scanner.next().value)
    if scanner.skip(":"):
        if not _two_digit_part(scanner.peek(), midnight):
            return False
        time.add(scanner.next().value)
        if scanner.skip("."):
            if not scanner.peek().is_number() or (midnight and scanner.peek().value > 0):
                return False
            time.add(_milliseconds(scanner.next()))
    following = scanner.peek()
    if following.is_zulu():
        scanner.next()
        zone.set_hours(0)
    elif following.is_sign():
        zone.sign = scanner.next().sign()
        if scanner.peek().is_number(4):
            hours, minutes = divmod(scanner.next().value, 100)
            if not (hours <= 23 and _is_minute(minutes)):
                return False
            zone.hours, zone.minutes = hours, minutes
        else:
            if not (scanner.peek().is_number(2) and scanner.peek().value <= 23):
                return False
            zone.hours = scanner.next().value
            if not scanner.skip(":"):
                return False
            if not (scanner.peek().is_number(2) and _is_minute(scanner.peek().value)):
                return False
            zone.minutes = scanner.next().value
    return scanner.peek().kind is _Kind.END


def _read_fallback(scanner: _Scanner, token: _Token, day: _Day, time: _Time, zone: _Zone) -> bool:
    """V8's legacy reader from ``token`` on: numbers with ``:`` are times, other numbers are day
    parts, words are months, zones, am/pm or (before any number) noise.  False: not a date."""
    seen_number = bool(day.parts)
    while token.kind is not _Kind.END:
        if token.kind is _Kind.NUMBER:
            seen_number = True
            n = token.value
            if scanner.skip(":"):
                if scanner.skip(":"):  # "n::" is an hour and a zero minute
                    if not time.empty():
                        return False
                    time.add(n)
                    time.add(0)
                else:
                    if not time.add(n):
                        return False
                    if scanner.peek().is_symbol("."):
                        scanner.next()
            elif scanner.skip(".") and time.expects(n):  # the "." is taken even when n is no time part
                time.add(n)
                if not scanner.peek().is_number():
                    return False
                time.add_last(_milliseconds(scanner.next()))
            elif zone.expects_minutes(n):
                zone.minutes = n
            elif time.expects(n):
                time.add_last(n)
                after = scanner.peek()
                if after.kind not in (_Kind.END, _Kind.SPACE) and not after.is_zulu() and not after.is_sign():
                    return False
            else:
                if not day.add(n):
                    return False
                scanner.skip("-")
        elif token.kind is _Kind.WORD:
            if token.word is _Word.AM_PM and not time.empty():
                time.hour_offset = token.value
            elif token.word is _Word.MONTH:
                day.named_month = token.value
                scanner.skip("-")
            elif token.word is _Word.ZONE and seen_number:
                zone.set_hours(token.value)
            elif seen_number or scanner.peek().is_number():
                return False  # noise words only before the first number, and apart from it
        elif token.is_sign() and (zone.is_utc() or not time.empty()):
            zone.sign = token.sign()  # an offset after a time or after UTC/GMT
            n = length = 0
            if scanner.peek().is_number():
                number = scanner.next()
                n, length = number.value, number.length
            seen_number = True
            if scanner.peek().is_symbol(":"):
                zone.hours, zone.minutes = n, None  # the minutes may follow as a number
            elif length in (1, 2):
                zone.hours, zone.minutes = n, 0
            elif length in (3, 4):
                zone.hours, zone.minutes = divmod(n, 100)
            else:
                return False
        elif (token.is_sign() or token.is_symbol(")")) and seen_number:
            return False
        token = scanner.next()
    return True


def _utf16_units(text: str) -> list[int]:
    """The text's UTF-16 code units up to its first NUL (where V8's reader sees the end)."""
    text = text.split("\0", 1)[0]
    if text.isascii():
        return list(text.encode("ascii"))
    return list(memoryview(text.encode("utf-16-le", "surrogatepass")).cast("H"))


def read_date_string(text: str) -> DateFields | None:
    """The fields of a date string as ``Date.parse`` reads it in V8; None where it gives NaN
    (before any range check: the caller turns the fields into a time value)."""
    scanner = _Scanner(_utf16_units(text))
    day, time, zone = _Day(), _Time(), _Zone()
    token = _read_iso(scanner, day, time, zone)
    if token is None or not _read_fallback(scanner, token, day, time, zone):
        return None
    date, clock = day.fields(), time.fields()
    valid, offset = zone.offset_seconds()
    if date is None or clock is None or not valid:
        return None
    return DateFields(*date, *clock, offset)
